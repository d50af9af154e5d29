#!/usr/bin/env bash
# The README's main job: a live walk-through of the operator on this machine, in < 3 minutes.
#   real Ironic (fake-hardware nodes, some with instances) + a Kubernetes API (the local
#   emulator, or the cluster in $KUBECONFIG) + the operator + a fake kubelet;
#   apply -> fail a member -> replacement -> scale, with a live table and what moved.
# Installs what it needs first (project venv, the Ironic service's venv); stops everything
# it started, also on Ctrl-C. Options: --nodes N, --with-instances N, --keep DIR (logs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/setup.sh
python3 hack/ironic/service.py install >/dev/null
exec .venv/bin/python hack/demo/demo.py "$@"
