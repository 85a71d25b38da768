"""Sampler, chat templates, stop strings and generation on the real SmolLM2 model.

Model tests use short prompts and few tokens, one BLAS thread, and a module-scoped model.
Forward-pass exactness is in ``test_runtime_tiny.py`` (naive reference) and
``test_runtime_reference.py`` (transformers golden data); constrained generation in
``test_runtime_grammar.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import lexguide
from lexguide.errors import MatcherError, ModelError
from lexguide.runtime import Completion, Model, SamplerConfig
from lexguide.runtime.chat import GEMMA_TEMPLATE, render_chat
from lexguide.runtime.generate import _holdback
from lexguide.runtime.sampler import Sampler, mask_to_ids


def test_public_surface():
    import lexguide.runtime as rt

    assert {"Model", "SamplerConfig", "Completion"} <= set(rt.__all__)
    assert lexguide.Model is Model and lexguide.SamplerConfig is SamplerConfig


# ------------------------------------------------------------------------------------ sampler
def test_mask_to_ids_matches_brute_force():
    rng = np.random.default_rng(1)
    n = 1000
    allowed = rng.random(n) < 0.1
    mask = np.zeros((n + 31) // 32, dtype=np.uint32)
    for t in np.flatnonzero(allowed):
        mask[t >> 5] |= np.uint32(1 << (t & 31))
    assert mask_to_ids(mask, n).tolist() == np.flatnonzero(allowed).tolist()


def test_greedy_is_argmax_lowest_id_on_ties():
    logits = np.array([0.0, 3.0, 1.0, 3.0], dtype=np.float32)
    assert Sampler(SamplerConfig(temperature=0)).sample(logits) == 1
    assert Sampler(SamplerConfig(temperature=0)).sample(logits[[2, 3]], np.array([2, 3])) == 3


def test_timings_summary_shows_no_rate_for_no_time():
    from lexguide.runtime.generate import Timings

    text = Timings(generated_tokens=2, forced_tokens=2, generation_s=2e-6).summary()
    assert "(      - tok/s, 2 forced)" in text and "0 tokens (      - tok/s)" in text
    assert "(   20.0 tok/s" in Timings(generated_tokens=2, generation_s=0.1).summary()


def test_a_negative_seed_is_a_model_error():
    from lexguide.errors import ModelError

    with pytest.raises(ModelError, match="seed must be None or >= 0"):
        SamplerConfig(seed=-1)


def test_greedy_skips_non_finite_logits():
    # the whole-vocabulary greedy shortcut must agree with the filtering path
    greedy = Sampler(SamplerConfig(temperature=0))
    assert greedy.sample(np.array([1.0, np.nan, 2.0, -np.inf], dtype=np.float32)) == 2
    assert greedy.sample(np.array([-np.inf, 0.5, np.inf, 0.7], dtype=np.float32)) == 3
    assert greedy.sample(np.array([-np.inf, -2.0, -np.inf], dtype=np.float32)) == 1
    with pytest.raises(MatcherError):
        greedy.sample(np.array([np.nan, -np.inf], dtype=np.float32))


def test_seeded_sampling_is_reproducible_and_seed_dependent():
    logits = np.random.default_rng(0).standard_normal(500).astype(np.float32)
    cfg = {"temperature": 1.5, "top_k": 0, "top_p": 1.0, "min_p": 0.0}

    def draws(seed):
        s = Sampler(SamplerConfig(seed=seed, **cfg))
        return [s.sample(logits) for _ in range(50)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


def test_unfiltered_sampling_follows_softmax():
    logits = np.array([2.0, 1.0, 0.0, -1.0], dtype=np.float32)
    s = Sampler(SamplerConfig(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0))
    counts = np.bincount([s.sample(logits) for _ in range(5000)], minlength=4) / 5000
    p = np.exp(logits) / np.exp(logits).sum()
    assert np.abs(counts - p).max() < 0.025  # ~4 standard deviations


def test_filters_cut_the_tail():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05], dtype=np.float32))
    def support(**kw):
        s = Sampler(SamplerConfig(temperature=1.0, seed=1, **kw))
        return {s.sample(logits) for _ in range(400)}

    assert support(top_k=2, top_p=1.0, min_p=0.0) == {0, 1}
    assert support(top_k=0, top_p=0.75, min_p=0.0) == {0, 1}  # 0.5 + 0.3 reaches 0.75
    assert support(top_k=0, top_p=1.0, min_p=0.25) == {0, 1, 2}  # p >= 0.25 * 0.5
    assert support(top_k=0, top_p=1.0, min_p=0.35) == {0, 1}
    assert support(top_k=0, top_p=1.0, min_p=0.0) == {0, 1, 2, 3}


def test_penalties():
    logits = np.array([2.0, 1.9, -1.0], dtype=np.float32)
    greedy = {"temperature": 0}
    assert Sampler(SamplerConfig(**greedy)).sample(logits, history=[0]) == 0
    assert Sampler(SamplerConfig(repeat_penalty=1.2, **greedy)).sample(logits, history=[0]) == 1
    assert Sampler(SamplerConfig(frequency_penalty=0.05, **greedy)).sample(logits, history=[0, 0, 0]) == 1
    assert Sampler(SamplerConfig(presence_penalty=0.2, **greedy)).sample(logits, history=[0]) == 1
    # outside the window: no penalty
    s = Sampler(SamplerConfig(repeat_penalty=1.2, repeat_last_n=1, **greedy))
    assert s.sample(logits, history=[0, 2]) == 0
    # penalties apply to a masked candidate subset too
    ids = np.array([0, 2])
    assert Sampler(SamplerConfig(presence_penalty=5.0, **greedy)).sample(logits[ids], ids, [0]) == 2


def test_empty_candidates_raise_never_sample_unconstrained():
    with pytest.raises(MatcherError):
        Sampler(SamplerConfig()).sample(np.zeros(0, np.float32), np.zeros(0, np.int64))
    with pytest.raises(MatcherError):
        Sampler(SamplerConfig()).sample(np.full(3, -np.inf, np.float32))


def test_bad_sampler_config():
    with pytest.raises(ModelError, match="top_p"):
        SamplerConfig(top_p=-0.1)
    with pytest.raises(ModelError, match="repeat_penalty"):
        SamplerConfig(repeat_penalty=0)


# ------------------------------------------------------------------------------------ helpers
def test_holdback_keeps_possible_stop_prefixes():
    assert _holdback("hello wor", ["world"]) == 3
    assert _holdback("hello", ["xyz"]) == 0
    assert _holdback("ab", ["b!", "ab?"]) == 2


def test_chat_templates():
    tmpl = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}" \
           "{% if add_generation_prompt %}<assistant>{% endif %}"
    msgs = [{"role": "user", "content": "hi"}]
    assert render_chat(tmpl, msgs) == "<user>hi</s><assistant>"
    assert render_chat(GEMMA_TEMPLATE, [{"role": "system", "content": "Be brief."}, *msgs],
                       bos_token="<bos>") == \
        "<bos><start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n<start_of_turn>model\n"
    with pytest.raises(ModelError, match="nope"):
        render_chat("{{ raise_exception('nope') }}", msgs)
    with pytest.raises(ModelError, match="line 1"):
        render_chat("{% for %}", msgs)
    with pytest.raises(ModelError, match=r"messages\[0\]"):
        render_chat(tmpl, [{"content": "no role"}])


# ------------------------------------------------------------------------------------ SmolLM2
@pytest.fixture(scope="module")
def smollm2(smollm2_file):
    return Model.from_gguf(smollm2_file, n_threads=1, n_ctx=256, progress=False)


def test_generate_greedy_and_completion_fields(smollm2):
    out = smollm2.generate("The capital of France is", max_tokens=4, temperature=0)
    assert isinstance(out, Completion)
    assert out.token_ids == [7042, 30, 198, 198]  # " Paris.\n\n" as llama.cpp (models.md)
    assert out.text == " Paris.\n\n"
    assert out.finish_reason == "length"
    assert out.prompt_token_ids == [504, 3575, 282, 4649, 314]
    assert out.timings.prompt_tokens == 5 and out.timings.generated_tokens == 4
    # prompt as token ids, and a second call reusing the cached prefix, give the same result
    again = smollm2.generate(out.prompt_token_ids, max_tokens=4, temperature=0)
    assert again.token_ids == out.token_ids


def test_kv_cache_decode_equals_full_recompute(smollm2):
    prompt = smollm2.tokenizer.encode("Water boils at")
    out = smollm2.generate(prompt, max_tokens=3, temperature=0)
    full = smollm2.logits(prompt + out.token_ids)  # one batched pass over everything
    assert full[len(prompt) - 1:-1].argmax(axis=1).tolist() == out.token_ids
    tf = smollm2.transformer
    cache = tf.new_cache(32)
    tf.forward(prompt, cache)
    step = [tf.forward([t], cache) for t in out.token_ids]
    assert np.abs(np.stack(step) - full[len(prompt):]).max() < 1e-3


def test_seeded_generation_is_reproducible(smollm2):
    kw = {"max_tokens": 4, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    a = smollm2.generate("Once upon a time", seed=42, **kw)
    b = smollm2.generate("Once upon a time", seed=42, **kw)
    c = smollm2.generate("Once upon a time", seed=43, **kw)
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids


def test_streaming_equals_non_streaming_and_stop_strings(smollm2):
    full = smollm2.generate("The capital of France is", max_tokens=6, temperature=0)
    chunks = list(smollm2.generate("The capital of France is", max_tokens=6, temperature=0, stream=True))
    assert "".join(c.text for c in chunks) == full.text
    assert [t for c in chunks for t in c.token_ids] == full.token_ids
    assert chunks[-1].finish_reason == "length" and chunks[-1].timings is not None
    cut = smollm2.generate("The capital of France is", max_tokens=6, temperature=0, stop=["s."])
    assert cut.text == " Pari" and cut.finish_reason == "stop"
    assert cut.timings.generation_s > 0 and cut.timings.generated_tokens == len(cut.token_ids)
    streamed = list(smollm2.generate("The capital of France is", max_tokens=6, temperature=0,
                                     stop=["s."], stream=True))
    assert "".join(c.text for c in streamed) == " Pari"


def test_chat_uses_the_gguf_template_and_stops_at_eog(smollm2):
    ids = smollm2.chat_prompt_ids([{"role": "user", "content": "Say hi."}])
    # ChatML: <|im_start|> (id 1) parsed as a special token, three turns, ends ready to answer
    assert ids[0] == 1 and ids.count(1) == 3 and ids.count(2) == 2
    text = smollm2.tokenizer.decode(ids)  # control tokens decode to nothing
    assert text.startswith("system\nYou are") and text.endswith("user\nSay hi.\nassistant\n")
    out = smollm2.chat([{"role": "user", "content": "Say hi."}], max_tokens=40, temperature=0)
    assert out.finish_reason == "stop" and 2 not in out.token_ids  # <|im_end|> ends the turn
    assert out.text.strip()


def test_argument_errors(smollm2):
    with pytest.raises(ModelError, match="either grammar"):
        smollm2.generate("x", grammar='root ::= "a"', json_schema={"type": "string"})
    with pytest.raises(ModelError, match="max_tokens"):
        smollm2.generate("x", max_tokens=-1)
    with pytest.raises(ModelError, match="does not fit"):
        smollm2.generate(list(range(300)), max_tokens=1)
    assert smollm2.generate("x", max_tokens=0).token_ids == []


# ------------------------------------------------------------------------------------ CLI
def test_cli_run_constrained(smollm2_file, capsys):
    from lexguide.cli import main

    schema = '{"enum": ["red", "green", "blue"]}'
    rc = main(["run", "-m", str(smollm2_file), "-p", "My favourite colour is", "-j", schema,
               "--temp", "0", "-n", "10", "-t", "1", "-c", "64"])
    out, err = capsys.readouterr()
    assert rc == 0
    assert out.strip() in ('"red"', '"green"', '"blue"')
    assert "finish: stop" in err and "tok/s" in err


def test_cli_run_prints_captures(smollm2_file, capsys):
    import json

    from lexguide.cli import main

    grammar = '%llguidance {}\nstart: "(" num ")"\nnum[capture]: /[0-9]{1,3}/\n'
    rc = main(["run", "-m", str(smollm2_file), "-p", "Number:", "--grammar", grammar, "--temp", "0",
               "-n", "8", "-t", "1", "-c", "64", "--captures"])
    out, err = capsys.readouterr()
    assert rc == 0
    line = next(x for x in err.splitlines() if x.startswith("captures: "))
    assert json.loads(line[len("captures: "):]) == [["num", out.strip()[1:-1]]]
    assert main(["run", "-m", str(smollm2_file), "-p", "x", "-j", "{}", "--captures"]) == 1
    assert "--captures needs a grammar" in capsys.readouterr().err


def test_cli_run_errors(smollm2_file, capsys):
    from lexguide.cli import main

    assert main(["run", "-m", str(smollm2_file), "-p", "x", "-j", "{bad"]) == 1
    assert "not valid JSON: line 1:2" in capsys.readouterr().err
    assert main(["run", "-m", str(smollm2_file), "-p", "x", "-j", "{}", "--grammar", "root ::= x"]) == 1
    assert "at most one constraint" in capsys.readouterr().err
    assert main(["run", "-m", str(smollm2_file), "--grammar-file", "/nonexistent.gbnf"]) == 1
    assert "cannot read grammar file" in capsys.readouterr().err
