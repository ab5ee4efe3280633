#!/usr/bin/env bash
#  The GPU checks (GPU.md) in one run, on a machine with an NVIDIA GPU, a
#  CUDA build (-DZA_CUDA=ON) and PyTorch with CUDA in python3:
#    1. cuda_layers: every layer, the softmax and the optimizers against the CPU
#    2. images/s at batch 64, 256 and 1024, zactor (bench_train speed) against
#       PyTorch (torch_fmnist.py --device cuda) on the identical model,
#       alternating, ROUNDS rounds; the GPU's busy share sampled by nvidia-smi
#       over the timed steps alone (a run's start would dilute it); zactor
#       again with ZA_FEED=0 (each step copies its batch: what feeding gains)
#       and with ZA_CUDNN=0 (im2col and cuBLAS: what cuDNN gains or costs),
#       and with ZA_CUDA_GRAPHS=0 (each step's calls launched one by one, not
#       replayed as a CUDA graph), and
#       with ZA_SYNC_STEPS=1 (each step waits for its end: what not waiting gains)
#    3. two replicas on the GPU (--replicas-per-device 2) against one
#    4. VGG16's base (64x64x3, batch 64), frozen and whole, against PyTorch
#    5. the seed CNN, EPOCHS epochs, --device cuda against --device cpu
#       (same seed), side by side: the test accuracies
#    6. mixed precision: images/s in fp32, mixed_bfloat16 and mixed_float16
#       against PyTorch (TF32 as it comes, bf16 autocast), VGG16 in bf16, and
#       the seed CNN's EPOCHS epochs in each precision
#    8. VGG16 at 224x224x3, batch 64, whole and frozen base: zactor fp32
#       (cuDNN in TF32, as it comes) against PyTorch's TF32, and zactor's
#       mixed_bfloat16 against PyTorch's bf16 autocast (issue 48's figures)
#    9. the GPU's busy share of a step by CUPTI's records (bench_train's
#       ZA_BENCH_BUSY=1), the kernels and copies a step launches, and the
#       host's milliseconds a step in each layer (ZA_BENCH_PROFILE=1), at
#       batch 64, 256 and 1024, as it comes (CUDA graphs) and with ZA_CUDA_GRAPHS=0
#    7. the host's CPU in bf16 (an AMX Xeon on the lent machines so far):
#       bench/step_breakdown.sh (by primitive and by layer; with AMX, again
#       without it and with whole-batch products), bench_layers, and
#       bench/train_vs_torch.sh at batch 32, 64 and 128 on 1 and 2 threads,
#       2 rounds of 80 steps (about 5 minutes); not in the default list
#  PyTorch runs twice: as it comes (cuDNN's convolutions in TF32) and with
#  --no-tf32 (plain fp32, as zactor computes).
#  Usage: bench/gpu.sh [BUILD_DIR] [LOG_DIR] [EPOCHS] [ROUNDS]
#  ONLY="2 4" runs those checks alone (default: 1 to 6, 8 and 9; ONLY="7" the CPU's).
#  Check 1 runs cuda_layers three times: as it comes (cuDNN, TF32), in strict
#  fp32 (NVIDIA_TF32_OVERRIDE=0) and with ZA_CUDNN=0 (im2col and cuBLAS).
#  Fashion-MNIST is read from /usr/share/datasets/fashion-mnist.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
logs=${2:-/tmp/zactor-gpu}
epochs=${3:-5}
rounds=${4:-2}
[ "$rounds" -ge 1 ] || { echo "ROUNDS must be 1 or more" >&2; exit 2; }
mkdir -p "$logs"
: >"$logs/speed.err"
threads=$(( $(nproc) < 8? $(nproc): 8 ))
only=${ONLY:-1 2 3 4 5 6 8 9}
want () { [[ " $only " == *" $1 "* ]]; }
say () { echo "== $*"; }
rate () { sed -nE 's/.*images_per_sec=([0-9.]+).*/\1/p' | tail -1; }
ratio () { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b}'; }
median () { sort -g | awk '{a[NR]=$1} END {if (!NR) print "-"; else print (NR%2)? a[(NR+1)/2]: (a[NR/2]+a[NR/2+1])/2}'; }

