#!/usr/bin/env bash
# The KernelBench sample (benchmarks/measure_sample.py) and the GPU tests, on a GPU host with torch
# but no network, inside one call's time limit. Run from a copy of the tree that also holds:
#   .whl/                 wheels of kernelcast's pure-Python dependencies (pygls, lsprotocol, diskcache,
#                         httpx, starlette, uvicorn, pytest, pytest-asyncio, pytest-lsp, ...)
#   sample/NN/{cand.py,reference.py} and measure-sample.json (the manifest)
# Usage: bash benchmarks/measure_sample_device.sh [ENTRY NUMBERS...]   (default: every entry)
# Writes $OUT/measure_sample.{md,jsonl}, $OUT/sample.log, $OUT/gpu.log.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
limit=${LIMIT_S:-560}        # the host ends the call at its limit: stop before, so the logs come back
sample_budget=${SAMPLE_BUDGET_S:-300}
started=$(date +%s)
left() { echo $(( limit - ($(date +%s) - started) )); }

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
# kernelcast laid out as pyproject's package-dir maps it (the folders under kernelcast/, and the workshop).
mkdir -p /tmp/site/kernelcast && cp -r kernelcast/. /tmp/site/kernelcast/ && cp -r workshop /tmp/site/ || exit 1
for part in server kernels_runtime models; do cp -r "$part" "/tmp/site/kernelcast/$part" || exit 1; done
# PYTHONSAFEPATH and pythonpath= : the tree's kernelcast/ folder must not shadow the laid-out package.
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"

# The measure tests first (they check what the sample relies on), then the sample, then the other GPU tests.
measure_tests=(tests/test_measure_kernelbench_gpu.py tests/test_measure_gpu.py)
run_tests() {  # run_tests MAX_SECONDS PYTEST ARGS...
    local most=$(( $(left) - 10 < $1 ? $(left) - 10 : $1 ))
    shift
    [ "$most" -gt 50 ] || { echo "no time left for pytest $*" | tee -a "$OUT/gpu.log"; return; }
    timeout "$most" python3 -m pytest -o pythonpath= -m gpu -rs -q -p no:cacheprovider "$@" 2>&1 | tee -a "$OUT/gpu.log" | tail -25
}
run_tests "${MEASURE_TESTS_S:-150}" "${measure_tests[@]}"
budget=$(( $(left) - 100 < sample_budget ? $(left) - 100 : sample_budget ))
python3 benchmarks/measure_sample.py sample measure-sample.json "$OUT" --budget-s "$budget" --per-file-s 90 \
    --commit "$(cat COMMIT 2>/dev/null || echo '?')" ${*:+--only $*} 2>&1 | tee "$OUT/sample.log" | grep -E '^[0-9]{2} |measured,'
run_tests "$limit" tests "${measure_tests[@]/#/--ignore=}"
cp "$(python3 -c 'from kernelcast import paths; print(paths.state_home())')/workers/gpu0.log" "$OUT/worker.log" 2>/dev/null
echo "done in $(( $(date +%s) - started )) s"
