#!/usr/bin/env bash
#  The Debian package on a fresh Debian 12: makes a bare bookworm root with
#  debootstrap (minbase: no compiler, no zactor dependency), installs the
#  package cpack made with `apt-get install ./zactor_*.deb` (apt brings its
#  dependencies from the mirror), then runs `zactor-run --local` from the PATH
#  inside it and checks it trained to the end and evaluated.
#  Needs root and a Debian mirror; not run by ctest (CI has no chroot).
#  Usage: tests/fresh_debian_install.sh [BUILD_DIR] [MIRROR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
mirror=${2:-http://deb.debian.org/debian}
fail () { echo "fresh_debian_install: FAILED: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "run as root (debootstrap and chroot)"
command -v debootstrap > /dev/null || apt-get install -y -q debootstrap > /dev/null
root=$(mktemp -d /tmp/za-bookworm.XXXXXX)
cleanup () {
    umount "$root/proc" 2> /dev/null || true
    rm -rf "$root"
}
trap cleanup EXIT
(cd "$build" && cpack -G DEB -B "$root.deb" > /dev/null) || fail "cpack -G DEB"
deb=$(ls "$root".deb/zactor_*.deb)
echo "debootstrap bookworm into $root ..."
debootstrap --variant=minbase bookworm "$root" "$mirror" > "$root.debootstrap.log" 2>&1 \
    || fail "debootstrap: $(tail -5 "$root.debootstrap.log")"
cp "$deb" "$root/tmp/"
mount -t proc proc "$root/proc"
echo "apt-get install ./$(basename "$deb") in the fresh root ..."
chroot "$root" /bin/sh -c "apt-get update -q > /dev/null && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q /tmp/$(basename "$deb")" \
    > "$root.apt.log" 2>&1 || fail "apt-get install: $(tail -20 "$root.apt.log")"
chroot "$root" /bin/sh -c "command -v zactor-run && man -w zactor-run 2>/dev/null; true"
echo "zactor-run --local from the PATH ..."
chroot "$root" /bin/sh -c "cd /tmp && zactor-run --local --max-steps 300 --model-dir /tmp/run" \
    > "$root.run.log" 2>&1 || fail "zactor-run --local: $(tail -20 "$root.run.log")"
grep -q "test accuracy" "$root.run.log" || fail "no test accuracy line: $(tail -5 "$root.run.log")"
tail -4 "$root.run.log"
rm -rf "$root".deb "$root".*.log
echo "fresh_debian_install: OK: $(basename "$deb") installs on a fresh Debian 12 and" \
     "zactor-run --local runs from the PATH"
