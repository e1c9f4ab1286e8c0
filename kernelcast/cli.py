"""The `kernelcast` command: one entry point for the editor, the service and people.

Sub-commands import what they need when they run, so `kernelcast lsp` does not
pay for the forecaster service and `kernelcast forecast` does not pay for pygls.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernelcast import __version__


def _lsp(args: argparse.Namespace) -> int:
    from kernelcast.server.app import run_stdio

    run_stdio()
    return 0


def _serve(args: argparse.Namespace) -> int:
    from kernelcast import paths
    from kernelcast.models.service.api import serve

    state_dir = paths.private_dir(Path(args.state_dir)) if args.state_dir else paths.service_dir()
    try:
        serve(state_dir, args.backend or ["embedded"], host=args.host, port=args.port, options=_backend_options(args))
    except (ValueError, KeyError, OSError) as error:
        print(f"kernelcast serve: {error}", file=sys.stderr)
        return 2
    return 0


# `kernelcast serve` flag → option key read by the backends (models/backends.describe_backends).
BACKEND_FLAGS: dict[str, tuple[str, type, str]] = {
    "--gguf": ("gguf", str, "llama-cpp: path of a GGUF model (env KERNELCAST_GGUF)"),
    "--llm-ctx": ("n_ctx", int, "llama-cpp: context length (default 8192)"),
    "--llm-threads": ("n_threads", int, "llama-cpp: threads (default: usable cores minus one)"),
    "--hf-model": ("hf_model", str, "transformers: local checkpoint folder (env KERNELCAST_HF_MODEL)"),
    "--hf-adapter": ("hf_adapter", str, "transformers: PEFT LoRA adapter folder"),
    "--hf-gguf-file": ("hf_gguf_file", str, "transformers: GGUF file inside --hf-model"),
    "--hf-device": ("hf_device", str, "transformers: torch device (cpu, cuda)"),
    "--llm-url": ("llm_url", str, "openai: base URL of an OpenAI-compatible server (env KERNELCAST_LLM_URL)"),
    "--llm-model": ("llm_model", str, "openai: model name (a vLLM LoRA is chosen by name)"),
    "--llm-api-key": ("llm_api_key", str, "openai: API key (env KERNELCAST_LLM_API_KEY)"),
    "--llm-mode": ("llm_mode", str, "openai: auto | logprobs | json | reason"),
    "--llm-deadline": ("llm_deadline_s", float, "openai: seconds before giving up (default 120)"),
    "--llm-retries": ("llm_retries", int, "openai: retries on 408/429/5xx (default 2)"),
    "--llm-reason-tokens": ("llm_reason_tokens", int, "openai: reasoning budget in reason mode (default 512)"),
    "--combine-pool": ("combine_pool", str, "combined: linear | log (default linear)"),
    "--combine-weights": ("combine_weights", str, "combined: e.g. embedded=1,llama-cpp=1"),
}


def _add_backend_flags(parser: argparse.ArgumentParser) -> None:
    for flag, (key, kind, help_text) in BACKEND_FLAGS.items():
        parser.add_argument(flag, dest=key, type=kind, help=help_text)


def _backend_options(args: argparse.Namespace) -> dict[str, Any]:
    return {key: getattr(args, key) for key, _, _ in BACKEND_FLAGS.values() if getattr(args, key, None) is not None}


def _forecast(args: argparse.Namespace) -> int:
    from kernelcast.models.service.calibrated import Forecaster

    try:
        forecaster = Forecaster([args.backend], options=_backend_options(args))
    except KeyError as error:
        print(f"kernelcast forecast: {error.args[0]}", file=sys.stderr)
        return 2
    if args.batch:
        return _forecast_batch(args, forecaster)
    if not args.file:
        print("kernelcast forecast: give a FILE, or --batch IN.jsonl --out OUT.jsonl", file=sys.stderr)
        return 2
    analysis = _analyse_file(args)
    if isinstance(analysis, int):
        return analysis
    from kernelcast import paths
    from kernelcast.analysis import build_request, fill_facts, problem_sizes
    from kernelcast.cache import ResultCache

    if not args.no_facts:
        fill_facts(analysis, ResultCache(paths.cache_dir()), True, lambda: True)
    rows: list[dict[str, Any]] = []
    for result in analysis.results:
        if result.part_of is not None:
            continue
        row: dict[str, Any] = {
            "kernel": result.kernel.name,
            "language": result.kernel.language,
            "line": result.kernel.signature.start_line + 1,
        }
        if result.reference is None:
            row["no_reference"] = result.no_reference
        elif result.unchanged:
            row.update(reference=result.reference.description, unchanged=True)
        else:
            problem = problem_sizes(result, analysis.path, analysis.path.parent)
            forecast = forecaster.forecast(build_request(analysis, result, problem, args.threshold))
            row.update(reference=result.reference.description, message=forecast.message(), forecast=forecast.to_json())
        rows.append(row)
    if args.json:
        print(
            json.dumps({"file": str(analysis.path), "gpu": analysis.hardware.key, "kernels": rows, "problems": analysis.problems}, indent=2)
        )
        return 0 if rows else 1
    for problem in analysis.problems:
        print(f"note: {problem}")
    for row in rows:
        words = row.get("message") or row.get("no_reference") or "same code as the reference"
        print(f"{analysis.path.name}:{row['line']}: {row['kernel']}: {words}")
        if "reference" in row:
            print(f"    reference: {row['reference']} · GPU: {analysis.hardware.name}")
    if not rows:
        print(f"{analysis.path.name}: no kernels forecast")
    return 0 if rows else 1


def _analyse_file(args: argparse.Namespace) -> Any:
    """The same analysis the editor makes of a file, or an exit code after saying why not."""
    from kernelcast.analysis import analyse_text
    from kernelcast.kernels_runtime.hardware import resolve_target
    from kernelcast.kernels_runtime.source.discovery import discover_bytes
    from kernelcast.settings import Settings

    path = Path(args.file).resolve()
    try:
        hardware = resolve_target(args.gpu)
        data = path.read_bytes()
    except KeyError as error:
        print(f"kernelcast {args.command}: {error.args[0]}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"kernelcast {args.command}: cannot read {args.file}: {error.strerror}", file=sys.stderr)
        return 2
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        for problem in discover_bytes(data, str(path)).problems:
            print(f"kernelcast {args.command}: {path.name}: {problem}", file=sys.stderr)
        return 1
    settings = Settings(allow_references_outside_workspace=True)
    analysis = analyse_text(path.as_uri(), None, text, path, _workspace_root(path), settings, hardware, getattr(args, "reference", None))
    if analysis.disabled_reason:
        print(f"{path.name}: {analysis.disabled_reason}")
        return 1
    kernel = getattr(args, "kernel", None)
    if kernel:
        analysis.results = [r for r in analysis.results if r.kernel.name == kernel]
        if not analysis.results:
            names = ", ".join(k.name for k in analysis.discovery.kernels) or "none"
            print(f"kernelcast {args.command}: no kernel named {kernel!r} in {path.name} (kernels: {names})", file=sys.stderr)
            return 2
    return analysis


def _facts(args: argparse.Namespace) -> int:
    from kernelcast import paths
    from kernelcast.analysis import fill_facts
    from kernelcast.cache import ResultCache

    analysis = _analyse_file(args)
    if isinstance(analysis, int):
        return analysis
    fill_facts(analysis, ResultCache(paths.cache_dir()), True, lambda: True)
    if args.json:
        payload = {
            r.kernel.name: {
                "facts": r.facts.to_json() if r.facts else None,
                "error": r.facts_error,
                "reference_facts": r.reference_facts.to_json() if r.reference_facts else None,
            }
            for r in analysis.results
        }
        print(json.dumps({"file": str(analysis.path), "gpu": analysis.hardware.key, "kernels": payload}, indent=2))
        return 0
    for result in analysis.results:
        print(f"{analysis.path.name}:{result.kernel.signature.start_line + 1}: {result.kernel.name}")
        if result.facts is not None:
            for line in result.facts.hover_lines():
                print(f"    {line}")
            for problem in result.facts.hint_problems():
                print(f"    hint: {problem}")
        else:
            print(f"    no facts: {result.facts_error or 'not a CUDA or Triton kernel'}")
    return 0


def _measure(args: argparse.Namespace) -> int:
    from kernelcast.analysis import measurement_sides
    from kernelcast.kernels_runtime.measure import measure_pair
    from kernelcast.wire import Measurement

    analysis = _analyse_file(args)
    if isinstance(analysis, int):
        return analysis
    measurable = [r for r in analysis.results if r.part_of is None and r.reference is not None]
    if not measurable:
        reasons = "; ".join(r.no_reference or "" for r in analysis.results if r.no_reference) or "no kernels found"
        print(f"kernelcast measure: nothing to measure in {analysis.path.name}: {reasons}", file=sys.stderr)
        return 1
    exit_code = 0
    for result in measurable:
        candidate, reference = measurement_sides(analysis, result)
        outcome = measure_pair(candidate, reference, progress=lambda text, percent: print(f"  [{percent:3.0f}%] {text}", file=sys.stderr))
        if isinstance(outcome, Measurement):
            line = {"kernel": result.kernel.name, "message": outcome.message(), "measurement": outcome.to_json()}
        else:
            exit_code = 1
            line = {"kernel": result.kernel.name, "failure": outcome.kind, "message": outcome.message}
        print(json.dumps(line) if args.json else f"{result.kernel.name}: {line['message']}")
    return exit_code


def _forecast_batch(args: argparse.Namespace, forecaster: Any) -> int:
    from kernelcast.kernels_runtime.hardware import lookup
    from kernelcast.wire import ForecastRequest

    if not args.out:
        print("kernelcast forecast: --batch needs --out OUT.jsonl", file=sys.stderr)
        return 2
    failures = 0
    with open(args.batch, encoding="utf-8") as source, open(args.out, "w", encoding="utf-8") as sink:
        for number, line in enumerate(source, 1):
            if not line.strip():
                continue
            pair_id: Any = None
            try:
                pair = json.loads(line)
                pair_id = pair.get("id", number)
                gpu = pair.get("gpu", "H100-SXM")
                spec = lookup(gpu) if isinstance(gpu, str) else None
                hardware = {**spec.to_json(), "fingerprint": spec.fingerprint()} if spec else gpu
                request = ForecastRequest.from_json({**pair, "hardware": hardware, "threshold": args.threshold})
                output = {"id": pair_id, **forecaster.forecast(request).to_json()}
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                failures += 1
                output = {"id": pair_id if pair_id is not None else number, "error": f"line {number}: {error}"}
            sink.write(json.dumps(output) + "\n")
    if failures:
        print(f"kernelcast forecast: {failures} line(s) could not be forecast; see 'error' in {args.out}", file=sys.stderr)
    return 0


def _eval(args: argparse.Namespace) -> int:
    from kernelcast.models.evaluation import run

    return run(Path(args.pairs), args.backend, _backend_options(args), Path(args.report) if args.report else None)


def _rank(args: argparse.Namespace) -> int:
    from kernelcast.rank.command import run

    return run(args)


def _workspace_root(path: Path) -> Path | None:
    """The git top of the file's folder, else its folder: where references may point."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path.parent, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return path.parent
    return Path(top.stdout.strip()) if top.returncode == 0 else path.parent


