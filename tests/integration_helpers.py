"""Shared set-up of the integration tests and ``bench/integrations.py`` (not a test module).

``hf_folder``: a Hugging Face model folder made from a shipped GGUF by transformers itself
(``from_pretrained(gguf_file=...)`` dequantizes the weights; they are copied into a plain
model of the same config, which ``save_pretrained`` accepts), for vLLM and for fast
transformers loads. Made once per GGUF into ``cache_dir``, atomically (a temporary folder
renamed when complete), so parallel or interrupted runs never see half a folder.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

#: four prompts and four different schemas (the vLLM tests and bench/integrations.py)
PROMPTS_AND_SCHEMAS: list[tuple[str, dict]] = [
    ("Invent a person. Reply in JSON.",
     {"type": "object",
      "properties": {"name": {"type": "string", "maxLength": 24},
                     "age": {"type": "integer", "minimum": 0, "maximum": 120}},
      "required": ["name", "age"], "additionalProperties": False}),
    ("List a few prime numbers as a JSON array.",
     {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 6}),
    ("Name a European city and its country in JSON.",
     {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 24},
                     "country": {"enum": ["France", "Spain", "Italy", "Germany"]}},
      "required": ["city", "country"], "additionalProperties": False}),
    ("Review the film Alien in JSON: was it good, and a score from 0 to 1.",
     {"type": "object",
      "properties": {"good": {"type": "boolean"},
                     "score": {"type": "number", "minimum": 0, "maximum": 1}},
      "required": ["good", "score"], "additionalProperties": False}),
]


def hf_folder(gguf_path: str | os.PathLike, cache_dir: str | os.PathLike) -> Path:
    """The Hugging Face folder of ``gguf_path`` (made on first use; needs transformers,
    torch, gguf and accelerate then)."""
    gguf_path = Path(gguf_path)
    cache = Path(cache_dir)
    out = cache / f"{gguf_path.stem}-{gguf_path.stat().st_size}-hf"
    if (out / "config.json").exists():
        return out
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cache.mkdir(parents=True, exist_ok=True)
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(model.state_dict(), strict=False)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=cache))
    try:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        json.loads((tmp / "config.json").read_text())  # complete before it becomes visible
        try:
            os.rename(tmp, out)
        except OSError:  # another process made it meanwhile
            if not (out / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def default_cache_dir() -> Path:
    """Where the folders are kept outside pytest (bench): ``$LEXGUIDE_CACHE`` or
    ``~/.cache/lexguide``."""
    return Path(os.environ.get("LEXGUIDE_CACHE", Path.home() / ".cache" / "lexguide"))
