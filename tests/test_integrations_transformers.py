"""``lexguide.integrations.transformers``: ``model.generate`` with the lexguide logits processor.

The model is SmolLM2-135M-Instruct, loaded from its shipped GGUF by transformers (converted
once to a Hugging Face folder, see ``tests/integration_helpers.py``). Outputs are checked by
independent oracles: ``jsonschema`` for schemas, ``re`` for the regex, the grammar's own
byte-level ``validate`` for GBNF. Skipped without torch, transformers, gguf or accelerate.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from integration_helpers import default_cache_dir, hf_folder

from lexguide import Grammar, apply_mask
from lexguide.errors import MatcherError

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
jsonschema = pytest.importorskip("jsonschema")

from lexguide.integrations._common import TorchMasker
from lexguide.integrations.transformers import LexguideLogitsProcessor

PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 16},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
PRIMES = {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4}


@pytest.fixture(scope="module")
def lm(smollm2_file):
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = hf_folder(smollm2_file, default_cache_dir())
    # one thread: torch's default two spin against each other on a loaded 2-core machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    yield model, tokenizer
    torch.set_num_threads(threads)


def _chat(tokenizer, questions: list[str]):
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                           add_generation_prompt=True) for q in questions]
    return tokenizer(texts, return_tensors="pt", padding=True)


def _generate(lm, questions, proc, new_ids: list | None = None, **kwargs) -> list[str]:
    """The rows' new text; their new token ids are appended to ``new_ids`` when given."""
    model, tokenizer = lm
    enc = _chat(tokenizer, questions)
    with torch.no_grad():
        out = model.generate(**enc, logits_processor=[proc], pad_token_id=tokenizer.pad_token_id,
                             **kwargs)
    rows = out[:, enc["input_ids"].shape[1]:]
    if new_ids is not None:
        new_ids.extend(row.tolist() for row in rows)
    return [tokenizer.decode(row, skip_special_tokens=True) for row in rows]


def test_a_batch_of_two_schemas(lm) -> None:
    _, tokenizer = lm
    proc = LexguideLogitsProcessor(tokenizer, [PERSON, PRIMES], max_new_tokens=40)
    torch.manual_seed(0)
    rows: list[list[int]] = []
    texts = _generate(lm, ["Invent a person. Reply in JSON.", "Some primes as a JSON array."],
                      proc, new_ids=rows, max_new_tokens=40, do_sample=True, temperature=1.0, top_k=0)
    for text, schema in zip(texts, [PERSON, PRIMES]):
        jsonschema.validate(json.loads(text), schema)
    assert len(proc.matchers) == 2
    for m, row in zip(proc.matchers, rows):
        # a row that used all 40 tokens ends on a token no processor call saw: feed it
        rest = [t for t in row[m.n_consumed:] if t != tokenizer.pad_token_id]
        done = m.clone()
        if not done.is_stopped():
            done.consume_tokens(rest)
        assert done.is_accepting(), (m, rest)


def test_a_gbnf_grammar_and_a_regex(lm) -> None:
    _, tokenizer = lm
    gbnf = Grammar.from_gbnf('root ::= "The answer is " ("yes" | "no") "."')
    regex = Grammar.from_regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
    proc = LexguideLogitsProcessor(tokenizer, [gbnf, regex], max_new_tokens=16)
    texts = _generate(lm, ["Is the sky blue?", "When did the Berlin wall fall?"], proc,
                      max_new_tokens=16, do_sample=False)
    assert gbnf.validate(texts[0]) and texts[0] in ("The answer is yes.", "The answer is no.")
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", texts[1])


def test_one_constraint_for_every_row_and_beam_search(lm) -> None:
    _, tokenizer = lm
    proc = LexguideLogitsProcessor(tokenizer, PERSON, max_new_tokens=32)
    texts = _generate(lm, ["Invent a person. Reply in JSON."], proc, max_new_tokens=32,
                      num_beams=2, num_return_sequences=2, do_sample=False)
    assert len(texts) == 2
    for text in texts:
        jsonschema.validate(json.loads(text), PERSON)


