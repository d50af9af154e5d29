#!/usr/bin/env bash
# The README's main job: a live walk-through of the operator on this machine, in < 5 minutes.
#   real Ironic (fake-hardware nodes, some with instances) + a Kubernetes API (the local
#   emulator, or the cluster in $KUBECONFIG) + the operator + a kubelet;
#   apply -> fail a member -> replacement -> scale up -> (with Nova) a scale-down that hands
#   over the retiring member's nodes with instances, with a live table and what moved.
# With the real Nova stack (hack/nova/install.sh: MariaDB and RabbitMQ reachable, or installed)
# every member is a real nova-compute and each step prints Nova's hypervisor list per member
# beside Ironic's shards; if Nova cannot be installed here, the demo says why and runs without.
# Installs what it needs first (project venv, the Ironic service's venv); stops everything
# it started, also on Ctrl-C. Options: --nodes N, --with-instances N, --keep DIR (logs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/setup.sh
python3 hack/ironic/service.py install >/dev/null
if nova_log=$(bash hack/nova/install.sh 2>&1); then
    exec .venv/bin/python hack/demo/demo.py "$@"
fi
reason="hack/nova/install.sh could not provide Nova, MariaDB and RabbitMQ here: $(printf '%s\n' "$nova_log" | tail -n 1)"
exec .venv/bin/python hack/demo/demo.py --without-nova "$reason" "$@"
