#!/usr/bin/env bash
# The kind end-to-end test: the operator as a user installs it, against the real Ironic.
#
#   bash hack/kind-e2e.sh            (or: pytest tests/e2e, which runs this script)
#
# 1. a throw-away kind cluster (own kubeconfig; your ~/.kube/config is not touched);
# 2. the operator image built from the Dockerfile and loaded into kind;
# 3. the real Ironic service (hack/ironic/service.py, http_basic auth) on this host, bound
#    to the kind network's gateway address so the cluster's pods reach it;
# 4. tests/e2e/kind_scenario.py: helm install, kubectl apply of examples/, and the
#    assertions (pods Ready, every node owned by a ready member, a deleted member comes back
#    with the same name and unchanged nodes, leader failover, kubectl scale, helm uninstall);
# 5. teardown, always (trap): diagnostics into .run/kind-e2e/ on failure, then the cluster,
#    Ironic and the temporary files are removed.
#
# Exit codes: 0 passed; 1 failed; 77 cannot run here (no Docker engine, no kind binary),
# with the one-line reason as the last line on stderr. Never a pass without the run.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly SKIP=77
skip() { echo "kind-e2e: cannot run: $*" >&2; exit "$SKIP"; }
fail() { echo "kind-e2e: FAILED: $*" >&2; exit 1; }
step() { echo "kind-e2e: $*"; }

# ---- can it run here? (cheap checks first, nothing created yet) -------------------------
kind=${KIND:-kind}
command -v docker >/dev/null 2>&1 || skip "no docker CLI on PATH (kind needs a Docker engine)"
if ! docker_error=$(timeout 20 docker info --format '{{.ServerVersion}}' 2>&1 >/dev/null); then
    skip "no Docker engine reachable: $(echo "$docker_error" | grep -m1 -v '^$' || echo 'docker info failed')"
fi
command -v "$kind" >/dev/null 2>&1 || skip "no kind binary ('$kind' not on PATH; set KIND=/path/to/kind)"

bash hack/setup.sh
bash hack/tools.sh
export PATH="$PWD/.tools/bin:$PATH"   # the helm 4 and kubectl of hack/tools.sh

# ---- everything below is torn down by cleanup() -------------------------------------------
run_id=$$
cluster=iso-e2e-$run_id
image=ironic-shard-operator:e2e-$run_id
work=$(mktemp -d)
export KUBECONFIG=$work/kubeconfig
ironic_state=$work/ironic
diagnostics=.run/kind-e2e
cluster_created=false

cleanup() {
    local status=$?
    set +e
    if [[ $status -ne 0 && $cluster_created == true ]]; then
        mkdir -p "$diagnostics"
        step "collecting diagnostics into $diagnostics/"
        kubectl get all,ics,events,leases -A -o wide >"$diagnostics/objects.txt" 2>&1
        kubectl describe ics -A >"$diagnostics/pools.txt" 2>&1
        kubectl logs -n iso-system -l app.kubernetes.io/name=ironic-shard-operator \
            --all-containers --prefix --tail=-1 >"$diagnostics/operator.log" 2>&1
        kubectl logs -n e2e -l ironicshards.io/pool --prefix --tail=200 >"$diagnostics/members.log" 2>&1
        cp "$ironic_state/ironic.log" "$diagnostics/ironic.log" 2>/dev/null
    fi
    if [[ $cluster_created == true ]]; then
        step "deleting kind cluster $cluster"
        "$kind" delete cluster --name "$cluster" >/dev/null 2>&1 || echo "kind-e2e: could not delete cluster $cluster" >&2
    fi
    [[ -d $ironic_state ]] && python3 hack/ironic/service.py stop "$ironic_state"
    docker image rm "$image" >/dev/null 2>&1
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step "creating kind cluster $cluster"
cluster_created=true
"$kind" create cluster --name "$cluster" --kubeconfig "$KUBECONFIG" --wait 180s

step "building $image"
docker build --quiet -t "$image" . >/dev/null
"$kind" load docker-image "$image" --name "$cluster"

# The kind nodes reach this host at the gateway of the docker network `kind`.
gateway=$(docker network inspect kind \
    --format '{{range .IPAM.Config}}{{.Gateway}}{{"\n"}}{{end}}' | grep -m1 -E '^[0-9]+(\.[0-9]+){3}$') ||
    fail "docker network 'kind' has no IPv4 gateway"
step "starting Ironic on $gateway (reachable from the cluster)"
eval "$(python3 hack/ironic/service.py start "$ironic_state" --auth http_basic --host-ip "$gateway")"
export IRONIC_URL OS_CLIENT_CONFIG_FILE OS_CLOUD

step "running the scenario"
.venv/bin/python -m tests.e2e.kind_scenario --image "$image"
step "PASSED"
