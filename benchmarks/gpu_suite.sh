#!/usr/bin/env bash
# The test suite on a CUDA machine, from the repository root: the device set (`pytest -m gpu`:
# every kernel compiled for the device and checked bit for bit against its reference, and the
# product on the device) timed on its own, then the rest of the suite; the two together are
# the whole suite.  Each runs on 8 processes where pytest-xdist is installed (compiling the
# kernels is most of the device set's time).  Logs go to $1 (default $OUT, else ./gpu-suite).
# Wheels in .whl/ (OR-Tools for the search tests, where the machine lacks it) are installed
# to /tmp/site first.
#
#   benchmarks/gpu_suite.sh [LOG_DIR]
set -uo pipefail
out=${1:-${OUT:-gpu-suite}}
mkdir -p "$out"
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
{
    date -u +"%Y-%m-%d %H:%M UTC"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
    python3 -c 'import sys, numpy, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__,
        "triton", triton.__version__, "numpy", numpy.__version__)'
} | tee "$out/versions.txt"

run() {  # name, pytest arguments...
    local name=$1 start status
    shift
    start=$(date +%s)
    python3 -m pytest -q -p no:cacheprovider "$@" > "$out/$name.log" 2>&1
    status=$?
    echo "$name: $(tail -n 1 "$out/$name.log") [$(($(date +%s) - start)) s, exit $status]" | tee -a "$out/summary.txt"
}

parallel=()
if python3 -c "import xdist" 2> /dev/null; then
    parallel=(-n 8)
fi
run gpu-set -m gpu "${parallel[@]}" --durations=10
run rest -m "not gpu" "${parallel[@]}"
grep -E "^(FAILED|ERROR)" "$out"/*.log | head -40
cat "$out/summary.txt"
