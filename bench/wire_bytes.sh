#!/usr/bin/env bash
#  The wire bytes of two builds side by side: bench/bench_wire_bytes.c, built
#  against each build's libzactor.a, prints the header every op is written as
#  (bare, with every header field and four tensors, init with each optimizer
#  with and without a schedule) and what decoding it gives back; the two
#  outputs must be identical. Usage: bench/wire_bytes.sh OLD_BUILD NEW_BUILD
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
old=$(cd "${1:?old build dir}" && pwd)
new=$(cd "${2:?new build dir}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
libs=$(sed -E 's/.*-o [^ ]+ +//; s/libzactor.a libza_kernels.a//' "$new/CMakeFiles/bench_wire.dir/link.txt")
for side in old new; do
    dir=$([ "$side" = old ] && echo "$old" || echo "$new")
    src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$dir/CMakeCache.txt")
    cc -O2 -I"$src/include" $(pkg-config --cflags libczmq msgpack) "$here/bench_wire_bytes.c" \
       -o "$work/$side" "$dir/libzactor.a" "$dir/libza_kernels.a" $libs
    "$work/$side" > "$work/$side.txt"
done
lines=$(wc -l < "$work/new.txt")
if cmp -s "$work/old.txt" "$work/new.txt"; then
    echo "wire bytes: identical, $lines lines ($(grep -c ' decoded ' "$work/new.txt") messages)"
else
    diff "$work/old.txt" "$work/new.txt" | head -40
    echo "wire bytes: DIFFER"
    exit 1
fi
