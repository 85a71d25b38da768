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