#  nvidia-smi's utilization.gpu (the share of time a kernel ran), sampled
#  every 100 ms while a command runs, into FILE.
busy () {
    local file=$1; shift
    nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 100 \
        >"$file" 2>/dev/null &
    local sampler=$!
    "$@"
    local rc=$?
    kill $sampler 2>/dev/null; wait $sampler 2>/dev/null
    return $rc
}
#  The mean of FILE's samples inside the timed steps (bench_train's window=).
mean () {
    python3 - "$1" "$(sed -nE 's/.*window=([0-9.]+),([0-9.]+).*/\1 \2/p' <<<"$2")" <<'PY'
import datetime, sys
try:
    t0, t1 = (float(x) for x in sys.argv[2].split())
except ValueError:
    print("-"); sys.exit()
seen = []
for row in open(sys.argv[1]):
    stamp, _, value = row.rpartition(",")
    try:
        t = datetime.datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
        if t0 <= t <= t1:
            seen.append(float(value))
    except ValueError:
        pass
print("%.0f" % (sum(seen) / len(seen)) if seen else "-")
PY
}

say "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
say "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)"
say "torch: $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>&1)"

if want 1; then
say "1. cuda_layers"
for mode in default NVIDIA_TF32_OVERRIDE=0 ZA_CUDNN=0; do
    out="$logs/cuda_layers_${mode%%=*}.txt"
    env ${mode/default/ZA_CUDNN=1} timeout 180 "$build/cuda_layers" >"$out" 2>&1
    echo "cuda_layers ($mode) rc=$? ($(grep -c ' ok$' "$out") ok, $(grep -c FAIL "$out") FAIL)"
    head -1 "$out"
    grep -E 'FAIL|rror|declines|does not start' "$out" | head -12
done
fi

if want 2; then
say "2. images/s, seed CNN, zactor against PyTorch, $rounds rounds"
declare -A z t f u n c ng ngu w wu
for ((r = 0; r < rounds; r++)); do
    for b in 64 256 1024; do
        steps=$(( b == 64? 3000: b == 256? 1500: 600 ))
        line=$(busy "$logs/busy_$b.txt" env ZA_BENCH_DEVICE=cuda timeout 120 \
               "$build/bench_train" speed "$b" "$threads" "$steps" 20 2>>"$logs/speed.err")
        share=$(mean "$logs/busy_$b.txt" "$line")
        echo "$line  busy=$share%"
        z[$b]+="$(rate <<<"$line") "; u[$b]+="$share "
        #  The same with each step copying its batch (no prefetch to the GPU).
        line=$(env ZA_BENCH_DEVICE=cuda ZA_FEED=0 timeout 120 \
               "$build/bench_train" speed "$b" "$threads" "$steps" 20 2>>"$logs/speed.err")
        echo "$line  (ZA_FEED=0)"
        n[$b]+="$(rate <<<"$line") "
        #  The same without cuDNN (im2col and cuBLAS: fewer host calls a step).
        line=$(env ZA_BENCH_DEVICE=cuda ZA_CUDNN=0 timeout 120 \
               "$build/bench_train" speed "$b" "$threads" "$steps" 20 2>>"$logs/speed.err")
        echo "$line  (ZA_CUDNN=0)"
        c[$b]+="$(rate <<<"$line") "
        #  The same with each step's calls launched one by one (ZA_CUDA_GRAPHS=0).
        line=$(busy "$logs/busy_nographs_$b.txt" env ZA_BENCH_DEVICE=cuda ZA_CUDA_GRAPHS=0 \
               timeout 120 "$build/bench_train" speed "$b" "$threads" "$steps" 20 2>>"$logs/speed.err")
        share=$(mean "$logs/busy_nographs_$b.txt" "$line")
        echo "$line  busy=$share%  (ZA_CUDA_GRAPHS=0)"
        ng[$b]+="$(rate <<<"$line") "; ngu[$b]+="$share "
        #  The same with each step waiting for its end (ZA_SYNC_STEPS=1).
        line=$(busy "$logs/busy_sync_$b.txt" env ZA_BENCH_DEVICE=cuda ZA_SYNC_STEPS=1 \
               timeout 120 "$build/bench_train" speed "$b" "$threads" "$steps" 20 2>>"$logs/speed.err")
        share=$(mean "$logs/busy_sync_$b.txt" "$line")
        echo "$line  busy=$share%  (ZA_SYNC_STEPS=1)"
        w[$b]+="$(rate <<<"$line") "; wu[$b]+="$share "
        line=$(timeout 120 python3 "$here/torch_fmnist.py" --mode speed --device cuda \
               --batch "$b" --steps "$steps" --warmup 20 --threads "$threads" 2>>"$logs/speed.err")
        echo "$line"
        t[$b]+="$(rate <<<"$line") "
        line=$(timeout 120 python3 "$here/torch_fmnist.py" --mode speed --device cuda --no-tf32 \
               --batch "$b" --steps "$steps" --warmup 20 --threads "$threads" 2>>"$logs/speed.err")
        echo "$line"
        f[$b]+="$(rate <<<"$line") "
    done
