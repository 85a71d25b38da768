"""lexguide constraints inside vLLM's v1 engine: a custom logits processor.

```python
from vllm import LLM, SamplingParams
from lexguide.integrations.vllm import LexguideLogitsProcessor

llm = LLM(model=..., logits_processors=[LexguideLogitsProcessor])
params = SamplingParams(max_tokens=128, extra_args={"lexguide": {"json_schema": schema}})
```

``vllm serve MODEL --logits-processors lexguide.integrations.vllm:LexguideLogitsProcessor``
does the same for the server, constrained per request by ``vllm_xargs``
(``{"lexguide_json_schema": "<schema as JSON text>"}``, or ``lexguide_grammar``,
``lexguide_regex``, ``lexguide_structural_tag`` (xgrammar's structural-tag JSON: structure
inside free text); ``lexguide_json_options`` as JSON text). With
``LEXGUIDE_VLLM_STRUCTURED_OUTPUTS=1`` in the environment of the process that admits requests
(``vllm serve``, or the script creating the ``LLM``), requests' ``response_format`` /
``structured_outputs`` (JSON Schema, JSON object, regex, grammar, choice, structural tag) are
constrained by
lexguide instead of vLLM's own backend: ``validate_params`` moves them into the request's
``extra_args`` and clears ``structured_outputs``, without patching vLLM.

The processor is not registered as a ``vllm.logits_processors`` plugin on purpose: vLLM
drops plugin processors without a word when speculative decoding is on (V1 runner) and does
not keep output tokens up to date for them under async scheduling, so requests asking for
lexguide could run unconstrained. Passed explicitly, vLLM refuses the first case at start-up
and handles the second.

One class serves both of vLLM's model runners: the V1 runner's interface
(``update_state(BatchUpdate)`` + ``apply(logits)``) and the V2 runner's (``add_request`` +
``apply(logits, ctx)``, which also sees speculative-decoding draft rows: each draft row gets
the mask after the drafts before it, found with ``validate_tokens`` and undone with
``rollback``). Each step, the masks of the batch's constrained requests are computed by one
:func:`lexguide.fill_masks` call and applied to the logits in place: on the CPU by the core in
one pass (the tensors taken through DLPack), elsewhere with torch operations on their device.
Needs the ``vllm`` extra (``pip install 'lexguide[vllm]'``); docs/integrations.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from lexguide.engine import Matcher, TokenizerInfo, fill_masks
from lexguide.errors import LexguideError, TokenRejected
from lexguide.integrations._common import TorchMasker, check_compiles, grammar_from_spec, require

torch = require("torch", "vllm", "vllm")
_vllm = require("vllm", "vllm", "vllm")
_v1 = require("vllm.v1.sample.logits_processor", "vllm", "vllm")
try:  # the V2 model runner's interface (vLLM >= 0.30)
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as _V2Base
except ImportError:  # pragma: no cover - older vLLM: V1 runner only
    _V2Base = object  # type: ignore[assignment,misc]
from vllm.logger import init_logger
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

__all__ = ["ENV_STRUCTURED_OUTPUTS", "LexguideLogitsProcessor", "request_spec"]

# under "vllm." so that vLLM's logging configuration shows these messages with its own
logger = init_logger("vllm.lexguide")

#: set to 1 to have lexguide constrain requests' ``response_format`` / ``structured_outputs``
ENV_STRUCTURED_OUTPUTS = "LEXGUIDE_VLLM_STRUCTURED_OUTPUTS"
_XARGS = ("json_schema", "grammar", "regex", "structural_tag", "json_options")


def request_spec(params: Any) -> dict[str, Any] | None:
    """The lexguide constraint of a request's ``SamplingParams``, or None.

    From ``extra_args["lexguide"]`` (``{"json_schema": ...}``, ``{"grammar": text}``,
    ``{"regex": pattern}`` or ``{"structural_tag": spec}``, with optional ``"json_options"``),
    or from the flat ``vllm_xargs`` keys ``lexguide_json_schema`` (JSON text),
    ``lexguide_grammar``, ``lexguide_regex``, ``lexguide_structural_tag`` (JSON text) and
    ``lexguide_json_options`` (JSON text). Raises ``ValueError`` when both forms are given or
    a value has the wrong type.
    """
    extra = getattr(params, "extra_args", None) or {}
    spec = extra.get("lexguide")
    flat = {k: extra[f"lexguide_{k}"] for k in _XARGS if f"lexguide_{k}" in extra}
    unknown = [k for k in extra if k.startswith("lexguide_") and k[len("lexguide_"):] not in _XARGS]
    if unknown:
        raise ValueError(f"unknown lexguide argument(s) {unknown}; expected lexguide_json_schema, "
                         "lexguide_grammar, lexguide_regex, lexguide_structural_tag or "
                         "lexguide_json_options")
    if spec is not None and flat:
        raise ValueError("give the lexguide constraint either as extra_args['lexguide'] or as "
                         "lexguide_* arguments, not both")
    if spec is None:
        if not flat:
            return None
        options = flat.get("json_options")
        if isinstance(options, str):
            try:
                flat["json_options"] = json.loads(options)
            except json.JSONDecodeError as e:
                raise ValueError(f"lexguide_json_options is not valid JSON: {e}") from None
            except RecursionError:
                raise ValueError("lexguide_json_options nests JSON too deeply to parse") from None
        return flat
    if not isinstance(spec, Mapping):
        raise ValueError(  # noqa: TRY004 - a client error (HTTP 400), not a TypeError
            "extra_args['lexguide'] must be an object such as {'json_schema': {...}}")
    return dict(spec)


def _from_structured_outputs(so: Any) -> dict[str, Any] | None:
    """A lexguide spec for vLLM's ``StructuredOutputsParams``; None for what lexguide leaves
    to vLLM (``disable_additional_properties``)."""
    if so.disable_additional_properties:
        return None
    options: dict[str, Any] = {}
    if so.disable_any_whitespace:
        options["whitespace"] = "compact"
    if so.whitespace_pattern:
        options["whitespace_pattern"] = so.whitespace_pattern
    if so.json is not None:
        spec: dict[str, Any] = {"json_schema": so.json}
    elif so.json_object:
        spec = {"json_schema": {"type": "object"}}
    elif so.regex is not None:
        return {"regex": so.regex}
    elif so.grammar is not None:
        return {"grammar": so.grammar}
    elif so.choice is not None:
        alternatives = " | ".join(json.dumps(str(c)) for c in so.choice)
        return {"grammar": f"%llguidance {{}}\nstart: {alternatives}\n"}
    elif so.structural_tag is not None:  # JSON text, as vLLM keeps it
        spec = {"structural_tag": so.structural_tag}
    else:
        return None
    if options:
        spec["json_options"] = options
    return spec


class _Request:
    """One constrained request: its matcher and how far it has followed the output."""

    __slots__ = ("failed", "matcher", "max_tokens", "output", "prompt_len")

    def __init__(self, matcher: Matcher | None, output: list[int] | None,
                 max_tokens: int | None, prompt_len: int) -> None:
        self.matcher = matcher  # None: the constraint did not compile (the request fails)
        self.output = output  # V1: vLLM's running list of output tokens (a reference)
        self.max_tokens = max_tokens
        self.prompt_len = prompt_len
        self.failed = matcher is None

    def follow(self, tokens: list[int]) -> None:
        """Consume the output tokens that follow the ones consumed so far; a rejected token
        marks the request failed (its mask becomes EOS only) and is logged."""
        matcher = self.matcher
        assert matcher is not None
        try:
            for t in tokens:
                matcher.consume(t)
        except TokenRejected as e:
            self.failed = True
            logger.error("lexguide: output token %s of a constrained request was not allowed by "
                         "its grammar (%s); ending the request", matcher.n_consumed, e)


class LexguideLogitsProcessor(_v1.LogitsProcessor, _V2Base):  # type: ignore[misc]
    """vLLM custom logits processor constraining the requests that ask for it.

    A request asks through ``SamplingParams.extra_args`` (see :func:`request_spec`); others
    are untouched. Bad constraints are rejected when the request is admitted
    (``validate_params``: an HTTP 400 from ``vllm serve``), with the compiler's located
    message. Near the end of ``max_tokens`` (or of the model's context) the masks keep only
    tokens after which the output can still be completed in time.

    Should a sampled token be one the mask did not allow (another processor re-enabled it),
    the request is ended: its mask allows only EOS, and the error is logged; the engine goes
    on serving the other requests.
    """

    _announced = False  # the response_format takeover was logged in this process

    # -- admission (frontend process) ------------------------------------------------------
    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        spec = request_spec(sampling_params)
        so = getattr(sampling_params, "structured_outputs", None)
        if spec is None and so is not None and os.environ.get(ENV_STRUCTURED_OUTPUTS) == "1":
            spec = _from_structured_outputs(so)
            if spec is not None:
                check_compiles(spec, "structured_outputs")
                if not cls._announced:
                    cls._announced = True
                    logger.info("lexguide: constraining structured_outputs / response_format "
                                "requests (%s=1)", ENV_STRUCTURED_OUTPUTS)
                extra = dict(sampling_params.extra_args or {})
                extra["lexguide"] = spec
                sampling_params.extra_args = extra
                sampling_params.structured_outputs = None  # constrained by lexguide instead
                return
        if spec is not None:
            if so is not None:
                raise ValueError("a request cannot have both a lexguide constraint and "
                                 "structured_outputs / response_format")
            check_compiles(spec, "lexguide")

    # -- construction (engine process) -----------------------------------------------------
    def __init__(self, vllm_config: Any, *args: Any) -> None:
        """V1 runner: ``(vllm_config, device, is_pin_memory)``; V2 runner:
        ``(vllm_config, req_states)``."""
        if len(args) == 2:
            self._runner, self._req_states = 1, None
        elif len(args) == 1:
            self._runner, self._req_states = 2, args[0]
        else:
            raise TypeError("LexguideLogitsProcessor(vllm_config, device, is_pin_memory) or "
                            "(vllm_config, req_states)")
        model_config = vllm_config.model_config
        self._max_model_len = int(model_config.max_model_len)
        self.info = self._tokenizer_info(model_config)
        self._requests: dict[int, _Request] = {}
        self._masker = TorchMasker(torch)
        self._eos_row = torch.from_numpy(
            self.info.mask_from_ids(sorted(self.info.eos_ids)).view("int32").copy())[None, :]
        self._bitmask = torch.zeros((0, self.info.n_words), dtype=torch.int32)

    @staticmethod
    def _tokenizer_info(model_config: Any) -> TokenizerInfo:
        from vllm.tokenizers import cached_tokenizer_from_config

        tokenizer = cached_tokenizer_from_config(model_config)
        if tokenizer is None:
            raise ValueError("lexguide needs the model's tokenizer (skip_tokenizer_init is set)")
        eos: set[int] = set()
        if getattr(tokenizer, "eos_token_id", None) is not None:
            eos.add(int(tokenizer.eos_token_id))
        generation = model_config.try_get_generation_config() or {}
        extra = generation.get("eos_token_id")
        if extra is not None:
            eos.update([extra] if isinstance(extra, int) else extra)
        return TokenizerInfo.from_huggingface(
            tokenizer, eos_ids=sorted(eos) or None, vocab_size=model_config.get_vocab_size())

    def _new_request(self, params: Any, prompt_len: int,
                     output: list[int] | None) -> _Request | None:
        spec = request_spec(params)
        if spec is None:
            return None
        try:
            grammar = grammar_from_spec(spec)
        except (LexguideError, ValueError, TypeError) as e:  # validate_params let it through
            logger.error("lexguide: cannot compile a request's constraint, ending it: %s", e)
            return _Request(None, output, params.max_tokens, prompt_len)
        return _Request(Matcher(grammar, self.info), output, params.max_tokens, prompt_len)

    def is_argmax_invariant(self) -> bool:
        return False

    # -- V1 model runner -------------------------------------------------------------------
    def update_state(self, batch_update: Any) -> None:
        process_dict_updates(
            self._requests, batch_update,
            lambda params, prompt, output: self._new_request(
                params, len(prompt) if prompt is not None else 0, output),
        )

    def _follow_v1(self, request: _Request) -> None:
        output, matcher = request.output, request.matcher
        assert output is not None and matcher is not None
        n = len(output)
        while n and output[n - 1] == -1:  # async scheduling: tokens not copied back yet
            n -= 1
        if n < len(output):
            request.failed = True
            logger.error("lexguide: the output tokens of a request are not known yet (async "
                         "scheduling without --logits-processors?); ending the request")
            return
        done = matcher.n_consumed
        if n < done:  # tokens discarded (e.g. after a KV-load failure)
            matcher.rollback(done - n)
        elif n > done:
            request.follow(output[done:n])

    # -- both runners ----------------------------------------------------------------------
    def apply(self, logits: Any, ctx: Any = None) -> Any:
        """Mask the constrained rows of ``logits`` in place; returns ``logits``."""
        if not self._requests:
            return logits
        if ctx is None:
            return self._apply_v1(logits)
        return self._apply_v2(logits, ctx)

    def _apply_v1(self, logits: Any) -> Any:
        rows: list[int] = []
        requests: list[_Request] = []
        for index, request in self._requests.items():
            if not request.failed:
                self._follow_v1(request)
            rows.append(index)
            requests.append(request)
        self._fill(requests, [len(r.output or ()) for r in requests])
        self._masker.apply(logits, self._bitmask[: len(rows)], rows)
        return logits

    def _fill(self, requests: list[_Request], n_out: list[int], first_row: int = 0) -> None:
        """Masks of ``requests`` (in order) into bitmask rows ``first_row`` onwards: one
        ``fill_masks`` call for the live ones, the EOS-only row for failed or dead ones."""
        end = first_row + len(requests)
        if self._bitmask.shape[0] < end:  # grow, keeping the rows filled so far
            grown = torch.zeros((max(end, 2 * self._bitmask.shape[0]), self.info.n_words),
                                dtype=torch.int32)
            grown[: self._bitmask.shape[0]] = self._bitmask
            self._bitmask = grown
        live = [i for i, r in enumerate(requests) if not r.failed]
        if live:
            matchers = [requests[i].matcher for i in live]  # type: ignore[misc]
            remaining = [self._remaining(requests[i], n_out[i]) for i in live]
            if len(live) == len(requests):
                fill_masks(matchers, self._bitmask[first_row:end], None, remaining)
            else:
                tmp = torch.zeros((len(live), self.info.n_words), dtype=torch.int32)
                fill_masks(matchers, tmp, None, remaining)
                self._bitmask[[first_row + i for i in live]] = tmp
        block = self._bitmask[first_row:end]
        for i in (~block.any(dim=1)).nonzero().flatten().tolist():
            request = requests[i]
            matcher = request.matcher
            if matcher is not None and not request.failed and not matcher.is_accepting():
                request.failed = True
                logger.error("lexguide: a request's grammar reached a dead end; ending it")
            block[i] = self._eos_row[0]

    def _remaining(self, request: _Request, n_out: int) -> int:
        left = self._max_model_len - request.prompt_len - n_out
        if request.max_tokens is not None:
            left = min(left, request.max_tokens - n_out)
        return max(1, left)

    # -- V2 model runner -------------------------------------------------------------------
    def add_request(self, req_idx: int, sampling_params: Any) -> bool:
        request = self._new_request(sampling_params, 0, None)
        if request is None:
            self._requests.pop(req_idx, None)
            return False
        self._requests[req_idx] = request
        return True

    def _apply_v2(self, logits: Any, ctx: Any) -> Any:
        slots = ctx.expanded_idx_mapping.tolist()  # row -> request slot
        mine = [r for r, s in enumerate(slots) if s in self._requests]
        if not mine:
            return logits
        local = ctx.expanded_local_pos.tolist()
        pos = ctx.pos.tolist()
        fed = ctx.input_ids.tolist()
        states = self._req_states
        prompt_lens = states.prompt_len.np
        all_tokens = states.all_token_ids.gpu
        # rows of one request: its first row (local position 0), then its draft rows
        first_rows: list[int] = []
        drafts: dict[int, list[int]] = {}
        for r in mine:
            if local[r] == 0:
                first_rows.append(r)
                drafts[r] = []
            else:
                drafts[r - local[r]].append(r)
        requests = []
        n_out = []
        for r in first_rows:
            request = self._requests[slots[r]]
            request.prompt_len = prompt_len = int(prompt_lens[slots[r]])
            # output tokens before the token fed at this row, then that token itself
            n = pos[r] - prompt_len + 1
            matcher = request.matcher
            if matcher is not None and not request.failed:
                done = matcher.n_consumed
                if n < done:
                    matcher.rollback(done - n)
                elif n > done:
                    known = all_tokens[slots[r], prompt_len + done: pos[r]].tolist()
                    request.follow(known + [fed[r]])
            requests.append(request)
            n_out.append(max(0, n))
        self._fill(requests, n_out)
        order = list(first_rows)
        # speculative rows: the mask after the drafts before each (validate, consume, roll back)
        extra = [(request, n, [fed[d] for d in drafts[r]], drafts[r])
                 for r, request, n in zip(first_rows, requests, n_out) if drafts[r]]
        row = len(first_rows)
        for request, n, tokens, draft_rows in extra:
            matcher = request.matcher
            n_ok = 0 if matcher is None or request.failed else matcher.validate_tokens(tokens)
            for j, d in enumerate(draft_rows):
                if j < n_ok:
                    matcher.consume(tokens[j])  # type: ignore[union-attr]
                self._fill([request], [n + min(j + 1, n_ok)], row)
                order.append(d)
                row += 1
            if n_ok:
                matcher.rollback(n_ok)  # type: ignore[union-attr]
        self._masker.apply(logits, self._bitmask[: len(order)], order)
        return logits

    def __repr__(self) -> str:
        return (f"LexguideLogitsProcessor(runner=V{self._runner}, requests={len(self._requests)}, "
                f"vocab={self.info.vocab_size})")
