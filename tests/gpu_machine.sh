#!/usr/bin/env bash
# The GPU tests (marker `gpu`; skipped where no NVIDIA GPU answers) on a GPU machine that cannot
# reach PyPI but has torch, triton, cupy and pytest, as lent GPU machines do.
#
#   tests/gpu_machine.sh download [PYTHON_VERSION]   here, with PyPI: wheels into .whl/ (default 3.12)
#   tests/gpu_machine.sh run [PYTEST_ARGS...]         there, in a copy of this checkout with .whl/
#
# `download` fetches kernelcast's own dependencies and the suite's pytest plugins for the GPU
# machine's Python (about 25 MB); `run` installs kernelcast from the checkout with them, beside
# what the machine has, and runs `pytest -m gpu` (all of them by default: about 6 minutes on an H200).
set -euo pipefail
cd "$(dirname "$0")/.."

plugins() {
    # The pytest plugins the suite needs, as pyproject's test extra pins them.
    python3 -c "
import re, tomllib
extra = tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['test']
print(' '.join(r for r in extra if re.match(r'(pytest-asyncio|pytest-lsp)\b', r)))"
}

case "${1:-}" in
download)
    version="${2:-3.12}"
    # shellcheck disable=SC2046
    python3 -m pip download --quiet --dest .whl --only-binary=:all: --implementation cp --python-version "$version" \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
        . $(plugins)
    echo "kernelcast: $(ls .whl | wc -l) wheels for Python $version in .whl/ ($(du -sh .whl | cut -f1))"
    ;;
run)
    shift
    if [ ! -d .whl ]; then
        echo "kernelcast: no .whl/ here: run 'tests/gpu_machine.sh download' on a machine with PyPI and copy it over" >&2
        exit 2
    fi
    # shellcheck disable=SC2046
    python3 -m pip install --quiet --no-index --find-links .whl --no-build-isolation -e . $(plugins)
    exec python3 -m pytest -m gpu -p no:cacheprovider -rs "$@"
    ;;
*)
    echo "usage: tests/gpu_machine.sh download [PYTHON_VERSION] | run [PYTEST_ARGS...]" >&2
    exit 2
    ;;
esac