done
for b in 64 256 1024; do
    zm=$(tr ' ' '\n' <<<"${z[$b]}" | grep . | median); tm=$(tr ' ' '\n' <<<"${t[$b]}" | grep . | median)
    fm=$(tr ' ' '\n' <<<"${f[$b]}" | grep . | median)
    nm=$(tr ' ' '\n' <<<"${n[$b]}" | grep . | median)
    cm=$(tr ' ' '\n' <<<"${c[$b]}" | grep . | median)
    ngm=$(tr ' ' '\n' <<<"${ng[$b]}" | grep . | median)
    wm=$(tr ' ' '\n' <<<"${w[$b]}" | grep . | median)
    echo "batch $b: zactor $zm img/s, torch (tf32 convs) $tm, torch fp32 $fm; zactor/torch $(ratio "$zm" "$tm")x, zactor/torch-fp32 $(ratio "$zm" "$fm")x; busy ${u[$b]}%; fed/unfed $(ratio "$zm" "$nm")x; cuDNN/im2col $(ratio "$zm" "$cm")x; without CUDA graphs $ngm img/s ($(ratio "$ngm" "$tm")x torch), busy ${ngu[$b]}%; not waiting/waiting $(ratio "$zm" "$wm")x, busy waiting ${wu[$b]}%"
done
fi

if want 3; then
say "3. replicas on one GPU: 2 against 1 at the same batch"
for b in 256 1024; do
    for n in 1 2 1 2; do
        line=$(env ZA_BENCH_DEVICE=cuda ZA_BENCH_REPLICAS=$n timeout 120 \
               "$build/bench_train" speed "$b" "$threads" 200 20 2>>"$logs/speed.err")
        echo "$line"
    done
done
fi

if want 4; then
say "4. VGG16 base 64x64x3 + head, batch 64: zactor against PyTorch"
model="vgg16 globalavgpool dense(10)"
for ((r = 0; r < rounds; r++)); do
    echo "zactor frozen: $(env ZA_BENCH_DEVICE=cuda timeout 120 "$build/bench_train" model "$model" 64 64 "$threads" 30 3 conv2d 2>>"$logs/speed.err")"
    echo "torch  frozen: $(timeout 120 python3 "$here/transfer_torch.py" 64 64 "$threads" 30 3 --frozen --cuda 2>>"$logs/speed.err")"
    echo "zactor whole:  $(env ZA_BENCH_DEVICE=cuda timeout 120 "$build/bench_train" model "$model" 64 64 "$threads" 30 3 2>>"$logs/speed.err")"
    echo "torch  whole:  $(timeout 120 python3 "$here/transfer_torch.py" 64 64 "$threads" 30 3 --cuda 2>>"$logs/speed.err")"
    echo "torch  frozen: $(timeout 120 python3 "$here/transfer_torch.py" 64 64 "$threads" 30 3 --frozen --cuda --no-tf32 2>>"$logs/speed.err")"
    echo "torch  whole:  $(timeout 120 python3 "$here/transfer_torch.py" 64 64 "$threads" 30 3 --cuda --no-tf32 2>>"$logs/speed.err")"
