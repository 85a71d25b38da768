"""The measured figures the docs point to: ``bench/results/<name>.md``, written by the benches.

Each bench command that prints a table hands the same text to :func:`write`, which stores it
with what makes a figure readable later: the date (UTC), the machine (CPU model and core
count), the load average when the bench started and when it ended (the machine may be shared),
and the exact command. A file holds the latest run of its command and is replaced by the next.

``<name>`` is the script's name, with a suffix for a mode that measures something else
(``mask.py --budget`` writes ``mask_budget.md``), so every results file is named after the
bench that writes it.

Smoke runs are not measurements: with ``--quick`` nothing is written unless ``--results PATH``
asks for it (then the file says it was a quick run). ``--results PATH`` writes elsewhere,
``--results none`` nowhere.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
_LOAD_START = os.getloadavg()  # the benches import this module before they start measuring


def add_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--results PATH`` (default: ``bench/results/<name>.md``, none with ``--quick``)."""
    parser.add_argument("--results", default=None, metavar="PATH",
                        help="markdown results file (default: bench/results/<name>.md for a full "
                             "run, none for --quick; 'none': do not write)")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``, else what ``platform`` knows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _command(argv: list[str] | None) -> str:
    script = Path(sys.argv[0]).resolve()
    try:
        shown = str(script.relative_to(RESULTS.parent.parent))
    except ValueError:
        shown = str(script)
    args = sys.argv[1:] if argv is None else argv
    return " ".join(shlex.quote(a) for a in ["python", shown, *args])


def _load(load: tuple[float, float, float]) -> str:
    return " / ".join(f"{x:.2f}" for x in load)


def write(script: str, table: str, *, quick: bool, results: str | None,
          variant: str | None = None, argv: list[str] | None = None,
          preformatted: bool = False) -> Path | None:
    """Write ``table`` under a header (date, machine, load, command); return the path or None.

    ``script`` is the bench's ``__file__``; ``results`` its ``--results`` value; ``argv`` the
    arguments when ``main(argv)`` was called with them (default ``sys.argv[1:]``);
    ``preformatted`` fences a fixed-width table. Mutates only the results file (created with
    its folder, or replaced).
    """
    if results == "none" or (quick and results is None):
        return None
    stem = Path(script).stem
    name = f"{stem}_{variant}" if variant else stem
    path = Path(results) if results else RESULTS / f"{name}.md"
    lines = [
        f"# `bench/{stem}.py`" + (f" ({variant})" if variant else ""),
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- machine: {cpu_model()}, {os.cpu_count()} cores, {platform.system()} "
        f"{platform.machine()}, Python {platform.python_version()}",
        f"- load average (1/5/15 min): {_load(_LOAD_START)} at the start, "
        f"{_load(os.getloadavg())} at the end",
        f"- command: `{_command(argv)}`",
    ]
    if quick:
        lines.append("- a --quick run: a smoke test, not a measurement")
    body = table.strip("\n")
    if preformatted:
        body = f"```text\n{body}\n```"
    text = "\n".join(lines) + "\n\n" + body + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"[bench] results: {path}", flush=True)
    return path


class Report:
    """Lines printed as they come and kept for :func:`write` (the tables and their notes)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def print(self, *parts: object) -> None:
        """Print ``parts`` joined by spaces (as ``print``) and keep the line."""
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.lines.append(line)

    def text(self) -> str:
        return "\n".join(self.lines)
