#!/usr/bin/env bash
# Checks what we ship, offline, as CI runs it (`make chart-check`):
#   1. the chart's CRD is byte-identical to crds/ (one source of truth);
#   2. the Dockerfile passes hadolint;
#   3. with BOTH helm 4 and helm 3: `helm lint --strict` and `helm template --include-crds`
#      with the default values (all namespaces, ClusterRole mode) and with
#      ci/full-values.yaml (every value set; watched namespaces, Role mode, ServiceMonitor, PrometheusRule);
#   4. every rendered manifest validates with `kubernetes-validate --strict` against every
#      Kubernetes minor from 1.30 to the newest schema kubernetes-validate ships.
# The examples/ are validated against the CRD schema by tests/unit (not here).
# Exit 0 only when everything passed; the first failure stops the run and says what to fix.
set -euo pipefail
cd "$(dirname "$0")/.."

chart=charts/ironic-shard-operator
crd=crds/ironicshards.io_ironiccomputeshards.yaml
oldest_kubernetes=1.30
python=.venv/bin/python
validate=.venv/bin/kubernetes-validate

fail() { echo "chart-check: FAILED: $*" >&2; exit 1; }
step() { echo "chart-check: $*"; }

[[ -x $validate ]] || fail "$validate is missing: run 'bash hack/setup.sh' (pyproject's [test] extra)"
bash hack/tools.sh
helms=(.tools/bin/helm .tools/bin/helm3)

step "CRD: $chart/crds/ is a byte-identical copy of $crd"
cmp -s "$crd" "$chart/$crd" ||
    fail "$chart/$crd differs from $crd; the chart ships crds/ unchanged: cp $crd $chart/crds/"

step "Dockerfile: hadolint"
.tools/bin/hadolint Dockerfile || fail "hadolint found problems in the Dockerfile (above)"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for helm in "${helms[@]}"; do
    version=$("$helm" version --short)
    tag=$(basename "$helm")
    for values in default full; do
        args=()
        [[ $values == full ]] && args=(-f "$chart/ci/full-values.yaml")
        step "$version: helm lint --strict ($values values)"
        "$helm" lint --strict --quiet "$chart" "${args[@]}" >"$out/lint.txt" 2>&1 ||
            { cat "$out/lint.txt" >&2; fail "$version: helm lint with $values values"; }
        step "$version: helm template --include-crds ($values values)"
        "$helm" template check "$chart" --namespace ironic-shard-operator --include-crds \
            "${args[@]}" >"$out/$tag-$values.yaml" ||
            fail "$version: helm template with $values values"
    done
done

mapfile -t versions < <("$python" - "$oldest_kubernetes" <<'PY'
import sys
from packaging.version import Version
from kubernetes_validate.utils import all_versions, major_minor
oldest = Version(sys.argv[1])
for minor in sorted({major_minor(v) for v in all_versions()}, key=Version):
    if Version(minor) >= oldest:
        print(minor)
PY
)
(( ${#versions[@]} >= 2 )) || fail "kubernetes-validate ships no schemas from $oldest_kubernetes on"
manifests=$("$python" -c 'import sys, yaml; print(sum(1 for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d))' "$out"/*.yaml)
step "kubernetes-validate --strict: $manifests manifests x Kubernetes ${versions[0]} .. ${versions[-1]}"
for version in "${versions[@]}"; do
    if ! "$validate" --strict --quiet -k "$version.0" "$out"/*.yaml >"$out/validate.txt" 2>&1; then
        cat "$out/validate.txt" >&2
        fail "rendered manifests are not valid Kubernetes $version (above)"
    fi
    # A kind without a schema is only a warning to kubernetes-validate; we accept exactly
    # the Prometheus Operator's ServiceMonitor and PrometheusRule (CRDs no offline schema set
    # carries; the rules themselves are checked by promtool, tests/unit/test_alert_rules.py).
    if grep '^WARN' "$out/validate.txt" | grep -Ev 'kind (ServiceMonitor|PrometheusRule) with api version monitoring.coreos.com/v1 ' >&2; then
        fail "a rendered manifest has no Kubernetes $version schema (above)"
    fi
done

step "OK: ${#helms[@]} helm versions x 2 values files linted and rendered," \
     "$manifests manifests valid for Kubernetes ${versions[*]}"