done
fi

if want 5; then
say "5. seed CNN, $epochs epochs, seed 1: cpu and cuda, side by side"
for dev in cpu cuda; do
    rm -rf "/tmp/zactor-gpu-$dev"
    n=$threads; [ $dev = cpu ] && n=$(( $(nproc) > 4? $(nproc) - 2: $(nproc) ))
    ( timeout 400 "$build/zactor-run" --model-dir "/tmp/zactor-gpu-$dev" \
          --epochs "$epochs" --seed 1 --device "$dev" --threads "$n" \
          >"$logs/accuracy_$dev.txt" 2>&1; echo "rc=$?" >>"$logs/accuracy_$dev.txt" ) &
done
wait
for dev in cpu cuda; do
    echo "$dev: $(grep -E 'test accuracy|trained to|rc=|rror' "$logs/accuracy_$dev.txt" | tr '\n' ' ')"
done
fi
if want 6; then
say "6. mixed precision: zactor fp32, mixed_bfloat16, mixed_float16 against PyTorch (TF32 default, bf16 autocast)"
declare -A m
for ((r = 0; r < rounds; r++)); do
    for b in 256 1024; do
        steps=$(( b == 256? 1500: 600 ))
        for p in fp32 mixed_bfloat16 mixed_float16; do
            line=$(env ZA_BENCH_DEVICE=cuda ZA_BENCH_PRECISION=$p timeout 120 \
                   "$build/bench_train" speed "$b" "$threads" "$steps" 20 2>>"$logs/speed.err")
            echo "$line"
            m[$b$p]+="$(rate <<<"$line") "
        done
        for flag in "" --bf16; do
            line=$(timeout 120 python3 "$here/torch_fmnist.py" --mode speed --device cuda $flag \
                   --batch "$b" --steps "$steps" --warmup 20 --threads "$threads" 2>>"$logs/speed.err")
            echo "$line"
            m[$b"torch$flag"]+="$(rate <<<"$line") "
        done
    done
    model="vgg16 globalavgpool dense(10)"
    for p in fp32 mixed_bfloat16; do
        echo "zactor vgg16 whole $p: $(env ZA_BENCH_DEVICE=cuda ZA_BENCH_PRECISION=$p timeout 120 "$build/bench_train" model "$model" 64 64 "$threads" 30 3 2>>"$logs/speed.err")"
    done
    echo "torch vgg16 whole (TF32): $(timeout 120 python3 "$here/transfer_torch.py" 64 64 "$threads" 30 3 --cuda 2>>"$logs/speed.err")"
done
for b in 256 1024; do
    med () { tr ' ' '\n' <<<"${m[$b$1]}" | grep . | median; }
    echo "batch $b: zactor fp32 $(med fp32), bf16 $(med mixed_bfloat16), fp16 $(med mixed_float16); torch TF32 $(med torch), bf16 autocast $(med torch--bf16)"
done
for p in fp32 mixed_bfloat16 mixed_float16; do
    rm -rf "/tmp/zactor-gpu-$p"
    timeout 200 "$build/zactor-run" --model-dir "/tmp/zactor-gpu-$p" --epochs "$epochs" --seed 1 \
        --device cuda --threads "$threads" --precision "$p" >"$logs/accuracy_$p.txt" 2>&1
    echo "$p: rc=$? $(grep -E 'test accuracy|trained to|rror' "$logs/accuracy_$p.txt" | tr '\n' ' ')"
