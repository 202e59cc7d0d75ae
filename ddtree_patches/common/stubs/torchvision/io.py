"""Stub: only the names imported at module level on the CPU import path.

decode_jpeg: sglang srt/utils/common.py; ImageReadMode, decode_image:
transformers image_utils (imported because the stub makes torchvision
"available" to transformers' find_spec probe).
"""
import enum


class ImageReadMode(enum.Enum):
    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4


def _unavailable(*args, **kwargs):
    raise RuntimeError("torchvision stub: image decoding is not available here")


decode_jpeg = _unavailable
decode_image = _unavailable
