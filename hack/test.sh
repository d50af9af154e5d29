#!/usr/bin/env bash
# The whole test suite, as CI runs it. pytest's exit code is passed through untouched:
# a failure fails, and "no tests collected" (exit 5) fails too. The slowest tests are listed
# at the end, so a tier that grows shows up in the log.
set -euo pipefail
cd "$(dirname "$0")/.."
# Two workers: the Nova tier on one, the integration tier on the other (tests/conftest.py
# groups them), unit tests wherever there is room. Sharing the machine, waits get twice their
# usual deadline (TEST_DEADLINE_SCALE, tests/support/kube_api.py). TEST_WORKERS=0 runs
# everything in this one process.
workers=${TEST_WORKERS:-2}
export TEST_DEADLINE_SCALE=${TEST_DEADLINE_SCALE:-$([[ $workers == 0 ]] && echo 1 || echo 2)}
.venv/bin/python -m pytest tests -ra --durations=12 -n "$workers" --dist loadgroup "$@"