done
grep -h '"loss_scale"' /tmp/zactor-gpu-mixed_float16/metrics.jsonl 2>/dev/null | tail -1
fi
if want 8; then
say "8. VGG16 224x224x3 + head, batch 64: zactor (cuDNN) against PyTorch, TF32 and bf16"
model="vgg16 globalavgpool dense(10)"
declare -A v
for ((r = 0; r < rounds; r++)); do
    for freeze in "" conv2d; do
        tag=${freeze:+frozen}; tag=${tag:-whole}; flag=${freeze:+--frozen}
        line=$(env ZA_BENCH_DEVICE=cuda ZA_CUDNN_VERBOSE=1 timeout 150 "$build/bench_train" model "$model" 224 64 "$threads" 20 3 $freeze 2>>"$logs/vgg_cudnn.err")
        echo "zactor $tag fp32/TF32: $line"; v[z$tag]+="$(rate <<<"$line") "
        line=$(timeout 150 python3 "$here/transfer_torch.py" 224 64 "$threads" 20 3 $flag --cuda 2>>"$logs/speed.err")
        echo "torch  $tag TF32:      $line"; v[t$tag]+="$(rate <<<"$line") "
        line=$(env ZA_BENCH_DEVICE=cuda ZA_BENCH_PRECISION=mixed_bfloat16 ZA_CUDNN_VERBOSE=1 timeout 150 "$build/bench_train" model "$model" 224 64 "$threads" 20 3 $freeze 2>>"$logs/vgg_cudnn.err")
        echo "zactor $tag bf16:      $line"; v[zb$tag]+="$(rate <<<"$line") "
        line=$(timeout 150 python3 "$here/transfer_torch.py" 224 64 "$threads" 20 3 $flag --cuda --bf16 2>>"$logs/speed.err")
        echo "torch  $tag bf16:      $line"; v[tb$tag]+="$(rate <<<"$line") "
    done
done
vmed () { tr ' ' '\n' <<<"${v[$1]}" | grep . | median; }
for tag in whole frozen; do
    echo "VGG16 224 $tag: TF32 zactor $(vmed z$tag), torch $(vmed t$tag): $(ratio "$(vmed z$tag)" "$(vmed t$tag)")x; bf16 zactor $(vmed zb$tag), torch $(vmed tb$tag): $(ratio "$(vmed zb$tag)" "$(vmed tb$tag)")x"
done
grep -h 'declines\|does not' "$logs/vgg_cudnn.err" "$logs/speed.err" | sort | uniq -c | head
fi
if want 9; then
say "9. the GPU's busy share by CUPTI, the launches a step, the host's time a step"
for b in 64 256 1024; do
    steps=$(( b == 64? 3000: b == 256? 1500: 600 ))
    for graphs in 1 0; do
        echo "batch $b, ZA_CUDA_GRAPHS=$graphs:"
        env ZA_BENCH_DEVICE=cuda ZA_BENCH_BUSY=1 ZA_CUDA_GRAPHS=$graphs timeout 120 \
            "$build/bench_train" speed "$b" "$threads" "$steps" 20 2>>"$logs/speed.err"
        env ZA_BENCH_DEVICE=cuda ZA_BENCH_PROFILE=1 ZA_CUDA_GRAPHS=$graphs timeout 120 \
            "$build/bench_train" speed "$b" "$threads" "$steps" 20 2>>"$logs/speed.err" \
            | grep -E 'profile (row|step)' | awk '{printf "  %s", $0} END {print ""}'
    done
done
fi
if want 7; then
say "7. the host's CPU in bf16: where a step goes, each layer, against PyTorch"
timeout 150 bash "$here/step_breakdown.sh" "$build" 64 1 40
timeout 40 "$build/bench_layers" 16 1 mixed_bfloat16
PYTHON=${PYTHON:-python3} BATCHES="32 64 128" timeout 420 bash "$here/train_vs_torch.sh" "$build" 2 80
fi
tail -5 "$logs/speed.err"
