#!/usr/bin/env bash
# Measure a packed batch of real-world kernels on a GPU host (torch, no network), one call at a time.
# Here, before the call:
#   python -m workshop realworld pack .dev/rw/BATCH --limit N [--skip earlier/results.jsonl ...]
#   .dev/rw/whl/: the device Python's wheels of kernelcast's pure-Python dependencies
# Then, on the host (carry .dev/rw):
#   bash workshop/realworld/gpu_host.sh .dev/rw/BATCH [DEADLINE_S]     # OUT/results.jsonl, OUT/run.log
# The run folder and the build cache live in the host's /tmp, so a second call on the same warm
# machine resumes the batch and finds its load_inline builds done; on a fresh machine the
# batch's own results.jsonl (copied back from OUT after each call) says what is measured.
#
# Two batches at once, one GPU each (two build-bound KernelBench batches keep both GPUs busy; never
# a TritonBench or library (FlagGems, Liger, helion) batch beside another: their kernels of a few
# microseconds are timed at what the host has to spare, README.md "Timing Triton alone"): give each
# its GPU, its own KERNELCAST_HOME (workers, logs, build cache) and OUT, and split the cores between
# their builders (BUILD_WORKERS; a load_inline build compiles its C++ and CUDA sources side by side,
# so builders summing to about half the cores fill the machine), e.g.
#   CUDA_VISIBLE_DEVICES=0 KERNELCAST_HOME=/tmp/rw0 BUILD_WORKERS=12 OUT=$OUT/b1 bash ... .dev/rw/b1 500 &
#   CUDA_VISIBLE_DEVICES=1 KERNELCAST_HOME=/tmp/rw1 BUILD_WORKERS=12 OUT=$OUT/b2 bash ... .dev/rw/b2 500 &
#   wait
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
batch=${1:?the batch folder}
deadline=${2:-500}

# The shared install is made once under a lock: a second invocation finds it done.
exec 9>/tmp/site.lock && flock 9
stamp=$(cat .dev/rw/whl/*.whl | md5sum)
if [ "$(cat /tmp/site/.stamp 2>/dev/null)" != "$stamp" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .dev/rw/whl/*.whl || exit 1
    echo "$stamp" > /tmp/site/.stamp
fi
# kernelcast laid out as pyproject maps it, and the workshop beside it; copied again when the tree changed.
tree=$(find kernelcast server kernels_runtime models workshop -type f -exec md5sum {} + | sort | md5sum)
if [ "$(cat /tmp/site/.tree 2>/dev/null)" != "$tree" ]; then
    rm -rf /tmp/site/kernelcast /tmp/site/workshop && mkdir -p /tmp/site/kernelcast && cp -r kernelcast/. /tmp/site/kernelcast/ && cp -r workshop /tmp/site/ || exit 1
    for part in server kernels_runtime models; do cp -r "$part" "/tmp/site/kernelcast/$part" || exit 1; done
    echo "$tree" > /tmp/site/.tree
fi
flock -u 9
# PYTHONSAFEPATH: the tree's kernelcast/ folder must not shadow the laid-out package.
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1 KERNELCAST_HOME=${KERNELCAST_HOME:-/tmp/rwstate}
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
# GPU_TESTS_S=N: first the project's GPU tests, for at most N seconds (.dev/rw/whl then also holds
# pytest, pytest-asyncio, pytest-lsp, pygls, lsprotocol, diskcache, httpx and their dependencies);
# GPU_TESTS="tests/a.py tests/b.py" runs those files' only (default: all of tests/).
if [ "${GPU_TESTS_S:-0}" -gt 0 ]; then
    mkdir -p /tmp/site/bin && printf '#!/bin/sh\nexec python3 -m kernelcast "$@"\n' > /tmp/site/bin/kernelcast && chmod +x /tmp/site/bin/kernelcast
    started=$(date +%s)
    # The tree on the path after the laid-out package: tests import benchmarks/ and tests/ helpers from it.
    PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH timeout "$GPU_TESTS_S" python3 -m pytest -o pythonpath= -m gpu -rs -q -p no:cacheprovider ${GPU_TESTS:-tests} > "$OUT/gpu-tests.log" 2>&1
    echo "gpu tests: exit $? in $(( $(date +%s) - started )) s"; tail -15 "$OUT/gpu-tests.log"
    deadline=$(( deadline - ($(date +%s) - started) ))
fi
run=/tmp/rwrun/$(basename "$batch")
# Results of earlier calls (on other machines) travel with the batch: only what is missing is measured.
[ -s "$run/results.jsonl" ] || { mkdir -p "$run" && cp "$batch/results.jsonl" "$run/" 2>/dev/null; }
python3 -m workshop realworld run "$batch" --out "$run" --deadline-s "$deadline" --build-workers "${BUILD_WORKERS:-0}" > "$OUT/run.log" 2>&1
echo "exit $?"
grep -vE '^\[' "$OUT/run.log" | tail -20
grep -E '^\[' "$OUT/run.log" | tail -5
cp "$run/results.jsonl" "$OUT/" 2>/dev/null
tail -c 20000 "$KERNELCAST_HOME/workers/gpu0.log" > "$OUT/worker0.log" 2>/dev/null
