"""``lexguide.integrations.llama_cpp``: llama-cpp-python completions constrained by lexguide.

The vocabulary comes from llama.cpp itself; its token bytes must equal lexguide's own GGUF
tokenizer's, token for token (SmolLM2: byte-level BPE; Gemma 3: SentencePiece). Completions on
SmolLM2 are checked by ``jsonschema`` and ``re``. Skipped without ``llama_cpp``
(``pip install 'lexguide[llama-cpp]'``; .ci/run builds it).
"""

from __future__ import annotations

import json
import re

import pytest

from lexguide import Grammar
from lexguide.errors import MatcherError
from lexguide.tokenizer import Tokenizer

llama_cpp = pytest.importorskip("llama_cpp")
jsonschema = pytest.importorskip("jsonschema")

from lexguide.integrations.llama_cpp import LexguideLogitsProcessor, tokenizer_info

PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 16},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}


def _llama(path):
    return llama_cpp.Llama(model_path=str(path), n_ctx=512, n_threads=2, verbose=False, seed=1)


@pytest.fixture(scope="module")
def smollm2(smollm2_file):
    return _llama(smollm2_file)


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_token_bytes_match_lexguides_tokenizer(request, model: str) -> None:
    path = request.getfixturevalue(f"{model}_file")
    llm = request.getfixturevalue("smollm2") if model == "smollm2" else _llama(path)
    info = tokenizer_info(llm)
    ours = Tokenizer.from_gguf(path)
    want = ours.all_token_bytes()
    assert info.vocab_size == ours.vocab_size
    bad = [i for i in range(ours.vocab_size) if info.token_bytes[i] != want[i]]
    # lexguide's one documented deviation (src/lexguide/tokenizer/vocab.py): llama.cpp makes
    # Gemma's user-defined "</s>" a control, end-of-generation token; lexguide keeps it text
    deviation = {ours.token_text(i) for i in bad}
    assert deviation == ({"</s>"} if model == "gemma3" else set()), [
        (i, info.token_bytes[i], want[i]) for i in bad[:10]]
    assert info.eos_ids == ours.eog_ids | set(bad)
    assert info.special_ids == ours.special_ids | info.eos_ids
    assert tokenizer_info(llm) is info  # cached per model


def _processors(proc):
    return llama_cpp.LogitsProcessorList([proc])


def test_chat_completion_follows_a_schema(smollm2) -> None:
    proc = LexguideLogitsProcessor(smollm2, PERSON, max_tokens=48)
    out = smollm2.create_chat_completion(
        [{"role": "user", "content": "Invent a person. Reply in JSON."}],
        logits_processor=_processors(proc), max_tokens=48, temperature=1.0, seed=3)
    choice = out["choices"][0]
    jsonschema.validate(json.loads(choice["message"]["content"]), PERSON)
    assert choice["finish_reason"] == "stop" and proc.matcher.is_accepting()


def test_completion_with_a_regex_and_a_grammar(smollm2) -> None:
    proc = LexguideLogitsProcessor(smollm2, Grammar.from_regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}"))
    out = smollm2.create_completion("The Berlin wall fell on", logits_processor=_processors(proc),
                                    max_tokens=16, temperature=0)
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", out["choices"][0]["text"])
    assert out["choices"][0]["finish_reason"] == "stop"
    gbnf = Grammar.from_gbnf('root ::= "Answer: " ("yes" | "no")')
    proc = LexguideLogitsProcessor(smollm2, gbnf)
    out = smollm2.create_completion("Is the sky blue?", logits_processor=_processors(proc),
                                    max_tokens=8, temperature=0)
    assert gbnf.validate(out["choices"][0]["text"])


def test_forced_text_is_tokenized_canonically(smollm2) -> None:
    schema = {"type": "object", "properties": {"temperature_celsius": {"type": "integer"}},
              "required": ["temperature_celsius"], "additionalProperties": False}
    # a grammar whose key is one literal: JSON Schema keys also accept escaped spellings
    # (\u0074...), so there the key is not forced text
    grammar = Grammar.from_lark('%llguidance {}\nstart: "{\\"temperature_celsius\\": " NUM "}"\n'
                                'NUM: /-?[0-9]{1,3}/\n')
    ids = {}
    for canonical in (True, False):
        proc = LexguideLogitsProcessor(smollm2, grammar, max_tokens=24, force_canonical=canonical)
        out = smollm2.create_completion("Weather as JSON:", logits_processor=_processors(proc),
                                        max_tokens=24, temperature=0)
        jsonschema.validate(json.loads(out["choices"][0]["text"]), schema)
        ids[canonical] = proc.token_ids
    # the forced key is spelled with the tokenizer's own tokens when forcing is on; the model
    # alone picks another spelling of the same bytes here
    key = smollm2.tokenize(b"temperature_celsius", add_bos=False, special=False)

    def has_key(tokens: list[int]) -> bool:
        return any(tokens[i:i + len(key)] == key for i in range(len(tokens)))

    assert has_key(ids[True]) and not has_key(ids[False])


def test_a_disallowed_token_is_an_error(smollm2) -> None:
    import numpy as np

    proc = LexguideLogitsProcessor(smollm2, Grammar.from_regex("[0-9]+"))
    prompt = np.array([1, 2, 3], dtype=np.intc)
    scores = np.zeros(smollm2.n_vocab(), dtype=np.single)
    proc(prompt, scores)
    seven = smollm2.tokenize(b"7", add_bos=False, special=False)[0]
    assert np.isinf(scores).sum() > 0 and not np.isinf(scores[seven])
    letter = smollm2.tokenize(b"x", add_bos=False, special=False)[0]
    with pytest.raises(MatcherError, match="not allowed"):
        proc(np.append(prompt, letter).astype(np.intc), scores)
    with pytest.raises(MatcherError, match="shrank"):
        proc(prompt[:1], scores)
    with pytest.raises(TypeError):
        LexguideLogitsProcessor(smollm2, "[0-9]+")
