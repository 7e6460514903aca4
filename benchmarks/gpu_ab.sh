#!/usr/bin/env bash
# One GPU call that checks a change and times it against a baseline tree, from the repository
# root: the device set (`pytest -m gpu`, every kernel against its reference, on 8 processes
# where pytest-xdist is there), then `python -m ozaki bench` on this tree, on the baseline and
# on this tree again (the third run gives the spread of two runs of the same code).  Every
# bench measures DGEMM in its own run, so compare the × DGEMM columns.  Logs and CSVs go to
# $OUT (else ./gpu-ab); the summary prints last.  The search engine's tests need OR-Tools,
# which the GPU machine lacks: they are left out (they run on the CPU in CI).
#
#   benchmarks/gpu_ab.sh BASELINE_DIR [SIZES] [SECONDS_PER_BENCH]
#
# RUNS (default "gpu-set head base head2") picks the steps, to spread them over calls; two more
# steps bench this tree's batches ("batched": BATCHED_SHAPES against torch's batched float64
# matmul, cuBLAS strided-batched DGEMM) and complex products ("complex": COMPLEX_SIZES and
# COMPLEX_SHAPES against torch's complex128 matmul, cuBLAS ZGEMM).
#
# A baseline tree is `git archive REV | tar -x -C DIR` into a folder that .git/info/exclude
# ignores, carried with the call.
set -uo pipefail
base=$1
sizes=${2:-16384,8192,4096}
budget=${3:-150}
out=$(realpath -m "${OUT:-gpu-ab}")
mkdir -p "$out"
export PYTHONUNBUFFERED=1
{
    date -u +"%Y-%m-%d %H:%M UTC"
    nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
    python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
} | tee "$out/versions.txt"

runs=${RUNS:-gpu-set head base head2}
parallel=()
if python3 -c "import xdist" 2> /dev/null; then
    parallel=(-n 8)
fi
if [[ " $runs " == *" gpu-set "* ]]; then
    start=$(date +%s)
    timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu "${parallel[@]}" --ignore=tests/test_search.py \
        --ignore=tests/test_search_cli.py tests > "$out/gpu-set.log" 2>&1
    echo "device set: $(tail -n 1 "$out/gpu-set.log") [$(($(date +%s) - start)) s]" | tee -a "$out/summary.txt"
    grep -E "^(FAILED|ERROR)" "$out/gpu-set.log" | head -20
fi

for run in ${runs/gpu-set/}; do
    tree=.
    [ "$run" = base ] && tree=$base
    case $run in
        batched) shapes=(--shapes "${BATCHED_SHAPES:-16x4096x4096x4096,8x8192x8192x8192,256x1024x1024x1024}") ;;
        complex) shapes=(--dtype complex128 --sizes "${COMPLEX_SIZES:-4096,8192,16384}"
                         --shapes "${COMPLEX_SHAPES:-4096x65536x4096}") ;;
        *) shapes=(--sizes "$sizes") ;;
    esac
    (cd "$tree" && timeout $((budget + 120)) python3 -m ozaki bench "${shapes[@]}" --engines auto,int8 \
        --accuracy fp64 --phi 0.5 --reps 5 --budget "$budget" --out "$out/$run" > "$out/$run.log" 2>&1)
    echo "== $run ($tree)" | tee -a "$out/summary.txt"
    awk '/ method /{p=1} p && !/^wrote/' "$out/$run.log" | cut -c1-150 | tee -a "$out/summary.txt"
done
