"""Complete within the budget, on the real models (issue 13, "Must hold").

For SmolLM2-135M and Gemma-3-270M: 30 JSON Schemas of the JSONSchemaBench dev subsets (6 of
them recursive) and the Lark grammars of tests/data/grammars, generated greedily from a short
prompt with ``max_tokens`` = c, 2c or 3c in turn (c: the model's tokens of a shortest
completion, ``Matcher.min_completion()``, at least 3; every budget fits one). Each output must end with
``finish_reason == "stop"`` and validate: the ``jsonschema`` package for schemas,
``Grammar.validate`` for grammars. Without the budget-aware mask most of these are cut
(``bench/whitespace.py`` measures it).

The schemas were picked by a rule, not by hand: per subset, in file order, the first four
non-recursive ones that compile, pass their draft's meta-schema and have 3 <= c <= 30 on
SmolLM2; then, over the subsets in the same order, the first six recursive ones (a local
``$ref`` cycle) meeting the same conditions. Short budgets keep the test to seconds per model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")

from lexguide import Grammar, Matcher, Model  # noqa: E402

from corpora import require  # noqa: E402  (LEXGUIDE_CORPORA: JSONSchemaBench is not vendored)

GRAMMARS = Path(__file__).resolve().parent / "data" / "grammars"
SCHEMAS = [
    ("Github_trivial", "o10018"), ("Github_trivial", "o10026"), ("Github_trivial", "o10055"),
    ("Github_trivial", "o10069"),
    ("Github_easy", "o10008"), ("Github_easy", "o10011"), ("Github_easy", "o10013"),
    ("Github_easy", "o10014"),
    ("Github_medium", "o1"), ("Github_medium", "o102"), ("Github_medium", "o10217"),
    ("Github_medium", "o10314"),
    ("Glaiveai2K", "analyze_health_data_4ad104b4"), ("Glaiveai2K", "analyze_health_data_ecfa5553"),
    ("Glaiveai2K", "analyze_social_media_mentions_df9069d1"),
    ("Glaiveai2K", "analyze_social_media_sentiment_6ef0069e"),
    ("Kubernetes", "kb_1000_Normalized"), ("Kubernetes", "kb_1001_Normalized"),
    ("Kubernetes", "kb_1002_Normalized"), ("Kubernetes", "kb_1003_Normalized"),
    ("MCPspec", "CallToolRequest"), ("MCPspec", "CallToolResult"),
    ("MCPspec", "CancelledNotification"), ("MCPspec", "ClientNotification"),
    # recursive
    ("Github_easy", "o21858"), ("Github_easy", "o90911"), ("Github_medium", "o10566"),
    ("Github_medium", "o11667"), ("Github_medium", "o12175"), ("Github_medium", "o13135"),
]
LARK = sorted(p.name for p in GRAMMARS.glob("*.lark"))
PROMPT = "JSON:"


def _load_schemas() -> dict[tuple[str, str], dict]:
    wanted: dict[str, set[str]] = {}
    for subset, sid in SCHEMAS:
        wanted.setdefault(subset, set()).add(sid)
    found = {}
    for subset, ids in wanted.items():
        path = require(f"jsonschemabench/{subset}.jsonl")
        with path.open(encoding="utf-8") as f:
            for line in f:
                head = line[:200]
                if not any(f'"{sid}"' in head for sid in ids):
                    continue
                record = json.loads(line)
                if record["id"] in ids:
                    found[(subset, record["id"])] = record["schema"]
    return found


@pytest.fixture(scope="module")
def schemas():
    return _load_schemas()


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model(request):
    file = request.getfixturevalue(f"{request.param}_file")
    return Model.from_gguf(file)


def _budgets(model, grammar, index: int) -> tuple[int, int]:
    """(c, max_tokens): c, 2c or 3c by index (c at least 3: a grammar may accept "")."""
    c = Matcher(grammar, model.tokenizer_info).min_completion()
    assert c is not None, "no completion found from the start"
    return c, max(c, 3) * (1 + index % 3)


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_schema_output_is_complete_within_a_small_budget(model, schemas, index):
    key = SCHEMAS[index]
    schema = schemas[key]
    grammar = Grammar.from_json_schema(schema)
    c, n = _budgets(model, grammar, index)
    out = model.generate(PROMPT, grammar=grammar, max_tokens=n, temperature=0)
    assert out.finish_reason == "stop", (key, c, n, out.text)
    assert len(out.token_ids) <= n
    jsonschema.validate(json.loads(out.text), schema)


@pytest.mark.parametrize("name", LARK)
def test_lark_output_is_complete_within_a_small_budget(model, name):
    grammar = Grammar.from_lark((GRAMMARS / name).read_text(encoding="utf-8"))
    for index in range(3):
        c, n = _budgets(model, grammar, index)
        out = model.generate(PROMPT, grammar=grammar, max_tokens=n, temperature=0)
        assert out.finish_reason == "stop", (name, c, n, out.text)
        assert len(out.token_ids) <= n
        assert grammar.validate(out.text.encode()), (name, n, out.text)
