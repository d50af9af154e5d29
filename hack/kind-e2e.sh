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
# 5. teardown, always (trap on EXIT, also after SIGINT/SIGTERM): diagnostics into
#    .run/kind-e2e/ on failure, then the cluster, Ironic and the temporary files are removed.
#
# The outcome is the exit status, and one line that says the same:
#   0   passed:  `kind-e2e: RESULT PASSED`
#   >0  failed:  `kind-e2e: RESULT FAILED (exit N)`   (130/143: interrupted)
#   77  cannot run here (no Docker engine, no kind binary): no RESULT line, the one-line
#       reason (`kind-e2e: cannot run: ...`) is the last line on stderr; nothing was created.
# The RESULT line is printed as teardown begins, so teardown's own lines follow it: read the
# line wherever it is, never "the last line". Teardown cannot change the outcome: its
# failures are reported as warnings, and the exit status is the run's.
# Commands: $KIND (default kind); docker, helm and kubectl from PATH (helm and kubectl from
# hack/tools.sh's .tools/bin first). tests/e2e/test_kind_script.py runs this script with
# fake commands to check this plumbing without Docker.
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

# ---- everything below ends in cleanup(), which prints the RESULT line -------------------
run_id=$$
cluster=iso-e2e-$run_id
image=ironic-shard-operator:e2e-$run_id
work=$(mktemp -d)
export KUBECONFIG=$work/kubeconfig
ironic_state=$work/ironic
diagnostics=.run/kind-e2e
cluster_created=false
image_built=false
ironic_started=false

# Runs once, on every exit from here on (the INT/TERM traps below exit into it). Whatever
# happens in it, the script exits with the status it was entered with.
cleanup() {
    local status=$?
    set +eu
    trap 'echo "kind-e2e: signal during teardown: teardown goes on" >&2' INT TERM
    if [[ $status -eq 0 ]]; then
        step "RESULT PASSED"
    else
        step "RESULT FAILED (exit $status)"
    fi
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
        "$kind" delete cluster --name "$cluster" >/dev/null 2>&1 ||
            echo "kind-e2e: warning: could not delete kind cluster $cluster: $kind delete cluster --name $cluster" >&2
    fi
    if [[ $ironic_started == true ]]; then
        python3 hack/ironic/service.py stop "$ironic_state" ||
            echo "kind-e2e: warning: could not stop Ironic ($ironic_state)" >&2
    fi
    if [[ $image_built == true ]]; then
        docker image rm "$image" >/dev/null 2>&1 || echo "kind-e2e: warning: could not remove image $image" >&2
    fi
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bash hack/setup.sh
bash hack/tools.sh
export PATH="$PWD/.tools/bin:$PATH"   # the helm 4 and kubectl of hack/tools.sh

step "creating kind cluster $cluster"
cluster_created=true   # before the create: a half-created cluster is deleted too
"$kind" create cluster --name "$cluster" --kubeconfig "$KUBECONFIG" --wait 180s

step "building $image"
image_built=true
docker build --quiet -t "$image" . >/dev/null
"$kind" load docker-image "$image" --name "$cluster"

# The kind nodes reach this host at the gateway of the docker network `kind`.
gateway=$(docker network inspect kind \
    --format '{{range .IPAM.Config}}{{.Gateway}}{{"\n"}}{{end}}' | grep -m1 -E '^[0-9]+(\.[0-9]+){3}$') ||
    fail "docker network 'kind' has no IPv4 gateway"
step "starting Ironic on $gateway (reachable from the cluster)"
# An assignment, not `eval "$(...)"`: a failed start must stop the script (set -e), and
# eval of a failed command substitution would succeed.
ironic_started=true   # before the start: a half-started Ironic is stopped too
ironic_env=$(python3 hack/ironic/service.py start "$ironic_state" --auth http_basic --host-ip "$gateway")
eval "$ironic_env"
export IRONIC_URL OS_CLIENT_CONFIG_FILE OS_CLOUD

step "running the scenario"
.venv/bin/python -m tests.e2e.kind_scenario --image "$image"
