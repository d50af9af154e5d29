#!/usr/bin/env bash
# Installs a real OCI registry for the preflight image check's tests (testbed/registry.py):
# Debian's package docker-registry (the CNCF distribution registry, 2.8.x), unpacked into the
# git-ignored .tools/registry without installing it on the system (no service, no user, no
# files outside the work tree): `apt-get download` + `dpkg-deb -x`. It is a Go binary that
# needs only libc.
# Prints the binary's path. Idempotent: a second run finds the binary (it runs) and does
# nothing else; .tools/registry/.installed names the package file it came from. One installer at a time (a file lock), like hack/tools.sh.
# Exit 3, with the reason on stderr, where it cannot install here (no apt-get or dpkg-deb,
# not Linux, no such package in apt's lists): the tests then skip, saying why.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=.tools/registry
binary=$dir/usr/bin/docker-registry
stamp=$dir/.installed
package=docker-registry

installed() {
    [[ -x $binary ]] && "$binary" --version >/dev/null 2>&1
}

cannot() {
    echo "hack/registry.sh: cannot install the registry here: $*" >&2
    exit 3
}

if installed; then
    echo "$PWD/$binary"
    exit 0
fi
mkdir -p .tools
exec 9>.tools/registry.lock
flock 9
if installed; then
    echo "$PWD/$binary"
    exit 0
fi

[[ $(uname -s) == Linux ]] || cannot "this is $(uname -s); the package is Debian's (Linux)"
command -v apt-get >/dev/null || cannot "no apt-get (not Debian or Ubuntu); install the" \
    "distribution registry 2.x yourself and link its binary to $binary"
command -v dpkg-deb >/dev/null || cannot "no dpkg-deb"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt drops to its _apt user to download: let it write here (else it warns and goes on as root).
chmod 0777 "$work"
download() { (cd "$work" && apt-get download -q "$package" >"$work/apt.out" 2>&1); }
if ! download; then
    # A fresh machine may have no package lists yet (or stale ones).
    if [[ $(id -u) == 0 ]]; then
        echo "hack/registry.sh: apt-get download failed; updating apt's package lists" >&2
        apt-get update -q >/dev/null 2>&1 || true
    fi
    if ! download; then
        policy=$(apt-cache policy "$package" 2>/dev/null | sed -n 's/^ *Candidate: //p')
        if [[ -z $policy || $policy == "(none)" ]]; then
            cannot "apt knows no package $package (apt-cache policy: no candidate)"
        fi
        echo "hack/registry.sh: apt-get download $package (candidate $policy) failed:" >&2
        cat "$work/apt.out" >&2
        exit 1
    fi
fi
deb=$(ls "$work"/"$package"_*.deb)
mkdir -p "$work/root"
dpkg-deb -x "$deb" "$work/root"
# It must run here before it replaces anything.
version=$("$work/root/usr/bin/docker-registry" --version | awk '{print $NF}')

rm -rf "$dir"
mkdir -p "$dir/usr/bin"
mv "$work/root/usr/share" "$dir/usr/share"   # its docs (configuration.md, spec/) and copyright
mv "$work/root/usr/bin/docker-registry" "$binary"   # last: a binary that runs means installed
printf '%s\n' "$(basename "$deb")" >"$stamp"
echo "hack/registry.sh: installed docker-registry $version from $(basename "$deb") into $dir" >&2
echo "$PWD/$binary"
