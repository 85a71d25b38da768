"""The collector stays paused for a whole ``from_*`` call, its memo lookup included, so a
collection the caller's allocations made due runs after the call instead of inside it."""

from __future__ import annotations

import gc
import marshal

import lexguide.engine.grammar as grammar_module
from lexguide import Grammar


class _RecordingMarshal:
    """``marshal`` whose ``dumps`` (the memo key) records whether the collector is on."""

    def __init__(self) -> None:
        self.enabled: list[bool] = []

    def dumps(self, value, version):
        self.enabled.append(gc.isenabled())
        return marshal.dumps(value, version)


def test_memo_lookup_runs_with_the_collector_paused(monkeypatch):
    recorder = _RecordingMarshal()
    monkeypatch.setattr(grammar_module, "marshal", recorder)
    schema = {"type": "object", "properties": {"gc_pause_probe": {"type": "string"}}}
    assert gc.isenabled()
    Grammar.from_json_schema(schema)  # a compile
    Grammar.from_json_schema(schema)  # a memo hit
    assert recorder.enabled == [False, False]
    assert gc.isenabled()
