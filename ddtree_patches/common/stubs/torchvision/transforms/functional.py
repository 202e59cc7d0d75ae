"""Stub: pil_to_tensor (transformers) and InterpolationMode (sglang
srt/multimodal/internvl_utils.py, reached via srt/configs/__init__.py) are
imported at module level."""
from torchvision.transforms import InterpolationMode  # noqa: F401


def pil_to_tensor(*args, **kwargs):
    raise RuntimeError("torchvision stub: pil_to_tensor is not available here")
