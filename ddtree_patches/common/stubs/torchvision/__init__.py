"""CPU-import stub for torchvision (declared in the manifest's ``[verify.env.stubs]``).

The PyPI torchvision wheels do not load beside torch 2.13.0+cpu. sglang only needs
torchvision.io.decode_jpeg as a name at import time (srt/utils/common.py); nothing on the
ServerArgs / spec_info / graph-runner / worker import path calls it.

``__version__`` is set because transformers 5.12 (what sglang 0.5.17 pins) compares the
torchvision version at import time (``is_torchvision_greater_or_equal``) and a module without one
reads as "N/A", which ``packaging`` refuses. A local version below every real release makes every
such comparison False, so transformers takes its no-torchvision code paths.
"""

__version__ = "0.0.0+cpu.stub"
