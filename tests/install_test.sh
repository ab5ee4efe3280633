#!/bin/sh
#  install_test.sh SOURCE_DIR BUILD_DIR: installs the build into a temporary
#  prefix, checks what landed there, then builds examples/custom_model_fn.c
#  out of tree twice - with pkg-config, and with CMake's find_package - and
#  trains each for a few steps; makes the Debian package and checks what it
#  holds and needs. Exit 0 when all of it holds.
set -eu
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail () { echo "install_test: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log" \
    || fail "cmake --install failed: $(cat "$tmp/install.log")"
for file in bin/zactor-run bin/zactor-top bin/zactor-ckpt include/za/za_run.h \
            include/za/za_estimator.h share/man/man1/zactor-run.1 \
            share/man/man1/zactor-top.1 share/man/man1/zactor-ckpt.1; do
    [ -s "$tmp/prefix/$file" ] || fail "$file was not installed"
done
pc=$(find "$tmp/prefix" -name zactor.pc) && [ -n "$pc" ] || fail "no zactor.pc installed"
config=$(find "$tmp/prefix" -name zactorConfig.cmake) && [ -n "$config" ] \
    || fail "no zactorConfig.cmake installed"
#  The man page is the program's own --help.
grep -q 'strategy NAME' "$tmp/prefix/share/man/man1/zactor-run.1" \
    || fail "zactor-run.1 lacks --strategy"
#  The installed programs run from the prefix.
"$tmp/prefix/bin/zactor-ckpt" --help > /dev/null 2>&1 || [ $? -eq 2 ] \
    || fail "the installed zactor-ckpt does not run"

#  pkg-config: the .pc file is relocatable (its prefix is found from where it is).
export PKG_CONFIG_PATH="$(dirname "$pc")"
flags=$(pkg-config --cflags --libs zactor) || fail "pkg-config --cflags --libs zactor failed"
case $flags in *"$tmp/prefix"*) ;; *) fail "pkg-config points elsewhere: $flags" ;; esac
cc -std=gnu11 -Wall -Wextra -Werror -o "$tmp/with_pkg_config" \
    "$src/examples/custom_model_fn.c" $flags || fail "the build with pkg-config failed"

#  find_package (zactor).
cmake -S "$src/tests/install" -B "$tmp/user" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
      -DZA_EXAMPLE="$src/examples/custom_model_fn.c" > "$tmp/configure.log" 2>&1 \
    || fail "find_package (zactor) failed: $(cat "$tmp/configure.log")"
cmake --build "$tmp/user" > "$tmp/build.log" 2>&1 \
    || fail "the build with find_package failed: $(cat "$tmp/build.log")"

for program in "$tmp/with_pkg_config" "$tmp/user/user_program"; do
    dir="$tmp/run-$(basename "$program")"
    "$program" --max-steps 20 --log-step-count-steps 0 --save-summary-steps 0 --no-eval \
        --threads 1 --model-dir "$dir" > "$tmp/run.out" 2> "$tmp/run.err" \
        || fail "$program failed: $(cat "$tmp/run.err")"
    grep -q "trained to step 20" "$tmp/run.err" || fail "$program: $(cat "$tmp/run.err")"
    [ -s "$dir/model.ckpt-20.safetensors" ] || fail "$program wrote no checkpoint"
done
#  The Debian package (cpack): the programs under /usr, and its dependencies.
if command -v dpkg-deb > /dev/null && command -v dpkg-shlibdeps > /dev/null; then
    (cd "$build" && cpack -G DEB -B "$tmp/deb" > "$tmp/cpack.log" 2>&1) \
        || fail "cpack -G DEB failed: $(cat "$tmp/cpack.log")"
    deb=$(ls "$tmp"/deb/zactor_*.deb) || fail "cpack made no zactor_*.deb"
    dpkg-deb -c "$deb" | grep -q ' ./usr/bin/zactor-run$' || fail "$deb has no /usr/bin/zactor-run"
    dpkg-deb -c "$deb" | grep -q ' ./usr/share/man/man1/zactor-top.1' \
        || fail "$deb has no man page for zactor-top"
    depends=$(dpkg-deb -f "$deb" Depends)
    for package in dataset-fashion-mnist libczmq4 libzmq5 libopenblas0 libjansson4; do
        case $depends in *"$package"*) ;; *) fail "$deb does not depend on $package: $depends" ;; esac
    done
fi
echo "install_test: installed, built with pkg-config and find_package, trained 20 steps each"
