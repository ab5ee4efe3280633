#!/usr/bin/env bash
#  The README's two commands on a fresh Debian 12: makes a bare bookworm root with
#  debootstrap (minbase: nothing but apt and a shell), copies the repository's
#  committed tree (git archive HEAD) into it, and runs there, as root, exactly the
#  README's first command (install, build, zactor-run --local) and then its second
#  (the whole test suite). Exit 0 when both end with 0.
#  Needs root, debootstrap and a Debian mirror; too slow for CI (about 25 minutes on
#  2 cores), so it is run by hand before an issue about the fresh machine is closed.
#  Usage: tests/fresh_debian_readme.sh [MIRROR]     (ZA_KEEP_ROOT=1 keeps the root)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
mirror=${1:-http://deb.debian.org/debian}
fail () { echo "fresh_debian_readme: FAILED: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "run as root (debootstrap, chroot and mounts)"
command -v debootstrap > /dev/null || apt-get install -y -q debootstrap > /dev/null
root=$(mktemp -d /tmp/za-readme.XXXXXX)
cleanup () {
    for m in dev/pts dev proc; do umount "$root/$m" 2> /dev/null || true; done
    [ "${ZA_KEEP_ROOT:-0}" = 1 ] || rm -rf "$root"
}
trap cleanup EXIT
echo "debootstrap bookworm into $root ..."
debootstrap --variant=minbase bookworm "$root" "$mirror" > "$root.debootstrap.log" 2>&1 \
    || fail "debootstrap: $(tail -5 "$root.debootstrap.log")"
#  What a fresh installation has and a minbase root lacks: a hosts file.
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$root/etc/hosts"
mkdir -p "$root/src/zactor"
git -C "$repo" archive HEAD | tar -x -C "$root/src/zactor"
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
first=$(sed -n '/^```sh$/{n;p;q}' "$repo/README.md")
second=$(sed -n '/^```sh$/{n;n;p;q}' "$repo/README.md")
echo "the README's first command in the fresh root ..."
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    DEBIAN_FRONTEND=noninteractive /bin/bash -c "cd /src/zactor && $first" \
    > "$root.first.log" 2>&1 || fail "the first command: $(tail -20 "$root.first.log")"
grep -q "test accuracy" "$root.first.log" || fail "no test accuracy: $(tail -5 "$root.first.log")"
grep "test accuracy" "$root.first.log" | tail -1
echo "the README's second command in the fresh root ..."
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /src/zactor && $second" > "$root.second.log" 2>&1 \
    || fail "the second command: $(grep -E 'tests passed|Failed|\*\*\*' "$root.second.log" | tail -20)"
grep -E "tests passed" "$root.second.log"
rm -f "$root".*.log
echo "fresh_debian_readme: OK: the README's two commands pass on a fresh Debian 12"
