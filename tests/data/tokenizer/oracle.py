"""Reference tokenizer for tests and benchmarks: Hugging Face ``tokenizers`` built from a GGUF.

The conversion is transformers' own (GGUF vocabulary → ``tokenizers.Tokenizer``: Rust BPE,
Oniguruma regexes, its own Unicode tables), so it shares no code with lexguide. One correction:
for ``tokenizer.ggml.pre == "smollm"`` transformers keeps only the GPT-2 split, while llama.cpp
(and SmolLM2's original ``tokenizer.json``) first isolate every digit, so the result gets
``Digits(individual_digits=True)`` in front of ``ByteLevel``. The converted tokenizer carries no
BOS/EOS post-processor: compare with ``add_special_tokens=False``.

Needs ``transformers`` and ``tokenizers`` (no torch). Converting Gemma's 262k vocabulary takes
~30 s, so results are cached as ``tokenizer.json`` files in ``cache_dir``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["hf_tokenizer_from_gguf"]


def _convert(path: Path) -> Any:
    try:  # fast path: feed metadata lexguide already parsed (transformers >= 5 internals)
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (
            GGUF_TOKENIZER_MAPPING,
            convert_gguf_tokenizer,
        )
    except ImportError:  # public, slower path of any transformers version with GGUF support
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).backend_tokenizer
    from lexguide.gguf import open_gguf

    with open_gguf(path) as gguf:
        md = gguf.metadata
        arch = md["general.architecture"]
        fields = {
            name: md[f"tokenizer.{key}"]
            for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
            if f"tokenizer.{key}" in md
        }
    for key in ("scores", "token_type"):
        if key in fields:
            fields[key] = fields[key].tolist()
    backend, _ = convert_gguf_tokenizer(arch, fields)
    return backend


def hf_tokenizer_from_gguf(path: str | Path, cache_dir: str | Path) -> Any:
    """A ``tokenizers.Tokenizer`` equivalent to llama.cpp's for the GGUF at ``path``.

    Raises ImportError when transformers/tokenizers are missing (callers skip on that).
    """
    import tokenizers
    import transformers
    from tokenizers import pre_tokenizers

    path = Path(path)
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    cached = cache / f"{path.stem}-{path.stat().st_size}-tf{transformers.__version__}.json"
    if cached.exists():
        hf = tokenizers.Tokenizer.from_file(str(cached))
    else:
        hf = _convert(path)
        hf.save(str(cached))
    from lexguide.gguf import open_gguf

    with open_gguf(path) as gguf:
        pre = gguf.metadata.get("tokenizer.ggml.pre")
    if pre == "smollm":
        hf.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
    return hf
