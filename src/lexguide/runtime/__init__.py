"""The numpy runtime: run GGUF models (llama family, gemma3), sample, generate, chat.

``Model.from_gguf(path)`` loads a model; ``Model.generate`` / ``Model.chat`` return a
:class:`Completion` (or stream :class:`CompletionChunk` objects), optionally constrained by a
grammar or JSON Schema through the engine's ``Matcher``.
"""

from lexguide.runtime.config import ModelConfig
from lexguide.runtime.generate import Completion, CompletionChunk, Model, Timings
from lexguide.runtime.sampler import Sampler, SamplerConfig

__all__ = [
    "Completion",
    "CompletionChunk",
    "Model",
    "ModelConfig",
    "Sampler",
    "SamplerConfig",
    "Timings",
]
