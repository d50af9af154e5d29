#!/usr/bin/env bash
# The whole test suite, as CI runs it. pytest's exit code is passed through untouched:
# a failure fails, and "no tests collected" (exit 5) fails too. The slowest tests are listed
# at the end, so a tier that grows shows up in the log.
set -euo pipefail
cd "$(dirname "$0")/.."
# Three workers: the Nova, Ironic and operator tiers each take one (tests/conftest.py groups
# them) and the unit tests fill the gaps. TEST_WORKERS=0 runs everything in this process.
.venv/bin/python -m pytest tests -ra --durations=12 -n "${TEST_WORKERS:-3}" --dist loadgroup "$@"
