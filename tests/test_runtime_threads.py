"""The runtime under concurrency: thousands of short multi-row forwards through the kernels'
thread pool at 1, 2 and 3 threads (more threads than this machine's cores), each compared bit
for bit with the same forward on one thread, while other Python threads compile grammars and
fill masks on the engine's pool, generate with a second model, and create and drop models and
KV caches; torch (and its OpenMP runtime) imported first when it is installed.

Every product splits whole outputs between threads, so the thread count changes no bit of a
result; a task run twice, skipped, or run on a stale job shows as a difference here (or as a
crash). The pool's protocol itself is tested in tests/test_thread_pool_native.py.
"""
from __future__ import annotations

import importlib.util
import itertools
import threading
import time

import numpy as np
import pytest

from lexguide import Grammar, Matcher, TokenizerInfo, fill_masks
from lexguide.gguf import GGMLType
from test_runtime_tiny import V, build

N_FORWARDS = 3000      # forwards compared with their one-thread result
TIME_LIMIT_S = 240.0   # a bound on the whole test on a slow, busy machine


@pytest.fixture(scope="module")
def torch_loaded():
    """torch imported (its thread pools and OpenMP runtime in the process) when installed."""
    if importlib.util.find_spec("torch") is None:
        return False
    import torch  # noqa: F401

    torch.set_num_threads(2)
    torch.ones(64, 64) @ torch.ones(64, 64)  # start its threads
    return True


def _inputs(rng, n):
    """(prompt, feed) pairs: a cache position of 0..20 tokens, then 2..40 rows at once."""
    return [(rng.integers(0, V, int(rng.integers(0, 21))).tolist(),
             rng.integers(0, V, int(rng.integers(2, 41))).tolist()) for _ in range(n)]


def _forward(tf, prompt, feed):
    cache = tf.new_cache(64)
    if prompt:
        tf.forward(prompt, cache, logits="none")
    return tf.forward(feed, cache, logits="all")


class _Background:
    """Threads that keep the rest of the process busy until stopped; their first error is
    kept and raised by :meth:`stop`."""

    def __init__(self):
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []
        self.rounds: dict[str, int] = {}

    def start(self, name, step):
        def loop():
            try:
                while not self._stop.is_set():
                    step()
                    self.rounds[name] = self.rounds.get(name, 0) + 1
            except BaseException as e:  # noqa: BLE001 - reported by stop()
                self.errors.append(e)

        t = threading.Thread(target=loop, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join(60)
        if self.errors:
            raise self.errors[0]


_ENGINE_STEPS = itertools.count(1)


def _engine_step():
    """Compile a fresh schema and walk a few masks of it on the engine's pool."""
    k = next(_ENGINE_STEPS)
    vocab = [bytes([c]) for c in b'{}[]":,0123456789 abcdefgh'] + [b'"a', b'"b":', b"</s>"]
    info = TokenizerInfo.from_token_bytes(vocab, eos_ids=[len(vocab) - 1])
    schema = {"type": "object", "properties": {f"k{k % 7}": {"type": "integer"},
                                               "b": {"type": "array", "maxItems": 2 + k % 5}}}
    grammar = Grammar.from_json_schema(schema)
    batch = [Matcher(grammar, info) for _ in range(3)]
    masks = np.zeros((len(batch), info.n_words), dtype=np.uint32)
    for _ in range(4):
        fill_masks(batch, masks)
        for m, row in zip(batch, masks):
            allowed = [t for t in range(len(vocab)) if row[t >> 5] >> (t & 31) & 1]
            if m.is_stopped() or not allowed:
                break
            m.consume(allowed[k % len(allowed)])


def test_multi_row_forwards_equal_one_thread_under_concurrency(tmp_path, torch_loaded):
    start = time.monotonic()
    (tmp_path / "a").mkdir()
    tf, _ = build(tmp_path / "a", "llama", n_layer=2, quant=GGMLType.Q8_0)
    rng = np.random.default_rng(7)
    inputs = _inputs(rng, 60)
    tf.threads = 1
    expected = [_forward(tf, p, f) for p, f in inputs]

    other_dir = tmp_path / "b"
    other_dir.mkdir()
    other, _ = build(other_dir, "qwen2", n_layer=2, seed=3)
    other_expected = _forward(other, [1, 2, 3], list(range(30)))

    def other_model_step():
        # a second model generating on its own thread at its own thread count
        other.threads = 2
        assert np.array_equal(_forward(other, [1, 2, 3], list(range(30))), other_expected)

    churn = {"n": 0}

    def churn_step():
        # models and KV caches created and dropped in a loop
        churn["n"] += 1
        d = tmp_path / f"churn{churn['n'] % 3}"
        d.mkdir(exist_ok=True)
        m, _ = build(d, "llama", n_layer=1, seed=churn["n"] % 3)
        m.threads = 1 + churn["n"] % 3
        caches = [m.new_cache(48) for _ in range(3)]
        for c in caches:
            m.forward([1, 2, 3, 4], c, logits="none")
        m.forward_batch([([5], c) for c in caches])
        del m, caches

    bg = _Background()
    bg.start("engine", _engine_step)
    bg.start("other-model", other_model_step)
    bg.start("churn", churn_step)
    done = 0
    try:
        while done < N_FORWARDS and time.monotonic() - start < TIME_LIMIT_S:
            i = done % len(inputs)
            tf.threads = (1, 2, 3)[done % 3]
            got = _forward(tf, *inputs[i])
            assert np.array_equal(got, expected[i]), (
                f"forward {done} ({len(inputs[i][1])} rows at {tf.threads} threads) differs "
                f"from one thread by {float(np.abs(got - expected[i]).max())}")
            done += 1
    finally:
        bg.stop()
    # the loop was not cut short by the time bound before it proved much, and every
    # background thread got through its work while the forwards ran
    assert done >= 1000, done
    assert all(bg.rounds.get(name, 0) >= 1 for name in ("engine", "other-model", "churn")), \
        bg.rounds


def test_generation_from_several_python_threads_at_once(tmp_path):
    """Two Python threads generating with one model (each with its own caches) and a third
    changing the pool's size: every result equals the sequential one."""
    tf, _ = build(tmp_path, "llama", n_layer=2)
    tf.threads = 1
    rng = np.random.default_rng(11)
    inputs = _inputs(rng, 12)
    expected = [_forward(tf, p, f) for p, f in inputs]
    errors: list[BaseException] = []

    def worker(offset):
        try:
            for k in range(150):
                i = (k + offset) % len(inputs)
                got = _forward(tf, *inputs[i])
                assert np.array_equal(got, expected[i]), i
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def resizer():
        for k in range(150):
            tf.threads = 1 + k % 3
            time.sleep(0.001)

    threads = [threading.Thread(target=worker, args=(o,)) for o in (0, 5)]
    threads.append(threading.Thread(target=resizer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    if errors:
        raise errors[0]
