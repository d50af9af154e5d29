#!/usr/bin/env bash
# Creates the project's virtualenv with the package, its test dependencies and the release tools.
# Idempotent: a second run only re-checks. Peers (Ironic, Nova) live in their own venvs
# under .tools/, installed by their own hack/ scripts when a test or the demo needs them.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv/.installed
if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
fi
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e '.[test,release]'
    touch "$stamp"
fi
