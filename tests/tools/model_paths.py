"""Paths of the real test models: the GGUFs that installed PyPI packages ship, found as the
package finds them (``lexguide.model_files``; the README says which packages to install)."""

from __future__ import annotations

from pathlib import Path

from lexguide.model_files import gemma3_path, smollm2_path


def model_path(name: str) -> Path:
    """The GGUF of ``smollm2`` or ``gemma3``; raises ``ModelNotInstalled`` (naming the package
    to install) when its package is absent."""
    if name == "smollm2":
        return smollm2_path()
    if name == "gemma3":
        return gemma3_path()
    raise ValueError(name)
