"""Shared fixtures: the real models skip cleanly when their packages are absent."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from lexguide.model_files import ModelNotInstalled, gemma3_path, smollm2_path


_VOCAB_CACHE: str | None = None


def pytest_configure(config):
    """The vocabulary cache of this run lives in a temporary folder, never the user's home
    (set before collection: test modules build TokenizerInfos at import)."""
    global _VOCAB_CACHE
    _VOCAB_CACHE = tempfile.mkdtemp(prefix="lexguide-test-vocab-")
    os.environ["LEXGUIDE_VOCAB_CACHE"] = _VOCAB_CACHE


def pytest_unconfigure(config):
    if _VOCAB_CACHE:
        shutil.rmtree(_VOCAB_CACHE, ignore_errors=True)


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
