"""Every ```python block of README.md runs as written.

A block that loads a model (``Model.from_gguf``) is skipped when the default model is not
installed; any other failure is a failure. Blocks run in a fresh namespace each, in order.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)


def test_readme_has_python_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(index, capsys):
    code = BLOCKS[index]
    if "Model.from_gguf" in code:
        from lexguide.model_files import ModelNotInstalled, default_model_path

        try:
            default_model_path()
        except ModelNotInstalled:
            pytest.skip("the default model is not installed")
    exec(compile(code, f"README.md python block {index}", "exec"), {"__name__": "__readme__"})
