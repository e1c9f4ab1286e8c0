"""Helpers for end-to-end tests that start real kernelcast processes."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SERVER_COMMAND = [sys.executable, "-m", "kernelcast", "lsp"]


def isolated_env(home: Path) -> dict[str, str]:
    """An environment whose kernelcast state (cache, service, token) lives under `home`."""
    env = dict(os.environ)
    env["KERNELCAST_HOME"] = str(home)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def stop_service(home: Path) -> None:
    """Stop the forecaster service a test's server started (it outlives the server by design)."""
    state_file = home / "service" / "service.json"
    try:
        pid = json.loads(state_file.read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