def test_the_budget_closes_the_output_in_time(lm) -> None:
    _, tokenizer = lm
    schema = {"type": "array", "items": {"type": "string"}}
    proc = LexguideLogitsProcessor(tokenizer, schema, max_new_tokens=12)
    texts = _generate(lm, ["Write a long JSON array of long sentences."], proc,
                      max_new_tokens=12, do_sample=False)
    jsonschema.validate(json.loads(texts[0]), schema)


def test_misuse_is_a_clear_error(lm) -> None:
    _, tokenizer = lm
    with pytest.raises(TypeError, match="ambiguous"):
        LexguideLogitsProcessor(tokenizer, "[0-9]+")
    with pytest.raises(ValueError, match="empty"):
        LexguideLogitsProcessor(tokenizer, [])
    proc = LexguideLogitsProcessor(tokenizer, [PERSON, PRIMES, PERSON])
    scores = torch.zeros((2, 49152))
    with pytest.raises(ValueError, match="3 constraints for a batch of 2"):
        proc(torch.zeros((2, 5), dtype=torch.long), scores)
    proc = LexguideLogitsProcessor(tokenizer, Grammar.from_regex("[0-9]+"))
    ids = torch.zeros((1, 5), dtype=torch.long)
    proc(ids, torch.zeros((1, 49152)))
    letter = tokenizer.encode("x", add_special_tokens=False)[0]
    with pytest.raises(MatcherError, match="not allowed by the grammar"):
        proc(torch.cat([ids, torch.tensor([[letter]])], dim=1), torch.zeros((1, 49152)))
    with pytest.raises(MatcherError, match="token by token"):
        proc(torch.zeros((1, 9), dtype=torch.long), torch.zeros((1, 49152)))
    proc.reset()
    out = proc(ids, torch.zeros((1, 49160)))  # logits wider than the vocabulary
    assert torch.isinf(out[0, 49152:]).all()


@pytest.mark.parametrize("layout", ["native", "torch"])
def test_torch_masker_agrees_with_apply_mask(layout) -> None:
    rng = np.random.default_rng(7)
    masker = TorchMasker(torch)
    for width, n_words in [(100, 4), (128, 4), (140, 4), (37, 2)]:
        bitmask = rng.integers(-2**31, 2**31, size=(3, n_words), dtype=np.int64).astype(np.int32)
        values = torch.from_numpy(rng.standard_normal((3, width)).astype(np.float32))
        want = values.clone()
        for r in range(3):
            apply_mask(want[r], bitmask[r].view(np.uint32))

        def logits(values=values, width=width):
            if layout == "native":  # CPU float32 rows: the core's kernel
                return values.clone()
            # columns with a stride: torch operations
            wide = torch.zeros((3, 2 * width))
            wide[:, ::2] = values
            return wide[:, ::2]

        got = masker.apply(logits(), torch.from_numpy(bitmask))
        assert torch.equal(got, want)
        # rows: two bitmask rows for rows 2 and 0 of a batch of three
        rows = [2, 0] if layout == "native" else torch.tensor([2, 0])
        sub = masker.apply(logits(), torch.from_numpy(bitmask[:2].copy()), rows)
        assert torch.equal(torch.isinf(sub[2]), torch.isinf(want[0]))
        assert torch.equal(torch.isinf(sub[0]), torch.isinf(want[1]))
        assert torch.equal(sub[1], values[1])
    for dtype in (torch.bfloat16, torch.float16):
        half = torch.zeros((1, 64), dtype=dtype)
        if layout == "torch":
            half = torch.zeros((1, 128), dtype=dtype)[:, ::2]
        masker.apply(half, torch.tensor([[1, 0]], dtype=torch.int32))
        assert not torch.isinf(half[0, 0]) and torch.isinf(half[0, 1:]).all()
        assert (half[0, 1:] < 0).all()
