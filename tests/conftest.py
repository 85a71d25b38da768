"""Shared fixtures: the real models skip cleanly when their packages are absent."""

from __future__ import annotations

import pytest

from lexguide.model_files import ModelNotInstalled, gemma3_path, smollm2_path


@pytest.fixture(scope="session")
def smollm2_file():
    try:
        return smollm2_path()
    except ModelNotInstalled as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def gemma3_file():
    try:
        return gemma3_path()
    except ModelNotInstalled as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def oracle_cache_dir(request, tmp_path_factory):
    """Where converted tokenizer oracles are cached: pytest's cache, or a temporary folder
    under ``-p no:cacheprovider``."""
    from pathlib import Path

    cache = getattr(request.config, "cache", None)
    if cache is not None:
        return Path(cache.mkdir("lexguide-tokenizer-oracle"))
    return tmp_path_factory.mktemp("tokenizer-oracle")