def _calibrate_hw(args: argparse.Namespace) -> int:
    from kernelcast.kernels_runtime.calibrate_hw import calibrate, measured_path

    try:
        result = calibrate(args.gpu_index)
    except RuntimeError as error:
        print(f"kernelcast calibrate-hw: {error}", file=sys.stderr)
        return 1
    print(f"{result['name']}: copy {result['copy_gbs']} GB/s (read + write), bf16 matmul {result['bf16_tflops']} TFLOP/s")
    print(f"stored in {measured_path()}; forecasts and roofline floors on this GPU use these rates")
    return 0


def _reset_learning(args: argparse.Namespace) -> int:
    from kernelcast.models.service.calibrated import forget_learning

    try:
        counts, removed = forget_learning()
    except OSError as error:
        print(f"kernelcast reset-learning: {error}", file=sys.stderr)
        return 1
    if not removed:
        print("nothing to forget: forecasts use no local learning")
        return 0
    for key, count in sorted(counts.items()):
        print(f"forgot {count} measurement{'s' if count != 1 else ''} of {key}")
    for path in removed:
        print(f"removed {path}")
    print("forecasts use the shipped calibration again (a running service from its next forecast)")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from kernelcast import paths
    from kernelcast.kernels_runtime.hardware import detect_local_gpus
    from kernelcast.models.service import backends
    from kernelcast.wire import read_state

    report: dict[str, Any] = {"kernelcast": __version__, "python": sys.version.split()[0]}
    gpus = detect_local_gpus()
    report["gpu"] = [f"{g.name} ({g.spec.arch}, driver {g.spec.driver})" for g in gpus] or "none detected (nvidia-ml-py or driver absent)"
    nvcc = shutil.which("nvcc")
    report["nvcc"] = _first_line([nvcc, "--version"], last=True) if nvcc else "not found"
    for module in ("torch", "triton", "cupy", "cuda.core", "pynvml"):
        report[module] = "installed" if _module_exists(module) else "not installed"
    report["backends"] = {
        entry["name"]: ("ok: " if entry["available"] else "unavailable: ") + entry["detail"]
        for entry in backends.describe_backends(_backend_options(args))
    }
    report["cache_dir"] = str(paths.cache_dir())
    state = read_state(paths.service_dir())
    report["service"] = f"running at {state['url']} (pid {state['pid']})" if state else "not running (started on first need)"
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            if isinstance(value, dict):
                print(f"{key}:")
                for inner, text in value.items():
                    print(f"  {inner}: {text}")
            elif isinstance(value, list):
                print(f"{key}: " + "; ".join(value))
            else:
                print(f"{key}: {value}")
    return 0


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _first_line(command: list[str], last: bool = False) -> str:
    try:
        output = subprocess.run(command, capture_output=True, text=True, timeout=10).stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"failed: {error}"
    return (output[-1] if last else output[0]) if output else ""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelcast", description="Performance forecasts for GPU kernels.")
    parser.add_argument("--version", action="version", version=f"kernelcast {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    lsp = commands.add_parser("lsp", help="run the language server on stdio")
    lsp.set_defaults(run=_lsp)

    serve = commands.add_parser("serve", help="run the forecaster service on loopback")
    serve.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=0, help="port (default: any free port, written to the state file)")
    serve.add_argument("--backend", action="append", help="backend to serve; repeat for several (default: embedded)")
    serve.add_argument("--state-dir", help="where the token and state file live (default: per-user cache)")
    _add_backend_flags(serve)
    serve.set_defaults(run=_serve)

    forecast = commands.add_parser("forecast", help="forecast the kernels of a file against their references")
    forecast.add_argument("file", nargs="?", help=".cu, .cuh or .py file")
    forecast.add_argument("--kernel", help="only this kernel")
    forecast.add_argument("--reference", help="reference as path[::kernel] (overrides pragma and config)")
    forecast.add_argument("--gpu", help="target GPU (H100-SXM, H100-PCIe, H200, A100, L40S, RTX4090, B200)")
    forecast.add_argument("--backend", default="embedded", help="forecaster backend (default: embedded)")
    forecast.add_argument("--threshold", type=float, default=0.8, help="confidence below which to defer (default 0.8)")
    forecast.add_argument("--json", action="store_true", help="print JSON")
    forecast.add_argument("--no-facts", action="store_true", help="skip compiling for registers/occupancy (faster)")
    forecast.add_argument("--batch", help="JSONL of pairs to forecast")
    forecast.add_argument("--out", help="JSONL to write forecasts to (with --batch)")
    _add_backend_flags(forecast)
    forecast.set_defaults(run=_forecast)

    evaluation = commands.add_parser("eval", help="score a backend on pairs with measured speedups (FORECAST.md metrics)")
    evaluation.add_argument("pairs", help="labelled pairs, JSONL (kernelcast/wire.py)")
    evaluation.add_argument("--backend", default="embedded", help="forecaster backend (default: embedded)")
    evaluation.add_argument("--report", help="folder for metrics.json, report.md, predictions.jsonl and plots")
    _add_backend_flags(evaluation)
    evaluation.set_defaults(run=_eval)

    rank = commands.add_parser("rank", help="find the fastest of many variants, measuring only what forecasts cannot settle")
    from kernelcast.rank.command import add_arguments as add_rank_arguments

    add_rank_arguments(rank)
    rank.set_defaults(run=_rank)

    facts = commands.add_parser("facts", help="compiler facts (registers, shared memory, spills, occupancy, SASS mix) of a file's kernels")
    facts.add_argument("file")
    facts.add_argument("--kernel", help="only this kernel")
    facts.add_argument("--gpu", help="target GPU (default: the local GPU, else H100-SXM)")
    facts.add_argument("--json", action="store_true")
    facts.set_defaults(run=_facts)

    measure = commands.add_parser("measure", help="check and time a file's kernels against their references on the local GPU")
    measure.add_argument("file")
    measure.add_argument("--kernel", help="only this kernel")
    measure.add_argument("--reference", help="reference as path[::kernel] (overrides pragma and config)")
    measure.add_argument("--gpu", help=argparse.SUPPRESS)
    measure.add_argument("--json", action="store_true")
    measure.set_defaults(run=_measure)

    calibrate = commands.add_parser("calibrate-hw", help="measure this GPU's copy bandwidth and bf16 matmul rate")
    calibrate.add_argument("--gpu-index", type=int, default=0)
    calibrate.set_defaults(run=_calibrate_hw)

    reset_learning = commands.add_parser("reset-learning", help="forget what forecasts learnt from your measurements")
    reset_learning.set_defaults(run=_reset_learning)

    doctor = commands.add_parser("doctor", help="report what kernelcast can use on this machine")
    doctor.add_argument("--json", action="store_true")
    _add_backend_flags(doctor)
    doctor.set_defaults(run=_doctor)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args))
