"""Where kernelcast keeps per-user state: one private folder, 0700.

Both the LSP server and the forecaster service read these, so editor windows of
one user share a cache and a service while other users see neither.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_HOME = "KERNELCAST_HOME"


def state_home() -> Path:
    """$KERNELCAST_HOME, else $XDG_CACHE_HOME/kernelcast, else ~/.cache/kernelcast."""
    configured = os.environ.get(ENV_HOME)
    if configured:
        base = Path(configured)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg) if xdg else Path.home() / ".cache") / "kernelcast"
    return private_dir(base)


def private_dir(path: Path) -> Path:
    """Create `path` readable by its owner alone (and tighten it if it exists)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


def service_dir() -> Path:
    return private_dir(state_home() / "service")


def cache_dir(configured: str | None = None) -> Path:
    return private_dir(cache_path(configured))


def cache_path(configured: str | None = None) -> Path:
    """Where the cache lives, not yet created: the server's cache creates it or says why it cannot."""
    return Path(configured).expanduser() if configured else state_home() / "cache"


def install_command(extra: str) -> str:
    """The pip line that adds an extra (`gpu`, `triton`, `llama`…). kernelcast is not on PyPI
    yet, so it names this checkout when kernelcast runs from one (an editable install)."""
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file():
        return f"pip install -e '{checkout}[{extra}]'"
    return f"pip install -e '/path/to/kernelcast[{extra}]' (from a clone of the kernelcast repository)"
