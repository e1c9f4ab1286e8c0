"""Learning from the user's measurements, end to end with real processes.

A real service learns through POST /v1/learn and forecasts shift; the real language
server picks the new calibration up (a new cache key, never the stale cached forecast)
and says so in the hover; `kernelcast reset-learning` undoes all of it. Measuring needs
a GPU, so on CPU the tests post the measured pairs themselves; the GPU test measures.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from lsp_support import EXAMPLES, isolated_env, stop_service
from lsprotocol import types
from test_lsp_end_to_end import Session, _start
from test_service import _request

from kernelcast.server.service_client import BACKEND_INFO_TTL_S
from kernelcast.wire import Forecast, read_or_create_token, read_state

SETTINGS = {"targetGpu": "H100-SXM", "compilerFacts": {"enable": False}}
LEARNT = "your measurements on this GPU"


class Service:
    """The user's forecaster service as the client finds it: state and token under `home`."""

    def __init__(self, home: Path) -> None:
        state = read_state(home / "service")
        assert state is not None, "no running service"
        self.url = state["url"]
        self.headers = {"Authorization": f"Bearer {read_or_create_token(home / 'service')}"}

    def post(self, path: str, body: Any) -> httpx.Response:
        return httpx.post(f"{self.url}{path}", json=body, headers=self.headers, timeout=30)

    def learn(self, speedup: Any, reference: int = 0) -> httpx.Response:
        """A pair measured against the `reference`-th of several references (copies of one, told apart)."""
        request = _request()
        if reference:
            request.reference.code += f"\n// reference {reference}\n"
        return self.post("/v1/learn", {"request": request.to_json(), "measured_speedup": speedup})

    def forecast(self) -> Forecast:
        answer = self.post("/v1/forecast", _request().to_json())
        assert answer.status_code == 200, answer.text
        return Forecast.from_json(answer.json())

    def calibration_version(self) -> str:
        backends = httpx.get(f"{self.url}/v1/backends", headers=self.headers).json()["backends"]
        return backends[0]["calibration_version"]


def _reset_learning(home: Path) -> str:
    completed = subprocess.run(
        [sys.executable, "-m", "kernelcast", "reset-learning"], capture_output=True, text=True, timeout=60, env=isolated_env(home)
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[Service, Path]]:
    home = tmp_path / "home"
    process = subprocess.Popen([sys.executable, "-m", "kernelcast", "serve"], env=isolated_env(home))
    deadline = time.monotonic() + 30
    while (read_state(home / "service") or {}).get("pid") != process.pid:
        assert time.monotonic() < deadline and process.poll() is None, "the service did not start"
        time.sleep(0.05)
    yield Service(home), home
    process.terminate()
    process.wait(timeout=10)


def test_learning_shifts_forecasts_and_reset_learning_undoes_it(service: tuple[Service, Path]) -> None:
    served, home = service
    before, version = served.forecast(), served.calibration_version()
    assert before.provenance["local_learning"] is False

    # Measured 8× the forecast against five references: forecasts on this GPU class were too low.
    learnt = [served.learn(8 * before.speedup, reference).json() for reference in range(5)]
    assert [summary["n"] for summary in learnt] == [1, 2, 3, 4, 5]
    assert 0 < learnt[0]["bias_log2"] < learnt[1]["bias_log2"] < learnt[2]["bias_log2"] < learnt[4]["bias_log2"]
    assert learnt[-1]["backend"] == "embedded" and learnt[-1]["gpu_class"] == "sm9x"
    assert learnt[-1]["direction_temperature"] is None

    after = served.forecast()
    assert after.provenance["local_learning"] is True and after.provenance["local_measurements"] == 5
    assert after.provenance["reference_measurements"] == 1  # the first was against this very reference
    assert after.speedup > before.speedup * 1.2
    assert served.calibration_version() not in (version, learnt[0]["calibration_version"])
    assert served.calibration_version() == learnt[-1]["calibration_version"]
    assert (home / "local_observations.json").exists() and (home / "local_learning.json").exists()

    output = _reset_learning(home)
    assert "forgot 5 measurements of embedded/sm9x" in output and "local_learning.json" in output
    assert not (home / "local_observations.json").exists() and not (home / "local_learning.json").exists()
    # The running service was not told: it notices the missing file by itself.
    again = served.forecast()
    assert again.probabilities == before.probabilities and again.provenance["local_learning"] is False
    assert served.calibration_version() == version
    first = served.learn(8.0).json()
    assert first["n"] == 1, "the measurements were forgotten, not only the fit"
    # The same pair measured again replaces its measurement rather than counting twice.
    remeasured = served.learn(2.0).json()
    assert remeasured["n"] == 1 and remeasured["bias_log2"] < first["bias_log2"]
    _reset_learning(home)
    assert "nothing to forget" in _reset_learning(home)


