#!/usr/bin/env bash
# Writes requirements/image.lock: every Python package the operator image installs, pinned
# with the sha256 of each of its files on PyPI, resolved from pyproject.toml's runtime
# dependencies (pip-compile). The Dockerfile installs it with --require-hashes; `make release`
# downloads it into dist/wheelhouse. Run it (`make lock`) after changing a dependency in
# pyproject.toml, or to take newer versions within its ranges; commit the result.
#
# It resolves with Python 3.11, the image's Python (environment markers and wheels differ by
# version): with another python3 it stops and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/setup.sh
python=.venv/bin/python
wanted=3.11
have=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [[ $have != "$wanted" ]]; then
    echo "hack/lock.sh: the image runs Python $wanted, this venv has $have: resolve with Python $wanted" \
         "(the lock's markers and wheels depend on it)" >&2
    exit 1
fi
mkdir -p requirements
CUSTOM_COMPILE_COMMAND="make lock" "$python" -m piptools compile --quiet --generate-hashes --strip-extras --allow-unsafe \
    --no-emit-index-url --no-emit-find-links --upgrade \
    --output-file requirements/image.lock pyproject.toml
echo "hack/lock.sh: wrote requirements/image.lock ($(grep -c '^[a-z]' requirements/image.lock) packages)"
