"""Shared test setup: GPU tests run only where a CUDA GPU answers."""

from __future__ import annotations

import shutil
import subprocess

import pytest


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
