"""The VS Code extension's own suite (node --test + the packaged .vsix check), run from pytest so CI covers it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

EXTENSION = Path(__file__).resolve().parents[1] / "vscode-extension"


@pytest.mark.skipif(
    shutil.which("npm") is None or shutil.which("node") is None, reason="node and npm are needed for the VS Code extension's tests"
)
def test_vscode_extension_suite_passes() -> None:
    completed = subprocess.run(["bash", str(EXTENSION / "scripts" / "ci.sh")], cwd=EXTENSION, capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
