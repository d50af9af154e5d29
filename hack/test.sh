#!/usr/bin/env bash
# The whole test suite, as CI runs it. pytest's exit code is passed through untouched:
# a failure fails, and "no tests collected" (exit 5) fails too. The slowest tests are listed
# at the end, so a tier that grows shows up in the log.
set -euo pipefail
cd "$(dirname "$0")/.."
# Three pytest-xdist workers share the tests (--dist load). The slow tiers mostly wait on
# Ironic's writes and Nova's timers, not on the CPU: a real-Nova test alone leaves 55% of the two
# cores idle, two workers still 43% on average, three 23%. On CI's two cores the tests took
# 918 and 1014 s on three workers against 1007-1189 s on two (2026-11-29, fresh clones; 23.7 min
# in one process). Each worker starts the session services its tests need (an Ironic, a Nova
# stack). While they share the machine, every wait's deadline is stretched by the number of
# workers (TEST_DEADLINE_SCALE, testbed/waiting.py): a deadline bounds a wait, it never
# lengthens a passing test. TEST_WORKERS=0 runs everything in this one process.
# Not --dist loadgroup: with pytest 9.2 it silently stops grouping (pytest-xdist#1386).
# --maxschedchunk 1: a worker is handed one test at a time as its queue runs low, so the long
# tests, collected first (tests/support/scheduling.py), spread over the workers instead of
# arriving in one block of contiguous tests on one of them.
workers=${TEST_WORKERS:-3}
export TEST_DEADLINE_SCALE=${TEST_DEADLINE_SCALE:-$([[ $workers == 0 ]] && echo 1 || echo "$workers")}
# Arguments name what to run (a tier: `bash hack/test.sh tests/nova`, after `make setup`); none:
# everything, with the project's venv and tools (hack/setup.sh, hack/tools.sh) and the peers
# (hack/peers.sh) installed side by side first, instead of one after the other inside the
# first tests that need them.
if [[ $# -eq 0 ]]; then
    # Its own process group (setsid), so that one kill stops it with the installers it started
    # (pip, helm's download), on a failed setup and on Ctrl-C alike.
    setsid bash hack/peers.sh &
    peers=$!
    trap 'kill -- -"$peers" 2>/dev/null || true' EXIT
    bash hack/setup.sh || exit 1
    bash hack/tools.sh || echo "hack/test.sh: hack/tools.sh failed; the tests that run helm or kubectl fail at setup" >&2
    wait "$peers"
    trap - EXIT
    set -- tests
fi
.venv/bin/python -m pytest -ra --durations=25 -n "$workers" --dist load --maxschedchunk 1 "$@"
