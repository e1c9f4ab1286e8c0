"""`kernelcast forecast --batch` and `kernelcast eval` read pairs as the editor reads files:
the same kernels, launches, sizes and compiler facts, so the same forecast."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import diskcache
import pytest
from lsp_support import EXAMPLES, KERNELCAST, SERVER_COMMAND, initialize_in_workspace, isolated_env, stop_service
from lsprotocol import types
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

from kernelcast.batch import FACT_PROBLEMS_SHOWN, report_fact_problems
from kernelcast.evaluation import evaluate, mean_over, metrics
from kernelcast.progress import Progress
from kernelcast.wire import BIN_WORDS, Forecast

PAIRS = Path(__file__).parent / "data" / "pairs_small.jsonl"
GPU = "H100-SXM"


def _kernelcast(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KERNELCAST, *args], capture_output=True, text=True, timeout=300, env=isolated_env(home))


def _batch(tmp_path: Path, home: Path, lines: list[Any], *flags: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    batch, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    batch.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    completed = _kernelcast(home, "forecast", "--batch", str(batch), "--out", str(out), *flags)
    return completed, [json.loads(text) for text in out.read_text().splitlines()]


def _side(name: str, kernel: str | None = None, language: str = "cuda") -> dict[str, Any]:
    side = {"code": (EXAMPLES / name).read_text(), "language": language}
    return {**side, "name": kernel} if kernel else side


# --- the editor and the batch give the same forecast -----------------------------------------


async def _editor_hover(root: Path, home: Path, name: str) -> tuple[str, str]:
    """The hover and the diagnostic the real server shows for `name` once its compiler facts are in."""
    publishes: list[types.PublishDiagnosticsParams] = []

    def factory() -> LanguageClient:
        client = LanguageClient(converter_factory=default_converter)
        register_lsp_features(client, {m: f for m, f in DEFAULT_CLIENT_FEATURES.items() if m != types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS})

        @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_diagnostics(params: types.PublishDiagnosticsParams) -> None:
            publishes.append(params)

        @client.feature(types.WORKSPACE_INLAY_HINT_REFRESH)
        def on_refresh(params: None) -> None:
            """Hints are not read here; the hover and the diagnostic carry the forecast."""

        @client.feature("kernelcast/status")
        def on_status(params: Any) -> None:
            """The status bar's; not read here."""

        return client

    settings = {"kernelcast": {"debounceMs": 0, "targetGpu": GPU}}
    client = await ClientServerConfig(server_command=SERVER_COMMAND, server_env=isolated_env(home), client_factory=factory).start()
    try:
        await initialize_in_workspace(client, root, settings)
        path = root / name
        uri, text = path.as_uri(), path.read_text()
        client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "cuda", 1, text)))
        # An empty cache: the first forecast comes before the compiles, the second with their facts.
        deadline = asyncio.get_running_loop().time() + 240
        while len([p for p in publishes if p.uri == uri]) < 2:
            assert asyncio.get_running_loop().time() < deadline, f"no forecast with compiler facts: {publishes}"
            await asyncio.sleep(0.05)
        (diagnostic,) = [d for d in publishes[-1].diagnostics if d.code in ("forecast", "uncertain")]
        line = next(number for number, content in enumerate(text.splitlines()) if "__global__" in content)
        hover = await client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(uri), types.Position(line=line, character=17))
        )
        assert hover is not None
        return hover.contents.value, diagnostic.message
    finally:
        await client.shutdown_session()
        await client.stop()
        stop_service(home)


def _as_printed(forecast: Forecast) -> dict[str, Any]:
    """A forecast to the precision the hover prints it."""
    lo, hi = forecast.interval
    return {
        "speedup": f"{forecast.speedup:.2f}",
        "interval": f"{lo:.2f}–{hi:.2f}",
        "direction": forecast.direction,
        "confidence": f"{forecast.confidence:.2f}",
        "percent": [f"{p:.0%}" for p in forecast.probabilities],
    }


