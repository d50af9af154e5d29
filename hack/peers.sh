#!/usr/bin/env bash
# Installs the real peers the test tiers start, side by side: Ironic's venv with Keystone in it,
# the Nova stack's venv (with MariaDB/RabbitMQ where they are missing), and the Kubernetes control
# plane's binaries (built from Go modules once per machine: ~25 min cold on 2 cores). Neither needs the
# project's venv, so hack/test.sh runs this beside hack/setup.sh.
# Each installer is idempotent and locked, and the tests' fixtures still call it (a few seconds
# once everything is in place). Left to those fixtures on a fresh clone, the installers ran one
# after the other inside pytest's first tests, with both xdist workers waiting for their sum
# (~205 s on CI, helm and kubectl included).
# An installer that fails is reported with its output and the run goes on: the tests that need
# that peer fail at their setup, saying why, and every other test still runs.
# Usage: bash hack/peers.sh
set -uo pipefail
cd "$(dirname "$0")/.."
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
names=(ironic-keystone nova kubernetes)
commands=(
    'python3 -c "from testbed import keystone_starter; keystone_starter.install()"'  # stdlib only
    'bash hack/nova/install.sh'
    'bash hack/kube/build.sh'  # the control plane; a no-op once built on this machine
)
pids=()
started=$SECONDS
for i in "${!names[@]}"; do
    bash -c "${commands[$i]}" >"$logs/${names[$i]}.log" 2>&1 &
    pids+=($!)
done
for i in "${!names[@]}"; do
    if wait "${pids[$i]}"; then
        echo "hack/peers.sh: ${names[$i]} in place ($((SECONDS - started)) s)"
    else
        rc=$?
        echo "hack/peers.sh: installing ${names[$i]} failed (exit $rc); the tests that need it fail at setup:" >&2
        tail -n 40 "$logs/${names[$i]}.log" >&2
    fi
done
exit 0  # a failed install was reported above; its tests fail at their setup, saying why
