#!/usr/bin/env bash
# Training steps on a GPU host with torch but no network and a time limit per call (the shipped
# weights' folds and weights came from such calls; workshop/training/README.md says how long each takes).
#
# Before sending the tree, here:
#   pip wheel --no-deps -w .whl .       # kernelcast itself, rebuilt after every change
#   pip download --no-deps --only-binary=:all: --python-version 3.12 ... -d .whl lightgbm pygls ...
#   cp ../shared/data/cuda-l1/*.jsonl .cudal1/
# Then, one call each, on one machine (its /tmp keeps the pairs and the feature cache between calls):
#   bash workshop/training/gpu_host.sh featurize
#   bash workshop/training/gpu_host.sh folds SEED [TRAIN ARGS]      # OUT/foldsSEED.log, OUT/hoSEED_* (cat them)
#   bash workshop/training/gpu_host.sh weights --held-out FILE      # OUT/embedded.npz
#   bash workshop/training/gpu_host.sh gpu-tests                    # OUT/gpu.log
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"

stamp=$(cat .whl/*.whl | md5sum)
if [ "$(cat /tmp/site/.stamp 2>/dev/null)" != "$stamp" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    echo "$stamp" > /tmp/site/.stamp
fi
# PYTHONSAFEPATH: the tree's kernelcast/ folder must not shadow the installed package (its subpackages live beside it).
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
train=(python3 -m workshop.training.train --pairs /tmp/pairs.jsonl --cuda-l1 h100,a100,l40,h20,3090
       --cuda-l1-dir .cudal1 --feature-cache /tmp/fc --device cuda --jobs "$(nproc)")
# The host ends a call at its limit: stop first, so that the log still comes back.
limit=${LIMIT_S:-580}

step=${1:?featurize, folds SEED, weights --held-out FILE or gpu-tests}
shift
[ "$step" = gpu-tests ] || [ -s /tmp/pairs.jsonl ] || python3 -m workshop corpus pairs --out /tmp/pairs.jsonl || exit 1
started=$(date +%s)
case $step in
    featurize)
        "${train[@]}" --featurize-only 2>&1 | tee "$OUT/featurize.log" ;;
    folds)
        seed=${1:?the seed of the split}
        shift
        rm -rf "/tmp/r$seed"  # an earlier call's file must not come back as this one's
        timeout "$limit" "${train[@]}" --seed "$seed" --folds-only --report "/tmp/r$seed" "$@" 2>&1 | tee "$OUT/folds$seed.log"
        # held_out.npz is ~20 MB, over what one returned file may be: in 15 MB pieces.
        [ -s "/tmp/r$seed/held_out.npz" ] && split -b 15M "/tmp/r$seed/held_out.npz" "$OUT/ho${seed}_" ;;
    weights)
        timeout "$limit" "${train[@]}" --seed 0 --no-eval --out "$OUT/embedded.npz" "$@" 2>&1 | tee "$OUT/weights.log" ;;
    gpu-tests)
        python3 -m pytest -m gpu -rs -q -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu.log" ;;
    *)
        echo "unknown step $step: featurize, folds SEED, weights --held-out FILE or gpu-tests" >&2
        exit 2 ;;
esac
status=$?
echo "$step: $(( $(date +%s) - started )) s, exit $status"
exit $status
