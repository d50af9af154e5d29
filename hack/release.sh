#!/usr/bin/env bash
# `make release`: every artefact of one version, into dist/ (or $DIST), from this checkout:
#
#   ironic_shard_operator-V-py3-none-any.whl, ironic_shard_operator-V.tar.gz   (`twine check`ed)
#   ironic-shard-operator-V.tgz         the Helm chart; chart version and appVersion are V
#   image.lock, wheelhouse/              the image's hashed lock and every file it names, for
#                                        linux/amd64 CPython 3.11 (the Dockerfile's base)
#   kubectl-ics_vV_linux_amd64.tar.gz    the kubectl plugin as one executable (a PEX: needs a
#                                        CPython 3.11 on PATH), and krew/ics.yaml, its krew
#                                        manifest (uri under $RELEASE_BASE_URL, sha256 of the archive)
#   CHANGELOG.md                         with a section for V
#   SHA256SUMS
#
# V is pyproject.toml's [project] version, the one place a version is written: the chart is
# packaged with it, and the release stops when charts/.../Chart.yaml (what `helm install` from
# a checkout reads) or CHANGELOG.md disagree. Everything is downloaded from PyPI by the hashes
# of requirements/image.lock (`make lock` writes it). docs/releasing.md says how to publish.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/setup.sh
bash hack/tools.sh
python=.venv/bin/python
helm=.tools/bin/helm
chart=charts/ironic-shard-operator
dist=${DIST:-dist}
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)

fail() { echo "hack/release.sh: $*" >&2; exit 1; }
step() { echo "== $*"; }

version=$("$python" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
read -r chart_version app_version < <("$python" -c 'import sys, yaml; c = yaml.safe_load(open(sys.argv[1]))
print(c["version"], c["appVersion"])' "$chart/Chart.yaml")
[[ $chart_version == "$version" && $app_version == "$version" ]] || fail "pyproject.toml says version" \
    "$version, $chart/Chart.yaml version $chart_version and appVersion $app_version: make them one"
grep -q "^## $version\b" CHANGELOG.md || fail "CHANGELOG.md has no section '## $version'"
base_url=${RELEASE_BASE_URL:-file://$dist}

# Emptied first, but only a folder that is empty, dist/ itself, or an earlier release.
if [[ $dist != "$PWD/dist" && -n $(ls -A "$dist") && ! -f $dist/SHA256SUMS ]]; then
    fail "$dist holds files and no earlier release (no SHA256SUMS): not emptying it"
fi
rm -rf "$dist"
mkdir -p "$dist"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

step "wheel and sdist $version"
# From a copy of the files git tracks: nothing untracked gets in, and the build writes nothing
# here (two releases at once, as two test workers may run, do not meet).
mkdir -p "$work/src"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$work/src"
"$python" -m build --wheel --sdist --outdir "$dist" "$work/src" >"$work/build.log" 2>&1 \
    || { cat "$work/build.log" >&2; fail "build failed"; }
"$python" -m twine check --strict "$dist"/*.whl "$dist"/*.tar.gz

step "the image's lock and its wheelhouse (linux/amd64, CPython 3.11)"
cp requirements/image.lock "$dist/image.lock"
# The base image is Debian 12 (glibc 2.36): every manylinux tag up to 2_36 installs there. pip
# does not widen one --platform to the older tags, so each is named.
platforms=()
for glibc in $(seq 36 -1 5); do platforms+=(--platform "manylinux_2_${glibc}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
"$python" -m pip download --quiet --no-deps --require-hashes --only-binary=:all: "${platforms[@]}" \
    --python-version 3.11 --implementation cp --abi cp311 -r requirements/image.lock -d "$dist/wheelhouse" \
    2> >(grep -v "^WARNING: Location" >&2)

step "chart $version"
"$helm" package "$chart" --version "$version" --app-version "$version" -d "$dist" >/dev/null

step "kubectl-ics $version (PEX) and its krew manifest"
plugin=$work/plugin
mkdir -p "$plugin"
wheel=$(cd "$dist" && ls ironic_shard_operator-"$version"-py3-none-any.whl)
# The lock's hashes, and the wheel just built by its own: pip's hash mode wants all or none.
{ echo "-r $PWD/requirements/image.lock"
  echo "ironic-shard-operator @ file://$dist/$wheel --hash=sha256:$(sha256sum "$dist/$wheel" | awk '{print $1}')"
} >"$work/plugin-requirements.txt"
"$python" -m pex -r "$work/plugin-requirements.txt" --no-pypi --find-links "$dist/wheelhouse" --intransitive \
    --interpreter-constraint 'CPython==3.11.*' --python-shebang '/usr/bin/env python3' \
    -c kubectl-ics -o "$plugin/kubectl-ics"
archive=kubectl-ics_v${version}_linux_amd64.tar.gz
# Reproducible: fixed order, owner and times.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='2000-01-01 00:00Z' \
    -C "$plugin" -cf - . | gzip -n >"$dist/$archive"
sha=$(sha256sum "$dist/$archive" | awk '{print $1}')
mkdir -p "$dist/krew"
cat >"$dist/krew/ics.yaml" <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: ics
spec:
  version: v$version
  homepage: ${RELEASE_HOMEPAGE:-$base_url}
  shortDescription: Status, report, retire, fence, preflight, pause
  description: |
    kubectl ics shows the IronicComputeShard pools of the ironic-shard-operator (members,
    nodes, conditions, Events) and writes a pool's debug bundle; retires a member (its nodes
    handed over first), fences or unfences one; checks a pool's clouds.yaml and nova.conf
    against Ironic, Nova and Placement before it is applied (preflight); and pauses or
    resumes a pool.
  caveats: |
    kubectl-ics is a PEX: it needs a CPython 3.11 on PATH (python3 or python3.11).
  platforms:
    - selector:
        matchLabels:
          os: linux
          arch: amd64
      uri: $base_url/$archive
      sha256: $sha
      bin: kubectl-ics
YAML

cp CHANGELOG.md "$dist/CHANGELOG.md"
(cd "$dist" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%P\n' | sort | xargs sha256sum >SHA256SUMS)
step "OK: $(cd "$dist" && ls | tr '\n' ' ')"