def _read_hover(markdown: str) -> dict[str, Any]:
    point = re.search(r"Point estimate ([\d.]+)× · 80% interval ([\d.]+–[\d.]+)× · P\((\w+)\) = ([\d.]+)", markdown)
    assert point is not None, markdown
    bars = markdown.split("```text\n", 1)[1].split("\n```", 1)[0].splitlines()
    assert [bar.split(" ")[0] for bar in (b.strip() for b in bars)] == [words.split(" ")[0] for words in BIN_WORDS]
    return {
        "speedup": point[1],
        "interval": point[2],
        "direction": point[3],
        "confidence": point[4],
        "percent": [bar.split()[-1] for bar in bars],
    }


async def test_the_editor_and_the_batch_give_the_same_forecast_with_compiler_facts(tmp_path: Path) -> None:
    root = tmp_path / "workspace"
    root.mkdir()
    for name in ("vector_add.cu", "vector_add_float4.cu"):
        shutil.copy(EXAMPLES / name, root / name)
    hover, diagnostic = await _editor_hover(root, tmp_path / "editor-home", "vector_add_float4.cu")
    assert "Compiler facts:" in hover and "Reference:" in hover, "facts of both sides are part of the comparison"

    pair = {"id": "float4", "reference": _side("vector_add.cu"), "candidate": _side("vector_add_float4.cu"), "gpu": GPU}
    completed, (row,) = _batch(tmp_path, tmp_path / "batch-home", [pair])
    assert completed.returncode == 0, completed.stderr
    forecast = Forecast.from_json(row)
    assert forecast.provenance["facts_used"] == ["reference", "candidate"]
    assert _as_printed(forecast) == _read_hover(hover)
    assert diagnostic == f"vector_add: {forecast.message()}"

    _, (without_facts,) = _batch(tmp_path, tmp_path / "batch-home", [pair], "--no-facts")
    assert _as_printed(Forecast.from_json(without_facts)) != _read_hover(hover), "facts change this forecast: the check above sees them"


# --- what the batch reads ----------------------------------------------------------------------


def test_batch_reads_pragmas_names_and_plain_pytorch_as_the_editor_would(tmp_path: Path) -> None:
    two_kernels = "__global__ void first(float* x) { x[threadIdx.x] = 1.0f; }\n__global__ void second(float* x) { x[0] = 2.0f; }\n"
    unlaunched = _side("vector_add_float4.cu")
    unlaunched["code"] = "\n".join(line for line in unlaunched["code"].splitlines() if "launch" not in line)
    lines = [
        {"id": "pragma", "reference": _side("vector_add.cu"), "candidate": _side("vector_add_float4.cu")},
        {"id": "no-pragma", "reference": _side("vector_add.cu"), "candidate": unlaunched},
        {"id": "named", "reference": _side("vector_add.cu"), "candidate": {"code": two_kernels, "name": "second"}},
        {"id": "unnamed", "reference": _side("vector_add.cu"), "candidate": {"code": two_kernels}},
        {
            "id": "torch",
            "reference": {"code": "def add(x, y):\n    return x + y\n", "language": "pytorch"},
            "candidate": _side("vector_add.cu"),
        },
        {"id": "torch-candidate", "reference": _side("vector_add.cu"), "candidate": {"code": "y = x + z\n", "language": "pytorch"}},
        {"id": "off", "reference": _side("vector_add.cu"), "candidate": {"code": "// kernelcast: off\n" + two_kernels, "name": "first"}},
        {"id": "missing", "reference": {"code": two_kernels, "name": "third"}, "candidate": _side("vector_add.cu")},
        "[1, 2]",
        {"id": "oracle", "reference": _side("vector_add.cu"), "candidate": _side("vector_add_float4.cu"), "backend": "oracle"},
    ]
    completed, rows = _batch(tmp_path, tmp_path / "home", lines, "--no-facts")
    assert completed.returncode == 1 and "5 line(s) could not be forecast" in completed.stderr
    by_id = {row["id"]: row for row in rows}
    assert [row["id"] for row in rows] == [
        "pragma",
        "no-pragma",
        "named",
        "unnamed",
        "torch",
        "torch-candidate",
        "off",
        "missing",
        9,
        "oracle",
    ]
    # Without compiling, a side's facts are its pragma's launch: read from the candidate's code, not the line.
    assert by_id["pragma"]["provenance"]["facts_used"] == ["reference", "candidate"]
    # Without its own, the candidate's launch is assumed from the reference's pragma (same parameters), and said so.
    assert by_id["no-pragma"]["provenance"]["facts_used"] == ["reference", "candidate"]
    assert by_id["no-pragma"]["provenance"]["assumed"] == ["candidate launch"]
    assert "assumed" not in by_id["pragma"]["provenance"]
    assert by_id["pragma"]["probabilities"] != by_id["no-pragma"]["probabilities"]
    assert "speedup" in by_id["named"] and "error" not in by_id["named"]
    assert "2 kernels (first, second); name one in candidate.name" in by_id["unnamed"]["error"]
    # Plain PyTorch has no reading in the editor: such a side is read as given, and the line says so.
    assert by_id["torch"]["notes"] == ["reference read as given: it holds no kernel and no KernelBench Model"]
    assert by_id["torch-candidate"]["notes"] == ["candidate read as given: it holds no kernel and no KernelBench ModelNew"]
    assert by_id["torch-candidate"]["provenance"]["facts_used"] == ["reference"]
    assert "kernelcast: off in this file" in by_id["off"]["error"]
    assert "no kernel `third` there" in by_id["missing"]["error"] and by_id["missing"]["error"].startswith("line 8: reference:")
    assert "line 9: a line is a JSON object" in by_id[9]["error"]
    assert by_id["oracle"]["error"] == "line 10: backend 'oracle' is not served here; served: embedded", "the others of its call are kept"
    assert completed.stdout == "", "results go to --out, progress to stderr"
    assert "kernelcast forecast: read 10/10" in completed.stderr


