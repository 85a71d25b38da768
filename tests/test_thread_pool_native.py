"""The thread pool's C++ code (csrc/common/thread_pool.cc) driven by tests/native/
thread_pool_test.cc, compiled here three ways: optimised, with the protocol's hook points
(random stalls at every step, and scripted late workers), and under ThreadSanitizer with the
hooks. Each mode checks that every task runs exactly once, in its own job, never after run()
returned; see the .cc file for the modes. The protocol itself is model-checked in
tests/test_thread_pool_protocol.py."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "tests" / "native" / "thread_pool_test.cc",
           ROOT / "csrc" / "common" / "thread_pool.cc"]
CXX = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")

BUILDS = {
    "plain": ["-O2"],
    "hooks": ["-O2", "-DLEXGUIDE_POOL_HOOKS"],
    "tsan": ["-O1", "-g", "-fsanitize=thread", "-DLEXGUIDE_POOL_HOOKS"],
}
# (build, mode, rounds): a few seconds each on 2 busy cores
CASES = [
    ("plain", "stress", 20000), ("plain", "callers", 5000), ("plain", "errors", 2000),
    ("hooks", "delays", 3000), ("hooks", "late-join", 200), ("hooks", "late-leave", 200),
    ("tsan", "stress", 2000), ("tsan", "callers", 500), ("tsan", "errors", 300),
    ("tsan", "delays", 300), ("tsan", "late-join", 50), ("tsan", "late-leave", 50),
]

pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler")


@pytest.fixture(scope="module")
def binaries(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("thread_pool")
    built = {}
    for name, flags in BUILDS.items():
        exe = out / f"thread_pool_test_{name}"
        cmd = [CXX, "-std=c++17", "-Wall", "-Wextra", "-Werror", *flags,
               f"-I{ROOT / 'csrc'}", *map(str, SOURCES), "-o", str(exe), "-lpthread"]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stderr}"
        built[name] = exe
    return built


@pytest.mark.parametrize("build,mode,rounds", CASES, ids=[f"{b}-{m}" for b, m, _ in CASES])
def test_thread_pool(binaries, build, mode, rounds):
    env = dict(os.environ, TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1")
    res = subprocess.run([str(binaries[build]), mode, str(rounds)], capture_output=True,
                         text=True, timeout=600, env=env)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout}\n{res.stderr[-4000:]}"
    assert res.stdout.strip() == f"ok {mode}"


def test_an_unknown_mode_is_refused(binaries):
    res = subprocess.run([str(binaries["plain"]), "nonsense"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2 and "unknown mode" in res.stderr
