"""`kernelcast calibrate-hw`: measure what this GPU really does, for roofline floors.

Datasheet peaks overstate what kernels reach (H100: 3.35 TB/s on paper, ~3.0 TB/s
copied). A device-to-device copy and a large bf16 matmul, timed with CUDA events,
give the two rates forecasts and floors should use; they are stored per GPU name.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from kernelcast import paths
from kernelcast.paths import install_command

COPY_BYTES = 2 * 2**30  # large enough to leave every cache behind
MATMUL_SIZE = 8192
REPEATS = 10


def measured_path() -> Path:
    return paths.state_home() / "hardware.json"


def load_measured() -> dict[str, Any]:
    try:
        data = json.loads(measured_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _time_ms(torch: Any, run: Any) -> float:
    """Median of REPEATS timed calls after one warm-up, with CUDA events."""
    run()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def calibrate(gpu_index: int = 0) -> dict[str, Any]:
    """Measure copy bandwidth (bytes read + written) and bf16 matmul rate; store and return them."""
    try:
        import torch
    except ImportError as error:
        raise RuntimeError(f"calibrate-hw needs torch with CUDA: {install_command('gpu')}") from error
    if not torch.cuda.is_available():
        raise RuntimeError("calibrate-hw needs a CUDA GPU; none is visible to torch")
    device = torch.device("cuda", gpu_index)
    source = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=device).uniform_()
    target = torch.empty_like(source)
    copy_ms = _time_ms(torch, lambda: target.copy_(source))
    a = torch.randn(MATMUL_SIZE, MATMUL_SIZE, dtype=torch.bfloat16, device=device)
    b = torch.randn(MATMUL_SIZE, MATMUL_SIZE, dtype=torch.bfloat16, device=device)
    matmul_ms = _time_ms(torch, lambda: a @ b)
    name = torch.cuda.get_device_name(device)
    result = {
        "name": name,
        "copy_gbs": round(2 * COPY_BYTES / (copy_ms / 1e3) / 1e9, 1),
        "bf16_tflops": round(2 * MATMUL_SIZE**3 / (matmul_ms / 1e3) / 1e12, 1),
        "copy_ms": round(copy_ms, 4),
        "matmul_ms": round(matmul_ms, 4),
        "torch": torch.__version__,
        "at": time.time(),
    }
    stored = load_measured()
    stored[name] = result
    measured_path().write_text(json.dumps(stored, indent=2))
    return result
