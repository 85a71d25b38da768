"""The decode loop: one thread, up to ``parallel`` sequences decoded together, new ones joining
between steps.

A request (:class:`Job`) has ``n`` sequences (choices). The scheduler thread owns the model:
it prepares jobs (chat template, tokenization, matchers; the grammar comes compiled with the
job — the web side compiles it on a worker thread, see ``GrammarCompiler`` — or is compiled
here for a job without it), gives each
sequence a slot (a preallocated KV cache) and runs steps. One step over the active sequences:

1. masks of every constrained sequence about to sample — :func:`fill_masks`, one call for the
   batch;
2. the forward of every sequence's pending tokens — :func:`forward_last`: the decoding
   sequences (a sampled token, plus any tokens the grammar forced) in **one batched forward**
   (``Transformer.forward_batch``: every weight read once for all of them, each sequence at
   its own position in its own cache); a newly admitted sequence evaluates its prompt in the
   same step, at most :data:`PREFILL_STEP` tokens of it, on its own, and samples nothing until
   the prompt is done;
3. logits: one output projection for every sequence that needs all of them (unconstrained, or
   a mask allowing many tokens), the allowed rows only for the others; then per sequence the
   step ``Model.generate`` runs too (:class:`lexguide.runtime.step.Decoding`): sample,
   ``consume``, append forced tokens, detect EOS / grammar completion / stop strings /
   ``max_tokens``; text deltas (with log probabilities when asked for) and the finish are
   posted to the job's ``post`` callback (the web side turns them into asyncio queue items).

Each sequence keeps its own matcher, sampler and slot; a row's logits do not depend on the
other sequences of the batch (the batched forward is exact), so a greedy answer is the same
alone or among others. Everything touching the model, tokenizer, grammars and matchers runs
on this one thread: ``Transformer`` is not thread-safe (its RoPE tables and thread setting
are shared) and the engine's lexer tables are process-wide. A cancelled job (client gone)
drops its sequences at the next step boundary, freeing their slots.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from lexguide.errors import LexguideError, MatcherError
from lexguide.runtime.model import FUSED_MAX_ROWS
from lexguide.runtime.reasoning import ThinkBudget, check_budget
from lexguide.runtime.sampler import Sampler, SamplerConfig
from lexguide.runtime.step import Decoding, Piece, StopText, sparse
from lexguide.server.constraints import GrammarCache, render_tool_messages
from lexguide.server.logprobs import TokenLogprob, TokenNames
from lexguide.server.protocol import ChoiceResult, GenerationRequest, RequestError

__all__ = ["Job", "Metrics", "Scheduler", "fill_masks", "forward_last"]

log = logging.getLogger("lexguide.server")

MAX_WAITING = 256  # sequences waiting for a slot before new requests get HTTP 503
PREFILL_STEP = 256  # prompt tokens a sequence evaluates per step: a long prompt is split over
#                     steps so the other sequences keep getting a token per step meanwhile


# -- the two batch adapters -------------------------------------------------------------------


def forward_last(model: Any, batch: Sequence[tuple[list[int], Any]]) -> npt.NDArray[np.float32]:
    """Final hidden states (len(batch), n_embd) of the last pending token of each
    ``(tokens, cache)``; the tokens are appended to their cache (mutates the caches).

    Inputs of at most ``FUSED_MAX_ROWS`` tokens (decode steps) run in one batched forward over
    ``decode_threads``; longer ones (prompt chunks) one by one over ``n_threads``.
    """
    tf = model.transformer
    out = np.empty((len(batch), model.config.n_embd), dtype=np.float32)
    short = [i for i, (tokens, _) in enumerate(batch) if len(tokens) <= FUSED_MAX_ROWS]
    if short:
        tf.threads = model.decode_threads
        out[short] = tf.forward_batch([batch[i] for i in short])
    for i, (tokens, cache) in enumerate(batch):
        if len(tokens) > FUSED_MAX_ROWS:
            tf.threads = model.n_threads
            out[i] = tf.hidden_last(tokens, cache)
    return out


def fill_masks(matchers: Sequence[Any], n_words: int,
               remaining: Sequence[int] | None = None) -> npt.NDArray[np.uint32]:
    """The masks of ``matchers`` as rows of one (N, n_words) uint32 bitmask; ``remaining[i]``
    is the tokens sequence ``i`` may still generate (masks keep the output completable).

    Uses the engine's ``fill_masks(matchers, out)`` when it has one (one call for the batch),
    else one ``compute_mask`` per matcher.
    """
    out = np.zeros((len(matchers), n_words), dtype=np.uint32)
    from lexguide import engine

    batch = getattr(engine, "fill_masks", None)
    if batch is not None:
        batch(list(matchers), out, remaining=remaining)
        return out
    for i, m in enumerate(matchers):
        out[i] = m.compute_mask(None if remaining is None else remaining[i])
    return out


# -- jobs, sequences, slots -------------------------------------------------------------------


@dataclass(slots=True)
class Metrics:
    """Counters exposed at ``/metrics`` (written by the scheduler thread, read by the app)."""

    prompt_tokens: int = 0
    prompt_tokens_cached: int = 0  # prompt positions taken from a KV cache, not evaluated
    completion_tokens: int = 0
    forced_tokens: int = 0
    steps: int = 0
    batched_forwards: int = 0  # steps whose decode forward had at least one sequence
    batched_sequences: int = 0  # sequences over those forwards (mean batch = this / that)
    batch_max: int = 0  # most sequences decoded in one forward
    forward_s: float = 0.0
    mask_s: float = 0.0
    sample_s: float = 0.0
    sequences_finished: int = 0
    sequences_cancelled: int = 0


@dataclass(eq=False)
class Job:
    """One request: ``post(event)`` is called from the scheduler thread with
    ``("admitted", prompt_tokens)``, ``("delta", index, text, logprobs)`` (the
    :class:`TokenLogprob` entries of the tokens not posted before, empty unless asked for),
    ``("finish", ChoiceResult)`` or ``("error", exception)``; set ``cancelled`` to drop it.
    ``grammar`` is the request's compiled grammar when the caller compiled it (the web side
    does, off this thread); else the scheduler compiles it when preparing the job."""

    req: GenerationRequest
    post: Callable[[tuple[Any, ...]], object]
    grammar: Any = None
    cancelled: bool = False
    prompt_ids: list[int] = field(default_factory=list)
    n_open: int = 0


_Text = StopText  # its old name


class _Slot:
    """A preallocated KV cache and the token ids it holds (for prefix reuse)."""

    __slots__ = ("cache", "ids")

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.ids: list[int] = []

    def shared(self, prompt_ids: list[int]) -> int:
        """How many leading positions this slot holds of ``prompt_ids`` (at most all but the
        last token: one is always fed, for its logits)."""
        n = 0
        limit = min(len(self.ids), len(prompt_ids) - 1)
        while n < limit and self.ids[n] == prompt_ids[n]:
            n += 1
        return n

    def take(self, prompt_ids: list[int], donor: _Slot | None, n_donor: int) -> list[int]:
        """Hold the longest cached prefix of ``prompt_ids`` — its own, or the first
        ``n_donor`` positions of ``donor``'s cache copied over (mutates this slot; the copy is
        n_layer × 2 slabs of n_donor × n_head_kv × head_dim floats, far cheaper than
        evaluating those tokens). Returns the tokens still to feed."""
        n = self.shared(prompt_ids)
        self.cache.truncate(n)
        del self.ids[n:]
        if donor is not None and n_donor > n:
            self.cache.k[:, :, n:n_donor] = donor.cache.k[:, :, n:n_donor]
            self.cache.v[:, :, n:n_donor] = donor.cache.v[:, :, n:n_donor]
            self.cache.n = n_donor
            self.ids.extend(prompt_ids[n:n_donor])
            n = n_donor
        return list(prompt_ids[n:])


@dataclass(eq=False)
class _Sequence:
    job: Job
    index: int
    dec: Decoding  # matcher, sampler, history, budgets, stop strings: the shared step
    slot: _Slot | None = None
    pending: list[int] = field(default_factory=list)
    top: int | None = None  # alternatives listed per token; None: no log probabilities
    logprobs: list[TokenLogprob] = field(default_factory=list)
    n_posted: int = 0  # logprobs entries already posted with a delta

    @property
    def matcher(self) -> Any:
        return self.dec.matcher


def _slot(s: _Sequence) -> _Slot:
    """The slot of an active sequence (every active sequence has one)."""
    return cast(_Slot, s.slot)


# -- the scheduler ----------------------------------------------------------------------------


class Scheduler:
    """Owns the model on one thread; see the module docstring.

    ``submit`` is thread-safe and returns at once; results arrive through the job's ``post``.
    """

    def __init__(self, model: Any, *, parallel: int = 4, n_ctx: int | None = None,
                 grammars: GrammarCache | None = None, max_waiting: int = MAX_WAITING) -> None:
        self.model = model
        self.parallel = max(1, int(parallel))
        self.n_ctx = int(n_ctx or model.n_ctx)
        self.grammars = grammars or GrammarCache()
        self.max_waiting = max_waiting
        self.metrics = Metrics()
        n_vocab = model.config.n_vocab
        self._n_vocab = n_vocab
        self._n_words = (n_vocab + 31) // 32
        self._token_bytes = tuple(model.tokenizer.all_token_bytes())
        self._names = TokenNames(self._token_bytes, lambda t: model.tokenizer.token_text(t))
        self._eog = np.zeros(n_vocab, dtype=bool)
        self._eog[[t for t in model.tokenizer.eog_ids if t < n_vocab]] = True
        self._slots = [_Slot(model.transformer.new_cache(self.n_ctx)) for _ in range(self.parallel)]
        self._free = list(self._slots)
        self._inbox: deque[Job] = deque()
        self._waiting: deque[_Sequence] = deque()
        self._active: list[_Sequence] = []
        self._wake = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    # -- public face (any thread) ----------------------------------------------------------
    @property
    def queue_depth(self) -> int:
        """Requests not yet prepared plus sequences waiting for a slot."""
        return len(self._inbox) + len(self._waiting)

    @property
    def n_active(self) -> int:
        return len(self._active)

    def submit(self, job: Job) -> None:
        """Queue a job (thread-safe). Raises :class:`RequestError` (503) when the queue is full."""
        if self.queue_depth + job.req.n > self.max_waiting:
            raise RequestError(f"server busy: {self.queue_depth} requests queued", status=503,
                               type="server_error", code="server_busy")
        with self._wake:
            self._inbox.append(job)
            self._wake.notify()

    def wake(self) -> None:
        """Make the loop look at cancellations now (thread-safe)."""
        with self._wake:
            self._wake.notify()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lexguide-scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the loop (scheduler thread) -------------------------------------------------------
    def _run(self) -> None:
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

        # BLAS threads busy-wait and lose on decode shapes (docs/runtime.md); the runtime
        # splits the big projections itself.
        with threadpool_limits(1, user_api="blas"):
            while True:
                with self._wake:
                    while not (self._stopping or self._inbox or self._active or self._waiting):
                        self._wake.wait()
                    if self._stopping:
                        return
                    inbox = list(self._inbox)
                    self._inbox.clear()
                for job in inbox:
                    self._guarded(job, self._prepare, job)
                try:
                    self._drop_cancelled()
                    self._admit()
                    if self._active:
                        self._step()
                except Exception as e:  # noqa: BLE001 - never let the loop die: fail what ran
                    log.error("scheduler step failed: %s: %s", type(e).__name__, e)
                    for s in list(self._active):
                        self._fail(s.job, e)

    def _guarded(self, job: Job, fn: Callable[..., Any], *args: Any) -> bool:
        """Run ``fn``; a failure ends ``job`` with an error event (no traceback for bad input)."""
        try:
            fn(*args)
            return True
        except LexguideError as e:
            self._fail(job, e)
        except Exception as e:  # noqa: BLE001 - a bug: one log line, keep serving the others
            log.error("internal error in request: %s: %s", type(e).__name__, e)
            self._fail(job, e)
        return False

    def _fail(self, job: Job, exc: BaseException) -> None:
        if not job.cancelled:
            job.post(("error", exc))
        job.cancelled = True
        job.n_open = 0
        for seqs in (self._waiting, self._active):
            for s in [s for s in seqs if s.job is job]:
                self._release(s)
                seqs.remove(s)

    def _prepare(self, job: Job) -> None:
        """Prompt ids, limits, grammar and one sequence per choice (scheduler thread)."""
        req = job.req
        model = self.model
        if req.endpoint == "chat":
            if req.chat_text is not None:  # rendered by the web side (plan_chat)
                ids = model.encode_chat(req.chat_text)
            else:
                ids = model.chat_prompt_ids(render_tool_messages(req))
            where = "messages"
        elif isinstance(req.prompt, str):
            ids = model.tokenizer.encode(req.prompt)
            where = "prompt"
        else:
            ids = list(req.prompt or [])
            where = "prompt"
            bad = [t for t in ids if not 0 <= t < self._n_vocab]
            if bad:
                raise RequestError(f"token id {bad[0]} is out of range [0, {self._n_vocab})",
                                   param="prompt", code="invalid_value")
        if not ids:
            bos = model.tokenizer.bos_id
            if bos is None:
                raise RequestError("is empty", param="prompt", code="invalid_value")
            ids = [bos]
        if len(ids) >= self.n_ctx:
            raise RequestError(
                f"the prompt has {len(ids)} tokens; the context holds {self.n_ctx} "
                "(prompt plus completion)", param=where, code="context_length_exceeded")
        room = self.n_ctx - len(ids)
        max_tokens = room if req.max_tokens is None else req.max_tokens
        if max_tokens > room:
            raise RequestError(
                f"max_tokens is {max_tokens} but the context of {self.n_ctx} tokens leaves "
                f"{room} after the {len(ids)}-token prompt", param="max_tokens",
                code="context_length_exceeded")
        grammar = job.grammar
        if grammar is None and req.constraint is not None:
            grammar = self.grammars.get(req.constraint, req)
        job.prompt_ids = ids
        job.post(("admitted", len(ids)))
        self.metrics.prompt_tokens += len(ids)
        from lexguide.engine import Matcher

        budget = check_budget(req.reasoning_budget)
        end_ids: list[int] = []
        if req.think is not None and budget is not None:
            end_ids = model.tokenizer.encode(req.think[0].end, add_special=False,
                                             parse_special=True)
        for i in range(req.n):
            cfg = SamplerConfig(
                temperature=req.temperature, top_k=req.top_k, top_p=req.top_p, min_p=req.min_p,
                repeat_penalty=req.repeat_penalty, frequency_penalty=req.frequency_penalty,
                presence_penalty=req.presence_penalty,
                seed=None if req.seed is None else (req.seed + i) % 2**64,
            )
            matcher = Matcher(grammar, model.tokenizer_info) if grammar is not None else None
            think = None
            if end_ids and matcher is not None:
                think = ThinkBudget(req.think[0], req.think[1], budget, end_ids)
            dec = Decoding(matcher, Sampler(cfg), ids, max_tokens, self._token_bytes, self._eog,
                           stops=req.stop, think=think)
            self._waiting.append(_Sequence(job, i, dec, top=req.logprobs))
            job.n_open += 1

    def _drop_cancelled(self) -> None:
        for seqs in (self._waiting, self._active):
            gone = [s for s in seqs if s.job.cancelled]
            for s in gone:
                self._release(s)
                seqs.remove(s)
                self.metrics.sequences_cancelled += 1

    def _release(self, seq: _Sequence) -> None:
        if seq.slot is not None:
            self._free.append(seq.slot)
            seq.slot = None

    def _admit(self) -> None:
        """Give waiting sequences free slots: the free slot that already holds the longest
        prefix of the prompt, topped up with a longer prefix copied from any slot (a shared
        system prompt or chat template is evaluated once, not once per request)."""
        while self._free and self._waiting:
            seq = self._waiting.popleft()
            prompt = seq.job.prompt_ids
            slot = max(self._free, key=lambda sl: sl.shared(prompt))
            self._free.remove(slot)
            donor = max(self._slots, key=lambda sl: sl.shared(prompt) if sl is not slot else -1)
            n_donor = donor.shared(prompt) if donor is not slot else 0
            seq.slot = slot
            seq.pending = slot.take(prompt, donor, n_donor)
            self.metrics.prompt_tokens_cached += len(prompt) - len(seq.pending)
            self._active.append(seq)
            self._guarded(seq.job, self._start, seq)

    def _step(self) -> None:
        m = self.metrics
        for s in list(self._active):  # the context is full: nothing more fits
            if _slot(s).cache.n + len(s.pending) > self.n_ctx:
                self._finish(s, s.dec.end("length"))
        active = list(self._active)
        if not active:
            return
        feeds = [s.pending[:PREFILL_STEP] for s in active]
        sampling = {id(s) for s, f in zip(active, feeds) if len(f) == len(s.pending)}
        t0 = time.perf_counter()
        constrained = [s for s in active if s.matcher is not None and id(s) in sampling]
        masks = None
        try:
            left = [s.dec.left(self.n_ctx - _slot(s).cache.n - len(s.pending)) for s in constrained]
            masks = fill_masks([s.matcher for s in constrained], self._n_words, left)
        except LexguideError:  # find whose grammar failed, one by one
            for s in constrained:
                self._guarded(s.job, s.matcher.compute_mask)
            return
        t1 = time.perf_counter()
        batch = [(f, _slot(s).cache) for s, f in zip(active, feeds)]
        hidden = forward_last(self.model, batch)
        n_decoding = sum(1 for f in feeds if len(f) <= FUSED_MAX_ROWS)
        if n_decoding:
            m.batched_forwards += 1
            m.batched_sequences += n_decoding
            m.batch_max = max(m.batch_max, n_decoding)
        t2 = time.perf_counter()
        for s, f in zip(active, feeds):
            _slot(s).ids.extend(f)
            del s.pending[:len(f)]
        rows = {id(s): masks[i] for i, s in enumerate(constrained)}
        ready = [(s, hidden[i]) for i, s in enumerate(active) if id(s) in sampling]
        for s, logits, allowed in self._logits(ready, rows):
            if s in self._active:
                self._guarded(s.job, self._sample, s, logits, allowed)
        t3 = time.perf_counter()
        m.steps += 1
        m.mask_s += t1 - t0
        m.forward_s += t2 - t1
        m.sample_s += t3 - t2

    def _logits(self, ready: list[tuple[_Sequence, npt.NDArray[np.float32]]],
                masks: dict[int, Any]) -> list[tuple[_Sequence, Any, Any]]:
        """(sequence, logits, allowed ids or None) of the sequences about to sample: the
        allowed rows of the output matrix when a mask allows few tokens, else all rows, in one
        product for all such sequences. A grammar that allows nothing fails its job."""
        tf = self.model.transformer
        out: list[tuple[_Sequence, Any, Any]] = []
        full: list[tuple[_Sequence, npt.NDArray[np.float32], Any]] = []
        for s, h in ready:
            mask = masks.get(id(s))
            allowed = None
            if mask is not None:
                try:
                    allowed = s.dec.allowed(mask, self._n_vocab)
                except MatcherError as e:
                    self._fail(s.job, e)
                    continue
                if sparse(allowed, self._n_vocab):
                    out.append((s, tf.project_rows(h, allowed), allowed))
                    continue
            full.append((s, h, allowed))
        if full:
            logits = tf.project(np.stack([h for _, h, _ in full]))
            for (s, _, allowed), row in zip(full, logits):
                out.append((s, row if allowed is None else row[allowed], allowed))
        return out

    def _sample(self, s: _Sequence, logits: npt.NDArray[np.float32], allowed: Any) -> None:
        token = s.dec.sample(logits, allowed)
        self._show(s, s.dec.push(token), (logits, allowed))

    def _start(self, s: _Sequence) -> None:
        """The checks and forced tokens before the sequence's first sample."""
        self._show(s, s.dec.start())

    def _show(self, s: _Sequence, pieces: list[Piece],
              sampled: tuple[npt.NDArray[np.float32], Any] | None = None) -> None:
        """Queue the pieces' tokens for the next forward, account them and post their text
        (with their log probabilities when asked for) and the finish."""
        for p in pieces:
            s.pending += p.tokens
            self.metrics.completion_tokens += len(p.tokens)
            if p.forced:
                self.metrics.forced_tokens += len(p.tokens)
            if s.top is not None and p.tokens:
                if p.forced or sampled is None:
                    s.logprobs += [self._names.forced(t, s.top) for t in p.tokens]
                else:
                    s.logprobs.append(self._names.sampled(*sampled, p.tokens[0], s.top))
            if p.finish is not None:
                self._finish(s, p)
                return
            if p.text:
                self._post_delta(s, p.text)

    def _finish(self, s: _Sequence, last: Piece) -> None:
        """Post the last piece's text and the finish; free the slot."""
        if last.text:
            self._post_delta(s, last.text)
        accepted = None if s.matcher is None else bool(s.matcher.is_accepting())
        self._release(s)
        if s in self._active:
            self._active.remove(s)
        s.job.n_open -= 1
        self.metrics.sequences_finished += 1
        s.job.post(("finish", ChoiceResult(s.index, s.dec.text.text, s.dec.n_gen,
                                           cast(str, last.finish), accepted,
                                           None if s.top is None else s.logprobs)))

    def _post_delta(self, s: _Sequence, text: str) -> None:
        """Post new text with the log probabilities of the tokens not posted yet (text held
        back for a stop string or a split character carries its tokens' entries later)."""
        entries = s.logprobs[s.n_posted:]
        s.n_posted = len(s.logprobs)
        s.job.post(("delta", s.index, text, entries))
