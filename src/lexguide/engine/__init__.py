"""The constrained-decoding engine: grammars lowered into the C++ core, and token masks for a
grammar over a vocabulary."""

from lexguide.engine.grammar import Grammar
from lexguide.engine.matcher import Matcher, apply_mask, fill_masks
from lexguide.engine.threads import engine_threads, set_engine_threads
from lexguide.engine.tokenizer_info import TokenizerInfo

__all__ = ["Grammar", "Matcher", "TokenizerInfo", "apply_mask", "engine_threads", "fill_masks",
           "set_engine_threads"]
