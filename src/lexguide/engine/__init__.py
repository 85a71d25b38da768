"""The constrained-decoding engine: token masks for a grammar over a vocabulary."""

from lexguide.engine.matcher import Matcher, apply_mask, fill_masks
from lexguide.engine.tokenizer_info import TokenizerInfo

__all__ = ["Matcher", "TokenizerInfo", "apply_mask", "fill_masks"]