def test_parallel_batch_equals_one_process_and_its_compiles_land_in_the_disk_cache(tmp_path: Path) -> None:
    lines = [
        {"id": "vadd", "reference": _side("vector_add.cu"), "candidate": _side("vector_add_float4.cu"), "problem": {"N": 1 << 20}},
        {"id": "sgemm", "reference": _side("matmul_naive.cu"), "candidate": _side("matmul_tiled.cu"), "gpu": "A100"},
        {"id": "back", "reference": _side("matmul_tiled.cu"), "candidate": _side("matmul_naive.cu")},
    ]
    home = tmp_path / "home"
    parallel, in_pool = _batch(tmp_path, home, lines, "--jobs", "2")
    assert parallel.returncode == 0, parallel.stderr
    assert all(row["provenance"]["facts_used"] == ["reference", "candidate"] for row in in_pool)
    with diskcache.Cache(str(home / "cache")) as cache:
        compiled = [key for key in cache.iterkeys() if str(key).startswith("facts:")]
    assert len(compiled) == 6, "each side of each pair compiled once, for its GPU, into the cache the editor reads"
    alone, in_one = _batch(tmp_path, tmp_path / "other-home", lines, "--jobs", "1")
    assert alone.returncode == 0, alone.stderr
    strip = [{k: v for k, v in row.items() if k != "provenance"} for row in in_pool]
    assert strip == [{k: v for k, v in row.items() if k != "provenance"} for row in in_one]

    bad_jobs = _kernelcast(home, "forecast", "--batch", "x.jsonl", "--out", "y.jsonl", "--jobs", "0")
    assert bad_jobs.returncode == 2 and "expected a whole number of at least 1, got '0'" in bad_jobs.stderr
    missing = _kernelcast(home, "forecast", "--batch", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o.jsonl"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_progress_redraws_on_a_terminal_and_logs_now_and_then_elsewhere(tmp_path: Path) -> None:
    class Terminal:
        def __init__(self, tty: bool) -> None:
            self.tty, self.text = tty, ""

        def isatty(self) -> bool:
            return self.tty

        def write(self, text: str) -> None:
            self.text += text

        def flush(self) -> None:
            pass

    terminal, log = Terminal(True), Terminal(False)
    for stream in (terminal, log):
        progress = Progress("read", 3, stream=stream, every_s=3600)  # type: ignore[arg-type]
        for _ in range(3):
            progress.advance()
    assert terminal.text.startswith("\rread 1/3\x1b[K\r") and terminal.text.endswith("\rread 3/3\x1b[K\n")
    assert terminal.text.count("\n") == 1, "one line, redrawn"
    assert log.text == "read 1/3\nread 3/3\n", "a log gets the first step, one line each every_s, and the last"


# --- eval: facts and sources -------------------------------------------------------------------


def _eval(home: Path, pairs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _kernelcast(home, "eval", str(pairs), *args)


def test_eval_adds_compiler_facts_to_sides_without_them(tmp_path: Path) -> None:
    chosen = [line for line in PAIRS.read_text().splitlines() if json.loads(line)["id"] in ("vadd-float4", "relu-cuda")]
    pairs = tmp_path / "two.jsonl"
    pairs.write_text("\n".join(chosen) + "\n")
    used = {}
    for flags in ((), ("--no-facts",)):
        report = tmp_path / f"report{len(flags)}"
        completed = _eval(tmp_path / "home", pairs, "--report", str(report), *flags)
        assert completed.returncode == 0, completed.stderr
        rows = [json.loads(line) for line in (report / "predictions.jsonl").read_text().splitlines()]
        used[flags] = {row["id"]: row["facts_used"] for row in rows}
    assert used[()] == {"vadd-float4": ["reference", "candidate"], "relu-cuda": ["candidate"]}, "a PyTorch side has no compiler facts"
    assert used[("--no-facts",)] == {"vadd-float4": [], "relu-cuda": []}


def test_eval_judges_every_source_and_their_mean(tmp_path: Path) -> None:
    lines = [json.loads(line) for line in PAIRS.read_text().splitlines()]
    for number, line in enumerate(lines):
        line.pop("source", None)
        if number < 12:
            line["source"] = "synthetic"
        elif number < 17:
            line["source"] = "wild"
    pairs = tmp_path / "sourced.jsonl"
    pairs.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = tmp_path / "report"
    completed = _eval(tmp_path / "home", pairs, "--report", str(report), "--no-facts")
    assert completed.returncode == 0, completed.stderr
    assert "mean of 3 sources" in completed.stdout and "source: wild" in completed.stdout

    written = json.loads((report / "metrics.json").read_text())
    assert {name: values["n"] for name, values in written["by_source"].items()} == {"synthetic": 12, "wild": 5, "unnamed": 1}
    rows = [json.loads(line) for line in (report / "predictions.jsonl").read_text().splitlines()]
    for source, values in written["by_source"].items():
        mine = [row for row in rows if row["source"] == source]
        alone = metrics([row["probabilities"] for row in mine], [row["speedup"] for row in mine], [row["group"] for row in mine])
        assert json.loads(json.dumps(alone)) == values, source
    mean = written["mean_over_sources"]
    assert mean["sources"] == 3 and mean["n"] == 18
    judged = [v["direction_accuracy"] for v in written["by_source"].values() if v["direction_accuracy"] is not None]
    assert mean["direction_accuracy"] == pytest.approx(sum(judged) / len(judged))
    assert mean["direction_accuracy"] != pytest.approx(written["overall"]["direction_accuracy"]), "pooled and mean differ here"
    markdown = (report / "report.md").read_text()
    assert "| mean of 3 sources | 18 |" in markdown and "| source: synthetic | 12 |" in markdown and "| source: unnamed | 1 |" in markdown


def test_mean_over_sources_leaves_out_what_a_source_cannot_judge() -> None:
    sure, tie = [[0, 0, 0, 0, 0, 0, 1, 0]], [[0, 0, 0, 0.5, 0.5, 0, 0, 0]]
    result = evaluate(sure + tie, [3.0, 1.01], sources=["a", ""])
    assert set(result["by_source"]) == {"a", "unnamed"}
    assert result["by_source"]["unnamed"]["direction_accuracy"] is None, "a near-tie judges no direction"
    assert result["mean_over_sources"]["direction_accuracy"] == 1.0
    assert result["mean_over_sources"]["brier"] == pytest.approx(
        (result["by_source"]["a"]["brier"] + result["by_source"]["unnamed"]["brier"]) / 2
    )
    assert mean_over(result["by_source"])["n"] == 2


def test_a_line_names_its_gpu_as_gpu_or_as_a_requests_hardware(tmp_path: Path) -> None:
    """A forecast request (or a pair file's `request`) copied into a batch keeps its GPU."""
    from kernelcast.kernels_runtime.hardware import lookup

    pair = {"reference": _side("vector_add.cu"), "candidate": _side("vector_add_float4.cu")}
    lines = [
        {"id": "named", **pair, "gpu": "A100"},
        {"id": "request", **pair, "hardware": lookup("A100").to_json()},
        {"id": "default", **pair},
        {"id": "both", **pair, "gpu": "A100", "hardware": lookup("A100").to_json()},
        {"id": "broken", **pair, "hardware": {"compute_capability": [9, 0], "name": "mine"}},
        {"id": "by-key", **pair, "hardware": {"key": "A100"}},
    ]
    completed, rows = _batch(tmp_path, tmp_path / "home", lines, "--no-facts")
    by_id = {row["id"]: row for row in rows}
    assert by_id["request"]["probabilities"] == by_id["named"]["probabilities"]
    assert by_id["request"]["provenance"]["hardware"] == by_id["named"]["provenance"]["hardware"] == "A100"
    assert by_id["default"]["provenance"]["hardware"] == GPU
    assert "give the GPU once" in by_id["both"]["error"]
    assert by_id["broken"]["error"].startswith("line 5: hardware: not a GPU spec"), by_id["broken"]["error"]
    # A request that names its GPU by key alone is read as `kernelcast eval` reads one.
    assert by_id["by-key"]["probabilities"] == by_id["named"]["probabilities"]
    assert completed.returncode == 1 and "2 line(s) could not be forecast" in completed.stderr


def test_a_kernelbench_pair_is_forecast_as_the_cli_forecasts_its_file(tmp_path: Path) -> None:
    """The line's reference is the problem's file (Model, sizes, get_inputs); the editor reads the same Model in the candidate's file."""
    text = (EXAMPLES / "kernelbench_relu.py").read_text()
    problem = text[: text.index("class ModelNew")] + text[text.index("batch_size = ") :]
    pair = {"id": "relu", "reference": {"code": problem, "language": "pytorch"}, "candidate": {"code": text, "language": "pytorch"}}
    completed, (row,) = _batch(tmp_path, tmp_path / "home", [pair], "--no-facts")
    assert completed.returncode == 0, completed.stderr
    cli = _kernelcast(tmp_path / "home", "forecast", str(EXAMPLES / "kernelbench_relu.py"), "--json", "--no-facts", "--gpu", GPU)
    assert cli.returncode == 0, cli.stderr
    (kernel,) = json.loads(cli.stdout)["kernels"]
    assert kernel["kernel"] == "ModelNew" and kernel["reference"] == "Model in this file"
    assert row["probabilities"] == kernel["forecast"]["probabilities"]
    assert "notes" not in row


def test_two_kernelbench_solutions_are_forecast_on_their_problems_inputs_as_the_cli_forecasts_them(tmp_path: Path) -> None:
    """The line's `kernelbench_problem` is what `reference.py` beside a solution is to the editor:
    the inputs both solutions are timed on, which neither states."""
    text = (EXAMPLES / "kernelbench_relu.py").read_text()
    problem = text[: text.index("class ModelNew")] + text[text.index("batch_size = ") :]
    other = text[: text.index("class Model(")] + text[text.index("class ModelNew") : text.index("batch_size = ")]
    solution = "# kernelcast: reference=other.py::ModelNew\n" + other.replace("(n + 255) / 256, 256", "(n + 31) / 32, 32")
    folder = tmp_path / "problem"
    folder.mkdir()
    for name, code in (("reference.py", problem), ("other.py", other), ("solution.py", solution)):
        (folder / name).write_text(code)
    cli = _kernelcast(tmp_path / "home", "forecast", str(folder / "solution.py"), "--json", "--no-facts", "--gpu", GPU)
    assert cli.returncode == 0, cli.stderr
    (kernel,) = json.loads(cli.stdout)["kernels"]
    assert kernel["kernel"] == "ModelNew" and kernel["reference"] == "pragma: other.py::ModelNew"
    pair = {"reference": {"code": other, "language": "cuda", "name": "ModelNew"}, "candidate": {"code": solution, "language": "cuda"}}
    completed, (given, bare) = _batch(tmp_path, tmp_path / "home", [{**pair, "kernelbench_problem": problem}, pair], "--no-facts")
    assert completed.returncode == 0, completed.stderr
    assert given["probabilities"] == kernel["forecast"]["probabilities"]
    # Without the problem its sizes are a guess, and the forecast says so; with it they are read.
    assert bare["provenance"]["assumed"] == ["problem sizes"] and "assumed" not in given["provenance"]
    _, (refused,) = _batch(tmp_path, tmp_path / "home", [{**pair, "kernelbench_problem": {"N": 1}}], "--no-facts")
    assert "kernelbench_problem must be the text of the KernelBench problem file" in refused["error"]


def test_a_side_named_by_the_function_that_launches_it_is_read_as_its_kernel(tmp_path: Path) -> None:
    """TritonBench's files and agents' candidates name the wrapper people call, not the kernel."""
    wrapper = (
        "import torch\nimport triton\nimport triton.language as tl\n\n\n"
        "@triton.jit\ndef _double(x_ptr, n, BLOCK: tl.constexpr):\n"
        "    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * 2, mask=offsets < n)\n\n\n"
        "def double(x):\n    _double[(triton.cdiv(x.numel(), 1024),)](x, x.numel(), BLOCK=1024)\n    return x\n"
    )
    torch_fallback = "import torch\n\n\ndef double(x):\n    return x * 2\n"
    lines = [
        {
            "id": "both",
            "reference": {"code": wrapper, "language": "triton", "name": "double"},
            "candidate": {"code": wrapper.replace("1024", "256"), "language": "triton", "name": "double"},
        },
        {
            "id": "torch",
            "reference": {"code": torch_fallback, "language": "pytorch", "name": "double"},
            "candidate": {"code": wrapper, "language": "triton", "name": "double"},
        },
        {
            "id": "no-triton",
            "reference": {"code": wrapper, "language": "triton", "name": "double"},
            "candidate": {"code": torch_fallback, "language": "triton", "name": "double"},
        },
        {
            "id": "half-typed",
            "reference": {"code": wrapper, "language": "triton", "name": "double"},
            "candidate": {"code": torch_fallback + "def (", "language": "triton", "name": "double"},
        },
        {
            "id": "unknown",
            "reference": {"code": wrapper, "language": "triton"},
            "candidate": {"code": wrapper, "language": "triton", "name": "triple"},
        },
    ]
    completed, rows = _batch(tmp_path, tmp_path / "home", lines, "--no-facts")
    by_id = {row["id"]: row for row in rows}
    assert completed.returncode == 1 and "2 line(s) could not be forecast" in completed.stderr
    assert by_id["both"]["notes"] == ["candidate: `double` read as the kernel it launches, `_double`"]
    assert by_id["both"]["speedup"] != 1.0, "the two launches differ, so the forecast reads them"
    assert by_id["torch"]["notes"][0] == "candidate: `double` read as the kernel it launches, `_double`"
    # A candidate labelled Triton that fell back to torch calls is forecast as the PyTorch it is.
    assert by_id["no-triton"]["notes"] == [
        "candidate read as given as PyTorch (its language says triton): it holds no kernel and no KernelBench ModelNew"
    ]
    assert "speedup" in by_id["no-triton"]
    assert by_id["half-typed"]["error"].startswith("line 4: candidate: no kernel named 'double', and no function of that name launches one")
    assert "no kernel named 'triple'" in by_id["unknown"]["error"] and "(kernels: _double)" in by_id["unknown"]["error"]


def test_sides_without_compiler_facts_are_named_then_counted(capsys: pytest.CaptureFixture[str]) -> None:
    problems = [f"pair-{n}: no compiler facts: kernel.cu:1:1: error" for n in range(FACT_PROBLEMS_SHOWN + 2)]
    report_fact_problems(problems, "kernelcast eval")
    lines = capsys.readouterr().err.splitlines()
    assert lines[:FACT_PROBLEMS_SHOWN] == [f"kernelcast eval: {problem}" for problem in problems[:FACT_PROBLEMS_SHOWN]]
    assert lines[FACT_PROBLEMS_SHOWN:] == ["kernelcast eval: … and 2 more sides without compiler facts"]
    report_fact_problems([], "kernelcast eval")
    assert capsys.readouterr().err == ""
