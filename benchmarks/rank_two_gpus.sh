#!/usr/bin/env bash
# kernelcast rank over two GPUs: 45 real variants of a vector add (one with an illegal address)
# ranked with --cluster auto (a local Dask cluster, one worker per GPU), then on one GPU; prints
# the per-GPU counts and whether both runs found the same best.
#
#   benchmarks/rank_two_gpus.sh          on a machine with two NVIDIA GPUs
#   benchmarks/rank_two_gpus.sh --dry    anywhere: everything up to the first measurement
#
# PYTHON (default: python) must have kernelcast[gpu,cluster] (and cupy for .cu kernels);
# WORK (default: a fresh temporary folder) keeps the variants and the JSON of both runs.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
WORK=${WORK:-$(mktemp -d -t kernelcast-rank-XXXXXX)}
DRY=0
[ "${1:-}" = "--dry" ] && DRY=1

"$PYTHON" benchmarks/rank_variants.py "$WORK"
RANK=("$PYTHON" -m kernelcast rank "$WORK/variants" --reference "$WORK/reference.cu" --allow-references-outside-workspace --no-learn --json)

if [ "$DRY" = 1 ]; then
    "${RANK[@]}" --forecast-only > "$WORK/forecast.json"
    # Two pretend GPUs: the cluster starts, takes the first round, and its workers find no GPU.
    status=0
    CUDA_VISIBLE_DEVICES=0,1 "${RANK[@]}" --cluster auto > "$WORK/cluster.json" || status=$?
    "$PYTHON" - "$WORK" "$status" <<'PY'
import json, sys
from pathlib import Path
work, status = Path(sys.argv[1]), int(sys.argv[2])
forecast = json.loads((work / "forecast.json").read_text())
cluster = json.loads((work / "cluster.json").read_text())
assert forecast["ranked"] >= 40, f"only {forecast['ranked']} variants ranked: {forecast['skipped']}"
print(f"dry: {forecast['ranked']} variants forecast; best forecast {forecast['variants'][0]['variant']}")
print(f"dry: --cluster auto ran its first round and stopped (exit {status}): {cluster['stopped']}")
assert status == 1 and "no NVIDIA GPU" in cluster["stopped"], cluster["stopped"]
PY
    echo "dry run passed; files in $WORK"
    exit 0
fi

gpus=$(nvidia-smi -L | grep -c '^GPU' || true)
if [ "$gpus" -lt 2 ]; then
    echo "this machine has $gpus GPU(s); the two-GPU run needs two (try --dry)" >&2
    exit 1
fi
start=$(date +%s)
CUDA_VISIBLE_DEVICES=0,1 "${RANK[@]}" --cluster auto --report "$WORK/two" > "$WORK/two.json"
middle=$(date +%s)
CUDA_VISIBLE_DEVICES=0 "${RANK[@]}" --report "$WORK/one" > "$WORK/one.json"
end=$(date +%s)
"$PYTHON" - "$WORK" $((middle - start)) $((end - middle)) <<'PY'
import json, sys
from pathlib import Path
work, two_s, one_s = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
runs = {name: json.loads((work / f"{name}.json").read_text()) for name in ("two", "one")}
for name, run in runs.items():
    best = run["best"]
    print(f"{name} GPU(s): {run['measurements']} of {run['ranked']} measured in {two_s if name == 'two' else one_s} s wall, "
          f"{run['gpu_seconds']:.1f} GPU-s (all: ~{run['gpu_seconds_to_measure_all']} GPU-s); stopped: {run['stopped']}")
    print(f"  per GPU: {run['per_gpu']}")
    print(f"  best: {best['variant']} {best['speedup']:.3f}x (CI {best['ci95'][0]:.3f}-{best['ci95'][1]:.3f}); "
          f"as fast within noise: {[row['variant'] for row in best['tied']]}")
    for row in run["variants"]:
        if row["status"] not in ("measured", "not measured"):
            print(f"  {row['status']}: {row['variant']}: {row['why']}")
two, one = runs["two"]["best"], runs["one"]["best"]
same = two["variant"] == one["variant"]
tied = two["variant"] in {row["variant"] for row in one["tied"]} or one["variant"] in {row["variant"] for row in two["tied"]}
print("same best on both" if same else f"different bests ({'one run names the best of the other as fast within noise: a tie' if tied else 'not tied'})")
assert len(runs["two"]["per_gpu"]) == 2, "the cluster run did not use both GPUs"
PY
echo "files in $WORK"
