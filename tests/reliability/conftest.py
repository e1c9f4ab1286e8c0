"""Fixtures of the reliability suite: a workspace of the examples, a private kernelcast home,
and real servers over stdio that are stopped (with their forecaster service) afterwards."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from lsp_support import EXAMPLES, FAST, Start, StdioLsp, stop_service


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    shutil.copytree(EXAMPLES, root)
    return root


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    yield home
    stop_service(home)


@pytest.fixture
async def start(workspace: Path, home: Path) -> AsyncIterator[Start]:
    """`await start(settings)`: one more server on the workspace, sharing the home."""
    started: list[StdioLsp] = []

    async def start_server(settings: dict | None = None, root: Path | None = None) -> StdioLsp:
        server = await StdioLsp(home, root or workspace, FAST if settings is None else settings).start()
        started.append(server)
        return server

    yield start_server
    for server in started:
        await server.stop()
