"""Shared test setup: GPU tests run only where a CUDA GPU answers; Python's bytecode is cached."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

# Where PYTHONDONTWRITEBYTECODE is set (as on the development machines), every process the
# suite starts (editors' servers, services, workers, the CLI: hundreds) would compile kernelcast
# from source again, and each pytest worker would rewrite every test module's asserts again. The
# suite writes the caches instead, into the __pycache__ folders git ignores: each module is
# compiled once. The product's own processes are not changed by this.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def _gpu_present() -> tuple[bool, str]:
    if shutil.which("nvidia-smi") is None:
        return False, "no NVIDIA GPU here (nvidia-smi not found); run on a GPU machine"
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, f"nvidia-smi failed: {error}"
    if listed.returncode != 0 or "GPU" not in listed.stdout:
        return False, "nvidia-smi lists no GPU"
    return True, ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    present, reason = _gpu_present()
    if present:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in gpu_items:
        item.add_marker(skip)
