"""``Model``: load a GGUF, generate text (optionally grammar-constrained), chat, stream.

The generation loop (one step = one forward + one sampled token):

1. feed the pending tokens (the prompt, or the last sampled token plus any forced tokens) to
   the model in one batched forward; only the last position is projected to logits;
2. with a grammar: take the matcher's bitmask, and when few tokens are allowed project only
   their rows of the output matrix (a 262k-row matvec becomes a few-hundred-row one);
3. sample (penalties → mask → temperature → top-k → top-p → min-p);
4. with a grammar: ``consume`` the token, then append ``forced_tokens()`` without sampling —
   they join the next forward's batch; stop when the matcher is stopped (only EOS can follow).

Steps 2-4 and the stop checks (end-of-generation token, complete grammar, stop strings,
``max_tokens``, the think section's budget) are :class:`lexguide.runtime.step.Decoding`'s, the
same code the server's scheduler runs for each sequence of its batches.

A grammar failure (empty mask, rejected token, dead end) raises :class:`MatcherError`; the loop
never continues unconstrained. The matrix products run in the native kernels straight from the
GGUF's quantized blocks, split over ``n_threads`` threads of the kernels' pool for prefill and
``decode_threads`` for decode (``runtime.kernels``); the forward pass does not call BLAS, and
numpy's BLAS is held to one thread while a generation runs: OpenBLAS's own threads busy-wait
and were 2-5x slower on this shared 2-core machine.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lexguide.engine.matcher import Matcher
from lexguide.errors import ModelError
from lexguide.runtime.chat import GEMMA_TEMPLATE, render_chat
from lexguide.runtime.config import ModelConfig
from lexguide.runtime.model import Transformer
from lexguide.runtime.reasoning import (
    ThinkBudget,
    ThinkMarkers,
    answer_format,
    check_budget,
    find_think_markers,
    reasoning_format,
    split_reasoning,
    think_state,
)
from lexguide.runtime.sampler import Sampler, SamplerConfig
from lexguide.runtime.step import Decoding, Piece, sparse, think_end
from lexguide.runtime.step import holdback as _holdback  # noqa: F401 - its old home
from lexguide.runtime.weights import load_weights

__all__ = ["Completion", "CompletionChunk", "Model", "Timings", "think_end"]

_DEFAULT_N_CTX = 4096
_GRAMMAR_CACHE = 32  # compiled grammars kept per model (schemas and grammar texts)
_PROMPT_CHUNK = 256  # prompt tokens per forward when prompt_progress is set
_PROMPT_FIRST = 64  # the first forward's tokens then: a first report after about a second


@dataclass(slots=True)
class Timings:
    """Where the time went (seconds), as ``llama-cli`` reports it.

    ``prompt_s`` covers the first forward (prompt plus any tokens forced at the start);
    ``generation_s`` everything after it; ``mask_s`` the part of it spent in the matcher
    (masks, consume, forced tokens).
    """

    load_s: float = 0.0
    prompt_tokens: int = 0
    prompt_s: float = 0.0
    generated_tokens: int = 0
    forced_tokens: int = 0
    generation_s: float = 0.0
    mask_s: float = 0.0
    mask_steps: int = 0

    @property
    def prompt_tok_s(self) -> float:
        """Prompt evaluation speed (tokens per second)."""
        return self.prompt_tokens / self.prompt_s if self.prompt_s else 0.0

    @property
    def generation_tok_s(self) -> float:
        """Generation speed (generated tokens per second, forced ones included)."""
        return self.generated_tokens / self.generation_s if self.generation_s else 0.0

    @property
    def mask_ms_per_token(self) -> float:
        """Matcher time per sampled token, in milliseconds."""
        return 1e3 * self.mask_s / self.mask_steps if self.mask_steps else 0.0

    def summary(self) -> str:
        """One human-readable line per phase (for the CLI's stderr)."""
        def rate(tokens_per_s: float, seconds: float) -> str:  # none under a millisecond
            return f"{tokens_per_s:7.1f} tok/s" if seconds >= 1e-3 else "      - tok/s"

        lines = [
            f"load:       {self.load_s * 1e3:9.1f} ms",
            (f"prompt:     {self.prompt_s * 1e3:9.1f} ms / {self.prompt_tokens:4d} tokens "
            f"({rate(self.prompt_tok_s, self.prompt_s)})"),
            (f"generation: {self.generation_s * 1e3:9.1f} ms / {self.generated_tokens:4d} tokens "
            f"({rate(self.generation_tok_s, self.generation_s)}, {self.forced_tokens} forced)"),
        ]
        if self.mask_steps:
            lines.append(f"grammar:    {self.mask_s * 1e3:9.1f} ms ({self.mask_ms_per_token:.3f} ms/token)")
        return "\n".join(lines)


@dataclass(slots=True)
class Completion:
    """The result of :meth:`Model.generate`.

    ``token_ids`` are the generated tokens (an end-of-generation token is not included; a
    stop string's tokens are); ``finish_reason`` is ``"stop"`` (EOG token, stop string, or
    a complete grammar — also when ``max_tokens`` ran out just as it completed) or
    ``"length"`` (``max_tokens`` or the context size reached first).
    ``captures`` lists the grammar's Lark ``capture`` values, ``(name, text)`` in output order
    (:meth:`lexguide.Matcher.captures`). With reasoning (``reasoning_budget=``),
    ``reasoning`` is the think text (None when the output has no think section) and
    ``answer`` what follows it; ``text`` stays the whole output.
    """

    text: str
    token_ids: list[int]
    finish_reason: str
    timings: Timings = field(default_factory=Timings)
    prompt_token_ids: list[int] = field(default_factory=list)
    captures: list[tuple[str, str]] = field(default_factory=list)
    reasoning: str | None = None
    answer: str | None = None


@dataclass(slots=True)
class CompletionChunk:
    """One piece of a streamed generation; the last one has ``finish_reason`` and ``timings``."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    timings: Timings | None = None


class _BlasThreads:
    """Switches the BLAS thread count cheaply (µs) between prefill and decode (threadpoolctl)."""

    def __init__(self) -> None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - threadpoolctl is a dependency
            self._libs: list[Any] = []
        else:
            self._libs = ThreadpoolController().select(user_api="blas").lib_controllers
        self._original = [lib.num_threads for lib in self._libs]
        self._current: int | None = None

    def set(self, n: int) -> None:
        if n != self._current:
            for lib in self._libs:
                lib.set_num_threads(n)
            self._current = n

    def restore(self) -> None:
        for lib, n in zip(self._libs, self._original):
            lib.set_num_threads(n)
        self._current = None


class Model:
    """A GGUF language model ready to generate.

    Build with :meth:`from_gguf`. Not thread-safe for concurrent generations on one instance
    (a lock serialises them); the KV cache is kept between calls so a prompt that extends the
    previous one (chat turns) only evaluates its new tokens.

    ``prompt_progress``: None, or ``f(done, total, elapsed_s)`` called while a prompt of more
    than 64 new tokens is evaluated (then in forwards of 64, then 256 tokens over the same KV
    cache); ``lexguide run`` uses it for its progress bar.
    """

    def __init__(self, transformer: Transformer, tokenizer: Any, metadata: Mapping[str, Any], *,
                 n_ctx: int, n_threads: int, decode_threads: int, load_s: float,
                 path: Path | None = None) -> None:
        self.transformer = transformer
        self.config: ModelConfig = transformer.config
        self.tokenizer = tokenizer
        self.chat_template: str | None = metadata.get("tokenizer.chat_template")
        self.path = path
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.decode_threads = decode_threads
        self.load_s = load_s
        self._cache = transformer.new_cache(n_ctx)
        self._cached_ids: list[int] = []
        self._lock = threading.RLock()
        self._blas = _BlasThreads()
        self._token_bytes = tuple(tokenizer.all_token_bytes())  # untracked by the GC
        self._eog = np.zeros(self.config.n_vocab, dtype=bool)
        self._eog[[t for t in tokenizer.eog_ids if t < self.config.n_vocab]] = True
        self._tokenizer_info: Any = None
        self._grammars: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self.prompt_progress: Callable[[int, int, float], None] | None = None

    # ----------------------------------------------------------------------------- loading
    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str] | None = None, *,
                  n_ctx: int | None = None, n_threads: int | None = None, decode_threads: int | None = None,
                  progress: bool | None = None, cache_type: str = "f16") -> Model:
        """Load a GGUF model (default: the bundled SmolLM2-135M-Instruct).

        The weights stay the file's quantized blocks, mapped (memory ≈ file size), multiplied
        by the native kernels. ``n_ctx`` defaults to min(training context, 4096).
        ``n_threads`` (prompt evaluation) and ``decode_threads`` (decode steps) default to the
        available cores (at most 8). ``cache_type`` is the KV caches' element type: ``"f16"``
        (llama.cpp's default), ``"f32"`` or ``"q8_0"`` (``runtime.model.KVCache``; the caches
        hold ``n_ctx`` positions, committed as they fill). Raises :class:`ModelError` for an
        unsupported architecture, missing tensors or an unknown or unfit cache type,
        ``GGUFError`` for a malformed file.
        """
        from lexguide.gguf import open_gguf
        from lexguide.tokenizer import Tokenizer

        if path is None:
            from lexguide.model_files import default_model_path

            path = default_model_path()
        t0 = time.perf_counter()
        gguf = open_gguf(path)
        config = ModelConfig.from_metadata(gguf.metadata)
        tokenizer = Tokenizer.from_gguf(gguf)
        if tokenizer.vocab_size != config.n_vocab:
            config = ModelConfig.from_metadata(gguf.metadata, n_vocab=tokenizer.vocab_size)
        w = load_weights(gguf, config, progress=progress)
        # the weights map the file themselves: the parser's map (and the metadata pages it
        # touched) can go
        gguf.close()
        n_ctx = min(config.ctx_train, _DEFAULT_N_CTX) if n_ctx is None else int(n_ctx)
        if n_threads is None:
            n_threads = min(_available_cores(), 8)
        if decode_threads is None:
            decode_threads = n_threads
        model = cls(Transformer(config, w, cache_type), tokenizer, gguf.metadata, n_ctx=n_ctx,
                    n_threads=max(1, n_threads), decode_threads=max(1, decode_threads),
                    load_s=time.perf_counter() - t0, path=Path(path))
        # Everything alive now lives as long as the model. Freezing it keeps the cyclic
        # garbage collector from re-scanning it in every full collection during generation
        # (~15 ms each here; the grammar engine's caches trigger them): measured on the C-like
        # grammar's cold masks, 964 -> 794 ms. Reference counting still frees these objects.
        gc.freeze()
        return model

    def reset(self) -> None:
        """Forget the cached context, so the next call evaluates its whole prompt (mutates)."""
        with self._lock:
            self._cache.truncate(0)
            self._cached_ids = []

    @property
    def tokenizer_info(self) -> Any:
        """The engine's :class:`TokenizerInfo` for this tokenizer (built on first use)."""
        if self._tokenizer_info is None:
            from lexguide.engine import TokenizerInfo

            self._tokenizer_info = TokenizerInfo.from_tokenizer(self.tokenizer)
        return self._tokenizer_info

    # ----------------------------------------------------------------------------- raw logits
    def logits(self, token_ids: Sequence[int]) -> npt.NDArray[np.float32]:
        """Logits (T, n_vocab) of every position of ``token_ids``, from an empty cache (pure)."""
        ids = list(token_ids)
        with self._lock:
            self._blas.set(1)
            self.transformer.threads = self.n_threads
            try:
                cache = self.transformer.new_cache(max(len(ids), 1))
                return self.transformer.forward(ids, cache, logits="all")
            finally:
                self._blas.restore()

    # ----------------------------------------------------------------------------- generation
    def generate(self, prompt: str | Sequence[int], *, max_tokens: int = 256,
                 temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
                 min_p: float = 0.05, repeat_penalty: float = 1.0,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 repeat_last_n: int = 64, seed: int | None = None, grammar: Any = None,
                 json_schema: Any = None, structural_tag: Any = None,
                 stop: str | Sequence[str] | None = None, stream: bool = False,
                 sampler: SamplerConfig | None = None,
                 matcher: Any = None, add_special: bool = True, parse_special: bool = False,
                 complete_within_budget: bool = True, reasoning_budget: int | None = None,
                 think_markers: ThinkMarkers | tuple[str, str] | None = None,
                 ) -> Completion | Iterator[CompletionChunk]:
        """Continue ``prompt`` (text, or token ids used as given).

        ``grammar`` is a :class:`lexguide.Grammar` or grammar text (``%llguidance`` → Lark
        variant, ``{`` → llguidance grammar list, else GBNF); ``json_schema`` a schema (dict
        or JSON text);
        ``structural_tag`` a structural tag (dict or JSON text, any shape
        :meth:`lexguide.Grammar.from_structural_tag` takes: free text with tags inside,
        ``docs/structural_tags.md``). With any of them (one at most), every
        token is checked by a matcher and the output is a prefix of the language; it is
        complete (``finish_reason == "stop"``) unless ``max_tokens`` or the context ran out
        first (``"length"``), which the budget-aware mask avoids whenever a completion fits. ``sampler`` overrides
        the individual sampling arguments; ``matcher`` is a ready ``lexguide.Matcher`` (or an
        object with its interface) used instead of those — it is advanced
        in place. ``complete_within_budget`` (default on): once what is left of
        ``max_tokens`` (or of the context) gets tight, the mask keeps only tokens after which
        the grammar can still finish in time, so the output ends complete whenever a
        completion fits (:meth:`lexguide.Matcher.compute_mask`); ``False`` masks without
        looking ahead.
        ``reasoning_budget`` (tokens; -1 unlimited) or ``think_markers`` (begin, end) turn on
        reasoning: the markers default to those of the chat template
        (:func:`~lexguide.runtime.reasoning.find_think_markers`), the output may start with a
        think section (or starts inside one when the prompt ends with the begin marker), the
        grammar, schema or structural tag applies only after it, and once
        ``reasoning_budget`` tokens were spent thinking the end marker is forced
        (``docs/reasoning_and_tools.md``); ``grammar`` must then be text, not a compiled
        Grammar.
        ``stream=True`` returns an iterator of
        :class:`CompletionChunk`. Raises :class:`MatcherError` if the grammar cannot go on,
        :class:`ModelError` for bad arguments.
        """
        if sampler is None:
            sampler = SamplerConfig(
                temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                presence_penalty=presence_penalty, repeat_last_n=repeat_last_n, seed=seed,
            )
        if max_tokens < 0:
            raise ModelError(f"max_tokens must be >= 0, got {max_tokens}")
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt, add_special=add_special, parse_special=parse_special)
        else:
            ids = [int(t) for t in prompt]
        if not ids:
            if self.tokenizer.bos_id is None:
                raise ModelError("empty prompt and the vocabulary has no BOS token to start from")
            ids = [self.tokenizer.bos_id]
        think = None
        if structural_tag is not None:
            if grammar is not None or json_schema is not None or matcher is not None:
                raise ModelError("pass one of grammar=, json_schema=, structural_tag= and "
                                 "matcher=, not several")
            from lexguide import Grammar

            # compiled on its own first, so an error names the path in the caller's spec
            grammar = Grammar.from_structural_tag(structural_tag)
        if reasoning_budget is not None or think_markers is not None:
            if matcher is not None:
                raise ModelError("reasoning needs grammar=/json_schema=, not matcher=")
            if structural_tag is not None:  # the tag's format, composed after the section
                grammar, answer = None, answer_format(structural_tag=structural_tag)
            else:
                answer = None
            think, grammar = self._reasoning(ids, grammar, json_schema, reasoning_budget,
                                             think_markers, answer)
            json_schema = None
        if matcher is None:
            matcher = self._matcher(grammar, json_schema)
        elif grammar is not None or json_schema is not None:
            raise ModelError("pass either matcher= or grammar=/json_schema=, not both")
        stops = [stop] if isinstance(stop, str) else list(stop or ())
        if any(not s for s in stops):
            raise ModelError("stop strings must be non-empty")
        chunks = self._chunks(ids, sampler, matcher, max_tokens, stops, complete_within_budget,
                              think)
        if stream:
            return chunks
        text: list[str] = []
        token_ids: list[int] = []
        last = CompletionChunk("", [])
        for last in chunks:
            text.append(last.text)
            token_ids.extend(last.token_ids)
        captures = []
        if getattr(matcher, "captures", None) is not None:  # duck-typed matchers may lack it
            captures = [(name, value.decode("utf-8", "replace")) for name, value in matcher.captures()]
        out = Completion("".join(text), token_ids, last.finish_reason or "length",
                         last.timings or Timings(), list(ids), captures)
        if think is not None:
            out.reasoning, out.answer = split_reasoning(out.text, think.markers, think.initial)
        return out

    def chat(self, messages: Sequence[Mapping[str, Any]], *, chat_template: str | None = None,
             add_generation_prompt: bool = True,
             chat_template_kwargs: Mapping[str, Any] | None = None,
             **kwargs: Any) -> Completion | Iterator[CompletionChunk]:
        """Generate the assistant's reply to ``messages`` (``[{"role":..., "content":...}]``).

        Renders the GGUF's ``tokenizer.chat_template`` (or ``chat_template``); Gemma GGUFs,
        which ship none, use the Gemma turn format. Special tokens in the rendered text are
        parsed. ``chat_template_kwargs`` are variables for the template (``enable_thinking``,
        ``tools``). Keyword arguments are those of :meth:`generate`.
        """
        prompt_ids = self.chat_prompt_ids(messages, chat_template=chat_template,
                                          add_generation_prompt=add_generation_prompt,
                                          **(chat_template_kwargs or {}))
        return self.generate(prompt_ids, **kwargs)

    def chat_prompt_ids(self, messages: Sequence[Mapping[str, Any]], *,
                        chat_template: str | None = None,
                        add_generation_prompt: bool = True, **variables: Any) -> list[int]:
        """Token ids of the rendered chat prompt (BOS added when the vocabulary wants one);
        ``variables`` go to the template (``tools``, ``enable_thinking``, ...)."""
        return self.encode_chat(self.render_chat(messages, chat_template=chat_template,
                                                 add_generation_prompt=add_generation_prompt,
                                                 **variables))

    def render_chat(self, messages: Sequence[Mapping[str, Any]], *,
                    chat_template: str | None = None, add_generation_prompt: bool = True,
                    **variables: Any) -> str:
        """The chat prompt as text (pure: touches no model state, safe from any thread)."""
        template = chat_template or self.chat_template
        if template is None:
            if self.config.arch != "gemma3":
                raise ModelError("this GGUF has no tokenizer.chat_template; pass chat_template=")
            template = GEMMA_TEMPLATE
        tok = self.tokenizer
        name = tok.token_text
        bos = name(tok.bos_id) if tok.bos_id is not None else ""
        eos = name(tok.eos_id) if tok.eos_id is not None else ""
        return render_chat(template, messages, add_generation_prompt=add_generation_prompt,
                           bos_token=bos, eos_token=eos, **variables)

    def encode_chat(self, text: str) -> list[int]:
        """Token ids of a rendered chat prompt: special tokens parsed, BOS added when the
        vocabulary wants one and the template did not write it."""
        tok = self.tokenizer
        ids = tok.encode(text, add_special=False, parse_special=True)
        if tok.add_bos and tok.bos_id is not None and (not ids or ids[0] != tok.bos_id):
            ids.insert(0, tok.bos_id)
        return ids

    def reasoning_plan(self, prompt_text: str, budget: int | None,
                       markers: ThinkMarkers | tuple[str, str] | None = None,
                       answer: Mapping[str, Any] | None = None,
                       ) -> tuple[dict[str, Any], ThinkBudget]:
        """The structural-tag format of an output that thinks, then answers ``answer`` (a
        structural-tag format; any text by default), and the :class:`ThinkBudget` that
        counts ``budget`` tokens (-1 or None: unlimited) for one generation from
        ``prompt_text``. ``markers`` default to the chat template's. Pure but for the
        tokenizer lookup of the end marker; raises :class:`ModelError`."""
        budget = check_budget(budget)
        if markers is None:
            found = find_think_markers(self.chat_template)
            if found is None:
                raise ModelError("reasoning: the chat template names no think markers "
                                 "(known: <think>...</think> and others); give them explicitly")
            markers = found
        elif not isinstance(markers, ThinkMarkers):
            if len(markers) != 2 or not all(isinstance(m, str) and m for m in markers):
                raise ModelError("think markers must be two non-empty strings (begin, end)")
            markers = ThinkMarkers(*markers)
        state = think_state(prompt_text, markers)
        fmt = reasoning_format(markers, state, answer or answer_format(), budget)
        end_ids = self.tokenizer.encode(markers.end, add_special=False, parse_special=True)
        return fmt, ThinkBudget(markers, state, budget, end_ids)

    # ----------------------------------------------------------------------------- internals
    def _reasoning(self, ids: list[int], grammar: Any, json_schema: Any, budget: int | None,
                   markers: Any, answer: dict[str, Any] | None = None,
                   ) -> tuple[ThinkBudget, Any]:
        """(budget counter, grammar) of a generation that thinks before it answers (the
        structural-tag format ``answer`` when given, else the grammar or schema)."""
        from lexguide import Grammar

        if grammar is not None and not isinstance(grammar, str):
            raise ModelError("reasoning composes grammar text or a schema with the think "
                             "section; pass grammar= as text, not a compiled Grammar")
        if grammar is not None and json_schema is not None:
            raise ModelError("pass either grammar= or json_schema=, not both")
        prompt_text = self.tokenizer.decode(ids)
        fmt, think = self.reasoning_plan(prompt_text, budget, markers,
                                         answer or answer_format(json_schema, grammar))
        key = json.dumps(fmt, sort_keys=True)
        g = self._grammars.get(("tag", key))
        if g is None:
            g = Grammar.from_structural_tag(fmt)
            self._grammars[("tag", key)] = g
            if len(self._grammars) > _GRAMMAR_CACHE:
                self._grammars.popitem(last=False)
        return think, g

    def _matcher(self, grammar: Any, json_schema: Any) -> Any:
        if grammar is None and json_schema is None:
            return None
        if grammar is not None and json_schema is not None:
            raise ModelError("pass either grammar= or json_schema=, not both")
        from lexguide.engine import Matcher

        g = grammar if grammar is not None and not isinstance(grammar, str) else self._compiled(grammar, json_schema)
        return Matcher(g, self.tokenizer_info)

    def _compiled(self, text: str | None, json_schema: Any) -> Any:
        """The Grammar of a schema or grammar text, from a small per-model cache: a server
        answering many requests with one schema compiles it once, and the masks memoised for
        it serve every request (after the first, a mask is a dict lookup)."""
        from lexguide import Grammar
        try:
            key = ("text", text) if json_schema is None else (
                "json", json_schema if isinstance(json_schema, str) else json.dumps(json_schema))
        except (TypeError, ValueError):  # not JSON-serialisable: compile (and fail) uncached
            return Grammar.from_json_schema(json_schema)
        g = self._grammars.get(key)
        if g is not None:
            self._grammars.move_to_end(key)
            return g
        g = Grammar.from_json_schema(json_schema) if json_schema is not None else Grammar.parse(text)
        self._grammars[key] = g
        if len(self._grammars) > _GRAMMAR_CACHE:
            self._grammars.popitem(last=False)
        return g

    def _chunks(self, prompt_ids: list[int], cfg: SamplerConfig, matcher: Any, max_tokens: int,
                stops: list[str], budget_aware: bool = True,
                think: ThinkBudget | None = None) -> Iterator[CompletionChunk]:
        """The generation as text chunks (stop strings applied, text that may start one held
        back); the last chunk has the finish reason and the timings."""
        with self._lock:
            self._blas.set(1)
            try:
                yield from self._steps_locked(prompt_ids, cfg, matcher, max_tokens, stops,
                                              budget_aware, think)
            finally:
                self._blas.restore()

    def _steps_locked(self, prompt_ids: list[int], cfg: SamplerConfig, matcher: Any,
                      max_tokens: int, stops: list[str], budget_aware: bool = True,
                      think: ThinkBudget | None = None) -> Iterator[CompletionChunk]:
        """The token loop: one forward per step, then the step of
        :class:`~lexguide.runtime.step.Decoding` (mask, sample, consume, forced tokens, stop
        checks); its pieces become chunks, their tokens the next forward's input."""
        tf = self.transformer
        n_vocab = self.config.n_vocab
        timings = Timings(load_s=self.load_s)
        seq = Decoding(matcher, Sampler(cfg), prompt_ids, max_tokens, self._token_bytes,
                       self._eog, stops=stops, think=think)
        budget = budget_aware and isinstance(matcher, Matcher)
        pending = self._reuse_cache(prompt_ids)
        mask_s = 0.0
        first = True
        t_gen = time.perf_counter()

        def chunks(pieces: list[Piece]) -> Iterator[CompletionChunk]:
            timings.generated_tokens = seq.n_gen
            timings.forced_tokens = seq.n_forced
            timings.mask_s = mask_s + seq.matcher_s
            if not first:
                timings.generation_s = time.perf_counter() - t_gen
            for p in pieces:
                pending.extend(p.tokens)
                yield CompletionChunk(p.text, p.tokens, p.finish,
                                      timings if p.finish is not None else None)

        yield from chunks(seq.start())
        while seq.finish is None:
            if self._cache.n + len(pending) > self._cache.n_ctx:
                yield from chunks([seq.end("length")])
                return
            t0 = time.perf_counter()
            tf.threads = self.n_threads if len(pending) > 1 else self.decode_threads
            self._cached_ids = self._cached_ids[: self._cache.n]
            report = self.prompt_progress if first else None
            if report is not None and len(pending) > _PROMPT_FIRST:
                # the prompt in chunks (the same KV cache entries), reporting after each
                start = 0
                for end in range(_PROMPT_FIRST, len(pending), _PROMPT_CHUNK):
                    tf.hidden_last(pending[start:end], self._cache)
                    self._cached_ids.extend(pending[start:end])
                    report(end, len(pending), time.perf_counter() - t0)
                    start = end
                rest = pending[start:]
                h = tf.hidden_last(rest, self._cache)
                self._cached_ids.extend(rest)
                report(len(pending), len(pending), time.perf_counter() - t0)
            else:
                h = tf.hidden_last(pending, self._cache)
                self._cached_ids.extend(pending)
            if first:
                timings.prompt_tokens = len(pending)
                timings.prompt_s = time.perf_counter() - t0
                t_gen = time.perf_counter()
                first = False
            pending.clear()
            allowed = None
            if matcher is not None:
                tm = time.perf_counter()
                # tokens left, this one included: the mask keeps the output completable
                left = seq.left(self._cache.n_ctx - self._cache.n)
                mask = matcher.compute_mask(left) if budget else matcher.compute_mask()
                allowed = seq.allowed(mask, n_vocab)
                mask_s += time.perf_counter() - tm
                timings.mask_steps += 1
            if allowed is None:
                logits = tf.project_rows(h)
            elif sparse(allowed, n_vocab):
                logits = tf.project_rows(h, allowed)
            else:
                logits = tf.project_rows(h)[allowed]
            yield from chunks(seq.push(seq.sample(logits, allowed)))

    def _reuse_cache(self, prompt_ids: list[int]) -> list[int]:
        """Keep the cached prefix shared with ``prompt_ids``; return the tokens still to feed."""
        cached = self._cached_ids[: self._cache.n]
        n = 0
        limit = min(len(cached), len(prompt_ids) - 1)  # feed at least one token for logits
        while n < limit and cached[n] == prompt_ids[n]:
            n += 1
        self._cache.truncate(n)
        self._cached_ids = cached[:n]
        if len(prompt_ids) > self._cache.n_ctx:
            raise ModelError(
                f"prompt of {len(prompt_ids)} tokens does not fit the context of {self._cache.n_ctx}"
            )
        return list(prompt_ids[n:])

    def __repr__(self) -> str:
        c = self.config
        return (f"Model({c.arch}, {c.n_layer} layers, n_embd={c.n_embd}, vocab={c.n_vocab}, "
                f"n_ctx={self.n_ctx})")


def _available_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
