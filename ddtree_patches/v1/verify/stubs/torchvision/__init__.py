"""CPU-import stub for torchvision (see notes/cpu-import-env.md).

The PyPI torchvision wheels do not load beside torch 2.13.0+cpu. sglang only
needs torchvision.io.decode_jpeg as a name at import time (srt/utils/common.py);
nothing on the ServerArgs / spec_info / graph-runner import path calls it.
"""
