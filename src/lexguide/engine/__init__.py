"""The constrained-decoding engine: grammars lowered into the C++ core, and token masks for a
grammar over a vocabulary."""

from lexguide.engine.grammar import Grammar
from lexguide.engine.matcher import Matcher, apply_mask, fill_masks
from lexguide.engine.tokenizer_info import TokenizerInfo

__all__ = ["Grammar", "Matcher", "TokenizerInfo", "apply_mask", "fill_masks"]
