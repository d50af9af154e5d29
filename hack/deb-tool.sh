#!/usr/bin/env bash
# Installs one program from a Debian package into the git-ignored .tools/<package>, without
# installing the package on the system (no service, no user, no files outside the work tree):
# `apt-get download` + `dpkg-deb -x`. For Go binaries that need only libc (docker-registry,
# promtool).
#
#   bash hack/deb-tool.sh PACKAGE PROGRAM [VERSION-ARG]
#     e.g. hack/deb-tool.sh prometheus promtool --version
#
# Prints the program's path. Idempotent: a second run finds the program (it runs with
# VERSION-ARG, default --version) and does nothing else; .tools/<package>/.installed names
# the package file it came from. One installer per package at a time (a file lock).
# Exit 3, with the reason on stderr, where it cannot install here (no apt-get or dpkg-deb,
# not Linux, no such package in apt's lists): tests then skip, saying why.
set -euo pipefail
cd "$(dirname "$0")/.."

package=${1:?usage: hack/deb-tool.sh PACKAGE PROGRAM [VERSION-ARG]}
program=${2:?usage: hack/deb-tool.sh PACKAGE PROGRAM [VERSION-ARG]}
version_arg=${3:---version}
dir=.tools/$package
binary=$dir/usr/bin/$program
stamp=$dir/.installed

installed() {
    [[ -x $binary ]] && "$binary" "$version_arg" >/dev/null 2>&1
}

cannot() {
    echo "hack/deb-tool.sh: cannot install $program (Debian package $package) here: $*" >&2
    exit 3
}

if installed; then
    echo "$PWD/$binary"
    exit 0
fi
mkdir -p .tools
exec 9>".tools/$package.lock"
flock 9
if installed; then
    echo "$PWD/$binary"
    exit 0
fi

[[ $(uname -s) == Linux ]] || cannot "this is $(uname -s); the package is Debian's (Linux)"
command -v apt-get >/dev/null || cannot "no apt-get (not Debian or Ubuntu); install $program yourself" \
    "and link it to $binary"
command -v dpkg-deb >/dev/null || cannot "no dpkg-deb"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt drops to its _apt user to download: let it write here (else it warns and goes on as root).
chmod 0777 "$work"
download() { (cd "$work" && apt-get download -q "$package" >"$work/apt.out" 2>&1); }
if ! download; then
    # A fresh machine may have no package lists yet (or stale ones).
    if [[ $(id -u) == 0 ]]; then
        echo "hack/deb-tool.sh: apt-get download $package failed; updating apt's package lists" >&2
        apt-get update -q >/dev/null 2>&1 || true
    fi
    if ! download; then
        policy=$(apt-cache policy "$package" 2>/dev/null | sed -n 's/^ *Candidate: //p')
        if [[ -z $policy || $policy == "(none)" ]]; then
            cannot "apt knows no package $package (apt-cache policy: no candidate)"
        fi
        echo "hack/deb-tool.sh: apt-get download $package (candidate $policy) failed:" >&2
        cat "$work/apt.out" >&2
        exit 1
    fi
fi
deb=$(ls "$work"/"$package"_*.deb)
mkdir -p "$work/root"
dpkg-deb -x "$deb" "$work/root"
# It must run here before it replaces anything.
"$work/root/usr/bin/$program" "$version_arg" >/dev/null 2>&1 || cannot "$program from $(basename "$deb") does not run here"

rm -rf "$dir"
mkdir -p "$dir/usr/bin"
if [[ -d $work/root/usr/share ]]; then
    mv "$work/root/usr/share" "$dir/usr/share"   # its docs and copyright
fi
mv "$work/root/usr/bin/$program" "$binary"   # last: a program that runs means installed
printf '%s\n' "$(basename "$deb")" >"$stamp"
echo "hack/deb-tool.sh: installed $program from $(basename "$deb") into $dir" >&2
echo "$PWD/$binary"