def test_bad_learn_requests_get_clear_answers(service: tuple[Service, Path]) -> None:
    served, _ = service
    assert httpx.post(f"{served.url}/v1/learn", json={}).status_code == 401
    cases: list[tuple[Any, str]] = [
        ({"request": _request().to_json()}, "measured_speedup"),
        ({"measured_speedup": 2.0}, "forecast request is a JSON object"),
        ({"request": _request().to_json(), "measured_speedup": -1.0}, "positive"),
        ({"request": _request().to_json(), "measured_speedup": "fast"}, "must be a number"),
        ({"request": _request().to_json(), "measured_speedup": 2.0, "backend": "oracle"}, "not served"),
        ([1, 2], "measured_speedup"),
    ]
    for body, words in cases:
        answer = served.post("/v1/learn", body)
        assert answer.status_code == 400 and words in answer.json()["error"], (body, answer.text)
    garbage = httpx.post(f"{served.url}/v1/learn", content=b"{not json", headers=served.headers)
    assert garbage.status_code == 400 and "bad learn request" in garbage.json()["error"]
    assert served.forecast().provenance["local_learning"] is False, "no bad request was learnt from"


async def _hover(session: Session, uri: str, line: int) -> str:
    hover = await session.client.text_document_hover_async(
        types.HoverParams(types.TextDocumentIdentifier(uri=uri), types.Position(line=line, character=0))
    )
    return hover.contents.value if hover is not None else ""


def _signature_line(diagnostics: list[types.Diagnostic]) -> int:
    return next(d for d in diagnostics if d.code in ("forecast", "uncertain", "measured")).range.start.line


async def test_the_editor_forecasts_again_after_learning_and_after_reset(tmp_path: Path) -> None:
    workspace, home = tmp_path / "workspace", tmp_path / "home"
    shutil.copytree(EXAMPLES, workspace)
    client, recorder = await _start(workspace, home, SETTINGS)
    session = Session(client, recorder, workspace)
    try:
        uri = session.open("matmul_tiled.cu")
        line = _signature_line(await session.diagnostics_for(uri))
        assert LEARNT not in await _hover(session, uri, line)

        served = Service(home)  # the one the language server started
        for reference in range(3):
            assert served.learn(8.0, reference).status_code == 200
        # Same kernel code (a comment at the end of the file): only the calibration changed.
        await asyncio.sleep(BACKEND_INFO_TTL_S + 0.2)
        text = (workspace / "matmul_tiled.cu").read_text()
        session.change(uri, 2, text + "\n// edited\n")
        await session.diagnostics_for(uri, version=2)
        assert f"Calibrated with 3 of {LEARNT}" in await _hover(session, uri, line)

        assert "forgot 3 measurements" in _reset_learning(home)
        await asyncio.sleep(BACKEND_INFO_TTL_S + 0.2)
        session.change(uri, 3, text)
        await session.diagnostics_for(uri, version=3)
        assert LEARNT not in await _hover(session, uri, line)
    finally:
        await client.shutdown_session()
        await client.stop()
        stop_service(home)


@pytest.mark.gpu
async def test_a_measurement_from_the_editor_calibrates_its_forecasts(tmp_path: Path) -> None:
    workspace, home = tmp_path / "workspace", tmp_path / "home"
    shutil.copytree(EXAMPLES, workspace)
    client, recorder = await _start(workspace, home)  # forecasts for this machine's GPU
    session = Session(client, recorder, workspace)
    try:
        uri = session.open("matmul_tiled.cu")
        line = _signature_line(await session.diagnostics_for(uri))
        answer = await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="kernelcast.measure", arguments=[{"uri": uri, "position": {"line": line, "character": 0}}])
        )
        assert answer["ok"], answer
        deadline = asyncio.get_running_loop().time() + 60
        # The measured kernel's reference now has a miss of its own: the hover says it was used.
        while f"Calibrated with 1 of {LEARNT}, 1 of them against this reference" not in (hover := await _hover(session, uri, line)):
            assert asyncio.get_running_loop().time() < deadline, hover
            await asyncio.sleep(0.5)
        assert "Measured: reference" in hover
        assert "forgot 1 measurement of embedded/sm9x" in _reset_learning(home)
    finally:
        await client.shutdown_session()
        await client.stop()
        stop_service(home)
