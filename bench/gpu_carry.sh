#!/usr/bin/env bash
#  What a lent GPU machine needs to run bench/gpu.sh with binaries built
#  here (GPU.md: it reaches no package registry), in two steps:
#
#    here:   bench/gpu_carry.sh pack BUILD_DIR [DIR]
#      copies bench_train, cuda_layers, cuda_replay, zactor-run and
#      libzactor_cuda.so
#      from BUILD_DIR (configured with the CUDA module: `zactor: CUDA back
#      end ON`) into DIR (default .gpu/, which git ignores), and downloads the
#      .deb files of the libraries they load that a machine with only the
#      CUDA toolkit and PyTorch lacks, and Fashion-MNIST's (31 MB; the lent
#      machines have had none; DATA=0 leaves it out), and the toolkit's
#      CUPTI (4 MB: bench_train's ZA_BENCH_BUSY=1; the lent machines have
#      no Nsight Systems).
#      Then pass DIR in the device tool's `carry` (64 MiB in all).
#
#    there:  source bench/gpu_carry.sh unpack [DIR]
#      unpacks the .deb files under DIR/root, sets LD_LIBRARY_PATH (with
#      PyTorch's own nvidia/*/lib after it: cuDNN and NCCL came only as
#      PyTorch's wheels on the lent machines) and ZA_CUDA_LIBRARY for this
#      shell, puts Fashion-MNIST in place when carried and missing, and says
#      which library any binary still lacks.
#      Then: bench/gpu.sh DIR LOGS [EPOCHS] [ROUNDS] (ONLY="1 8" ...).
#
#  cuDNN and NCCL are not carried (245 MB and 218 MB): the module opens the
#  machine's own (PyTorch's wheels there), else runs without (stderr says so).
PACKAGES="libzmq5 libczmq4 libmsgpackc2 libopenblas0-pthread libgfortran5 libjansson4
          libmicrohttpd12 libsodium23 libpgm-5.3-0 libnorm1 libdnnl2 libturbojpeg0 libspng0"
BINARIES="bench_train cuda_layers cuda_replay zactor-run libzactor_cuda.so"

s_pack () {
    local build=$1 dir=${2:-.gpu}
    [ -f "$build/libzactor_cuda.so" ] || {
        echo "gpu_carry: $build has no libzactor_cuda.so: configure it with -DZA_CUDA=ON" >&2
        return 2
    }
    mkdir -p "$dir/debs"
    for b in $BINARIES; do cp "$build/$b" "$dir/" || return 1; done
    local cupti
    for cupti in /usr/local/cuda/lib64/libcupti.so.13 \
                 /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13; do
        [ -f "$cupti" ] && { mkdir -p "$dir/cupti" && cp -L "$cupti" "$dir/cupti/"; break; }
    done
    local data=(dataset-fashion-mnist)
    [ "${DATA:-1}" = 0 ] && data=()
    # shellcheck disable=SC2086
    (cd "$dir/debs" && apt-get download $PACKAGES "${data[@]}") || return 1
    du -sh "$dir"
}

s_unpack () {
    local dir
    dir=$(cd "${1:-.gpu}" && pwd) || return 1
    for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir/root" || return 1; done
    local lib="$dir/root/usr/lib/x86_64-linux-gnu"
    export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread:$dir/root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    local site wheel
    site=$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)
    for wheel in "$site"/nvidia/*/lib; do
        [ -d "$wheel" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$wheel"
    done
    [ -d "$dir/cupti" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$dir/cupti"
    export ZA_CUDA_LIBRARY="$dir/libzactor_cuda.so"
    local data=/usr/share/datasets/fashion-mnist
    if [ ! -d "$data" ] && [ -d "$dir/root$data" ]; then
        mkdir -p "$(dirname "$data")" && cp -r "$dir/root$data" "$data"
    fi
    [ -d "$data" ] || echo "gpu_carry: no $data here: pack without DATA=0" >&2
    for b in $BINARIES; do
        ldd "$dir/$b" | grep "not found" | sed "s|^|gpu_carry: $b lacks |" >&2
    done
    return 0
}

case "${1:-}" in
    pack) shift; s_pack "$@" ;;
    unpack) shift; s_unpack "$@" ;;
    *) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^#  \{0,1\}//' >&2; false ;;
esac
