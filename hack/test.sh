#!/usr/bin/env bash
# The whole test suite, as CI runs it. pytest's exit code is passed through untouched:
# a failure fails, and "no tests collected" (exit 5) fails too.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest tests -ra "$@"
