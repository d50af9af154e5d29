#!/usr/bin/env bash
# Build the real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
# from Go modules into a versioned cache outside the tree, once per machine.
#
# Prints the binaries' directory on stdout (progress on stderr); `build.sh --built` only checks. Reused when all four binaries
# and the stamp of this go.sum are there; a build that stops half-way leaves no stamp, so the
# next call builds again. Nothing is fetched but Go modules from the module proxy.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
KUBE_VERSION=$(cat "$here/KUBE_VERSION")
cache_root=${IRONIC_SHARD_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ironic-shard-operator}
out="$cache_root/kube-$KUBE_VERSION"
stamp="$out/.built-from-$(sha256sum "$here/go.sum" | cut -c1-16)"
commands=(etcd kube-apiserver kube-controller-manager kube-scheduler)
if [[ -f "$stamp" ]]; then
  echo "$out"
  exit 0
fi
# --built: only say where the binaries are; exit 3 (and build nothing) when they are not built.
if [[ "${1:-}" == --built ]]; then exit 3; fi
command -v go >/dev/null || { echo "build.sh: no 'go' on PATH: the control plane is built from Go modules (Go >= $(awk '$1=="go"{print $2}' "$here/go.mod"))" >&2; exit 2; }
mkdir -p "$out"
# One lock per cache: two xdist workers or a test and `make setup` never build at once.
exec 9>"$out/.lock"
flock 9
if [[ -f "$stamp" ]]; then echo "$out"; exit 0; fi
start=$(date +%s)
echo "building the control plane $KUBE_VERSION into $out (a cold build downloads and compiles: 8.5 min on a 2-core machine; once per machine)" >&2
cd "$here"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
go build -trimpath -o "$out/etcd.partial" ./cmd/etcd
mv "$out/etcd.partial" "$out/etcd"
echo "  etcd built after $(( $(date +%s) - start )) s" >&2
for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
  go build -trimpath -ldflags "-X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2)" \
    -o "$out/$cmd.partial" "k8s.io/kubernetes/cmd/$cmd"
  mv "$out/$cmd.partial" "$out/$cmd"
  echo "  $cmd built after $(( $(date +%s) - start )) s" >&2
done
rm -f "$out"/.built-from-*
touch "$stamp"
echo "control plane $KUBE_VERSION built in $(( $(date +%s) - start )) s" >&2
echo "$out"
