#!/usr/bin/env bash
# Installs a real OCI registry for the tests that need one (testbed/registry.py: preflight's
# image check, the chart pushed as an OCI artefact): Debian's package docker-registry (the CNCF
# distribution registry, 2.8.x), unpacked into the git-ignored .tools/docker-registry by
# hack/deb-tool.sh (nothing installed on the system). Prints the binary's path; exit 3, with
# the reason on stderr, where it cannot install here: the tests then skip, saying why.
set -euo pipefail
exec bash "$(dirname "$0")/deb-tool.sh" docker-registry docker-registry --version
