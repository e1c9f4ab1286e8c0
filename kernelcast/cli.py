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
    if args.stop:
        from kernelcast.server.service_client import stop_service

        stopped, outcome = stop_service(_state_dir(args))
        print(f"kernelcast serve: {outcome}")
        return 0 if stopped else 1
    from kernelcast.models.service.api import serve

    try:
        serve(_state_dir(args), args.backend or ["embedded"], args.host, args.port, _backend_options(args), args.idle_timeout)
    except (ValueError, KeyError, OSError) as error:
        print(f"kernelcast serve: {error}", file=sys.stderr)
        return 2
    return 0


def _state_dir(args: argparse.Namespace) -> Path:
    from kernelcast import paths

    return paths.private_dir(Path(args.state_dir)) if args.state_dir else paths.service_dir()


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
        if not args.out:
            print("kernelcast forecast: --batch needs --out OUT.jsonl", file=sys.stderr)
            return 2
        from kernelcast.batch import default_jobs, forecast_batch

        return forecast_batch(Path(args.batch), Path(args.out), forecaster, args.threshold, not args.no_facts, args.jobs or default_jobs())
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
    # A script must see that a kernel went without a forecast because its reference did not resolve.
    exit_code = 0 if rows and not any("no_reference" in row for row in rows) else 1
    if args.json:
        print(
            json.dumps({"file": str(analysis.path), "gpu": analysis.hardware.key, "kernels": rows, "problems": analysis.problems}, indent=2)
        )
        return exit_code
    for problem in analysis.problems:
        print(f"note: {problem}")
    for row in rows:
        words = row.get("message") or row.get("no_reference") or "same code as the reference"
        print(f"{analysis.path.name}:{row['line']}: {row['kernel']}: {words}")
        if "reference" in row:
            print(f"    reference: {row['reference']} · GPU: {analysis.hardware.name}")
        for note in _what_the_forecast_could_not_read(row.get("forecast") or {}):
            print(f"    {note}")
    if not rows:
        print(f"{analysis.path.name}: no kernels forecast")
    return exit_code


def _what_the_forecast_could_not_read(forecast: dict[str, Any]) -> list[str]:
    """Why a forecast is wide, in the words the hover uses: kernels out of its sight and inputs it assumed."""
    provenance = forecast.get("provenance") or {}
    unseen = (provenance.get("details") or {}).get("out_of_sight")
    notes = [f"out of sight: {'; '.join(unseen)}"] if unseen else []
    if provenance.get("assumed"):
        notes.append(f"assumed, not read: {', '.join(provenance['assumed'])}")
    return notes


def _analyse_file(args: argparse.Namespace) -> Any:
    """The same analysis the editor makes of a file, or an exit code after saying why not."""
    from kernelcast.analysis import analyse_text
    from kernelcast.kernels_runtime.hardware import resolve_target
    from kernelcast.kernels_runtime.source.discovery import source_text
    from kernelcast.kernels_runtime.source.entry_points import kernel_meant, no_kernel_meant
    from kernelcast.project_config import target_gpu_for
    from kernelcast.references import workspace_root
    from kernelcast.settings import Settings

    path = Path(args.file).resolve()
    root = workspace_root(path)
    try:
        hardware = resolve_target(target_gpu_for(path, root, args.gpu))
        data = path.read_bytes()
    except KeyError as error:
        print(f"kernelcast {args.command}: {error.args[0]}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"kernelcast {args.command}: cannot read {args.file}: {error.strerror}", file=sys.stderr)
        return 2
    text, refused = source_text(data)
    if text is None:
        print(f"kernelcast {args.command}: {path.name}: {refused}", file=sys.stderr)
        return 1
    override = _absolute_reference(getattr(args, "reference", None))
    settings = Settings(allow_references_outside_workspace=getattr(args, "allow_references_outside_workspace", False))
    analysis = analyse_text(path.as_uri(), None, text, path, root, settings, hardware, override)
    if analysis.disabled_reason:
        print(f"{path.name}: {analysis.disabled_reason}")
        return 1
    kernel = getattr(args, "kernel", None)
    if kernel:
        meant, read_through = kernel_meant(text, str(path), kernel, [r.kernel.name for r in analysis.results])
        analysis.results = [r for r in analysis.results if r.kernel.name == meant]
        if not analysis.results:
            names = [k.name for k in analysis.discovery.kernels]
            print(f"kernelcast {args.command}: {path.name}: {no_kernel_meant(kernel, names)}", file=sys.stderr)
            return 2
        if read_through:
            print(f"{path.name}: {read_through}", file=sys.stderr)
    return analysis


def _absolute_reference(spec: str | None) -> str | None:
    """`--reference path[::kernel]` with its path read from the current folder, as a shell user means it."""
    if not spec:
        return None
    path_text, separator, kernel = spec.partition("::")
    return f"{Path(path_text).resolve() if path_text else ''}{separator}{kernel}"


# How `kernelcast facts` names the languages a KernelBench ModelNew's kernels are written in.
_LANGUAGE_WORDS = {"cuda": "CUDA", "triton": "Triton"}


def _facts(args: argparse.Namespace) -> int:
    from kernelcast import paths
    from kernelcast.analysis import fill_facts
    from kernelcast.cache import ResultCache

    analysis = _analyse_file(args)
    if isinstance(analysis, int):
        return analysis
    fill_facts(analysis, ResultCache(paths.cache_dir()), True, lambda: True)
    exit_code = 1 if not analysis.results or any(r.facts_error for r in analysis.results) else 0
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
        return exit_code
    if not analysis.results:
        print(f"{analysis.path.name}: no kernels found")
    for result in analysis.results:
        print(f"{analysis.path.name}:{result.kernel.signature.start_line + 1}: {result.kernel.name}")
        if result.kernel.container == "kernelbench":
            inside = [r.kernel for r in analysis.results if r.part_of == result.kernel.name]
            languages = " and ".join(sorted({_LANGUAGE_WORDS.get(kernel.language, kernel.language) for kernel in inside}))
            print(
                f"    compiled as its {languages} kernels: {', '.join(kernel.name for kernel in inside)}"
                if inside
                else "    no compilable kernel: no CUDA in load_inline strings and no @triton.jit kernel"
            )
        elif result.facts is not None:
            for line in result.facts.hover_lines(markdown=False):
                print(f"    {line}")
            for problem in result.facts.hint_problems():
                print(f"    hint: {problem}")
        else:
            print(f"    no facts: {result.facts_error or 'not a CUDA or Triton kernel'}")
    return exit_code


def _tolerance_argument(text: str) -> str | float:
    from kernelcast.wire import parse_tolerance

    try:
        return parse_tolerance(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _measure(args: argparse.Namespace) -> int:
    from kernelcast.analysis import measurement_sides
    from kernelcast.kernels_runtime.measure import measure_pair, measurement_notes
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
        outcome = measure_pair(
            candidate,
            reference,
            progress=lambda text, percent: print(f"  [{percent:3.0f}%] {text}", file=sys.stderr),
            tolerance=args.tolerance,
        )
        if isinstance(outcome, Measurement):
            message = f"{outcome.message()}; {measurement_notes(outcome.details)}"
            line = {"kernel": result.kernel.name, "message": message, "measurement": outcome.to_json()}
        else:
            exit_code = 1
            line = {"kernel": result.kernel.name, "failure": outcome.kind, "message": outcome.message, **outcome.details}
        print(json.dumps(line) if args.json else f"{result.kernel.name}: {line['message']}")
    return exit_code


def _eval(args: argparse.Namespace) -> int:
    from kernelcast.evaluation import run

    if args.forecasts and args.backend:
        print("kernelcast eval: --forecasts judges forecasts already made; give it or --backend, not both", file=sys.stderr)
        return 2
    return run(
        Path(args.pairs),
        args.backend or "embedded",
        _backend_options(args),
        Path(args.report) if args.report else None,
        not args.no_facts,
        args.jobs,
        Path(args.forecasts) if args.forecasts else None,
    )


def _rank(args: argparse.Namespace) -> int:
    from kernelcast.rank.command import run

    return run(args)


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
    from kernelcast.wire import code_build, read_state

    report: dict[str, Any] = {"kernelcast": __version__, "python": sys.version.split()[0]}
    gpus = detect_local_gpus()
    report["gpu"] = [f"{g.name} ({g.spec.arch}, driver {g.spec.driver})" for g in gpus] or "none detected (nvidia-ml-py or driver absent)"
    nvcc = shutil.which("nvcc")
    report["nvcc"] = _first_line([nvcc, "--version"], last=True) if nvcc else "not found"
    for module in ("torch", "triton", "cupy", "cuda.core", "pynvml"):
        report[module] = "installed" if _module_exists(module) else "not installed"
    wanted = args.backend or backends.known_backends()
    unknown = sorted(set(wanted) - set(backends.known_backends()))
    if unknown:
        print(f"kernelcast doctor: unknown backend {', '.join(unknown)}; known: {', '.join(backends.known_backends())}", file=sys.stderr)
        return 2
    report["backends"] = {
        entry["name"]: ("ok: " if entry["available"] else "unavailable: ") + entry["detail"]
        for entry in backends.describe_backends(_backend_options(args), wanted)
    }
    report["cache_dir"] = str(paths.cache_dir())
    state = read_state(_state_dir(args))
    if state is None:
        report["service"] = "not running (started on first need)"
    else:
        other = "" if state.get("build") == code_build() else f"; another build ({state.get('build', 'unknown')}): editors replace it"
        report["service"] = f"running at {state['url']} (pid {state['pid']}{other}); `kernelcast serve --stop` stops it"
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


JOBS_HELP = "processes reading pairs and compiling their facts in parallel (default: the CPU count)"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


ALLOW_OUTSIDE_HELP = (
    "read a reference outside the workspace (the git top, else the file's folder), as the editor's allowReferencesOutsideWorkspace"
)


def build_parser() -> argparse.ArgumentParser:
    from kernelcast.kernels_runtime.hardware import SPECS

    parser = argparse.ArgumentParser(prog="kernelcast", description="Performance forecasts for GPU kernels.")
    parser.add_argument("--version", action="version", version=f"kernelcast {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    lsp = commands.add_parser("lsp", help="run the language server on stdio")
    lsp.add_argument("--stdio", action="store_true", help="stdio is the only transport; accepted because LSP clients add it")
    lsp.set_defaults(run=_lsp)

    serve = commands.add_parser("serve", help="run the forecaster service on loopback")
    serve.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=0, help="port (default: any free port, written to the state file)")
    serve.add_argument("--backend", action="append", help="backend to serve; repeat for several (default: embedded)")
    serve.add_argument("--state-dir", help="where the token and state file live (default: per-user cache)")
    serve.add_argument(
        "--idle-timeout",
        type=float,
        default=30.0,
        metavar="MINUTES",
        help="exit after this many minutes without requests; 0: never (default 30; the editor starts a new one when needed)",
    )
    serve.add_argument("--stop", action="store_true", help="stop the running service (of --state-dir) and exit")
    _add_backend_flags(serve)
    serve.set_defaults(run=_serve)

    forecast = commands.add_parser("forecast", help="forecast the kernels of a file against their references")
    forecast.add_argument("file", nargs="?", help=".cu, .cuh or .py file")
    forecast.add_argument("--kernel", help="only this kernel")
    forecast.add_argument("--reference", help="reference as path[::kernel], the path from the current folder (overrides pragma and config)")
    forecast.add_argument(
        "--gpu",
        help=f"target GPU: {', '.join(SPECS)} (default: the project's target_gpu, else the local GPU, else H100-SXM)",
    )
    forecast.add_argument("--backend", default="embedded", help="forecaster backend (default: embedded)")
    forecast.add_argument("--threshold", type=float, default=0.8, help="confidence below which to defer (default 0.8)")
    forecast.add_argument("--allow-references-outside-workspace", action="store_true", help=ALLOW_OUTSIDE_HELP)
    forecast.add_argument("--json", action="store_true", help="print JSON")
    forecast.add_argument("--no-facts", action="store_true", help="skip compiling for registers/occupancy (faster)")
    forecast.add_argument("--batch", help="JSONL of pairs to forecast")
    forecast.add_argument("--out", help="JSONL to write forecasts to (with --batch)")
    forecast.add_argument("--jobs", type=_positive_int, default=None, help=JOBS_HELP)
    _add_backend_flags(forecast)
    forecast.set_defaults(run=_forecast)

    evaluation = commands.add_parser("eval", help="score a backend on pairs with measured speedups (metrics of docs/forecast.md)")
    evaluation.add_argument("pairs", help="labelled pairs, JSONL (kernelcast/wire.py)")
    evaluation.add_argument("--backend", default=None, help="forecaster backend (default: embedded)")
    evaluation.add_argument(
        "--forecasts",
        metavar="FORECASTS.jsonl",
        help="judge these forecasts ({id, probabilities} lines: held-out forecasts of a training run, another eval's "
        "predictions.jsonl) instead of running a backend",
    )
    evaluation.add_argument("--report", help="folder for metrics.json, report.md, predictions.jsonl and plots")
    evaluation.add_argument("--no-facts", action="store_true", help="skip compiling facts for pair sides that have none (faster)")
    evaluation.add_argument("--jobs", type=_positive_int, default=None, help=JOBS_HELP)
    _add_backend_flags(evaluation)
    evaluation.set_defaults(run=_eval)

    rank = commands.add_parser("rank", help="find the fastest of many variants, measuring only what forecasts cannot settle")
    from kernelcast.rank.command import add_arguments as add_rank_arguments

    add_rank_arguments(rank)
    rank.set_defaults(run=_rank)

    facts = commands.add_parser("facts", help="compiler facts (registers, shared memory, spills, occupancy, SASS mix) of a file's kernels")
    facts.add_argument("file")
    facts.add_argument("--kernel", help="only this kernel")
    facts.add_argument("--gpu", help="target GPU (default: the project's target_gpu, else the local GPU, else H100-SXM)")
    facts.add_argument("--allow-references-outside-workspace", action="store_true", help=ALLOW_OUTSIDE_HELP)
    facts.add_argument("--json", action="store_true")
    facts.set_defaults(run=_facts)

    measure = commands.add_parser("measure", help="check and time a file's kernels against their references on the local GPU")
    measure.add_argument("file")
    measure.add_argument("--kernel", help="only this kernel")
    measure.add_argument("--reference", help="reference as path[::kernel], the path from the current folder (overrides pragma and config)")
    measure.add_argument("--gpu", help=argparse.SUPPRESS)
    measure.add_argument("--allow-references-outside-workspace", action="store_true", help=ALLOW_OUTSIDE_HELP)
    measure.add_argument("--json", action="store_true")
    measure.add_argument(
        "--tolerance",
        type=_tolerance_argument,
        default="auto",
        help="atol = rtol for the output check: auto (KernelBench's 1e-2 for KernelBench files, the strict per-dtype table "
        "for .cu/Triton), strict, kernelbench, or a number",
    )
    measure.set_defaults(run=_measure)

    calibrate = commands.add_parser("calibrate-hw", help="measure this GPU's copy bandwidth and bf16 matmul rate")
    calibrate.add_argument("--gpu-index", type=int, default=0)
    calibrate.set_defaults(run=_calibrate_hw)

    reset_learning = commands.add_parser("reset-learning", help="forget what forecasts learnt from your measurements")
    reset_learning.set_defaults(run=_reset_learning)

    doctor = commands.add_parser("doctor", help="report what kernelcast can use on this machine (takes the flags of serve)")
    doctor.add_argument("--json", action="store_true")
    doctor.add_argument("--backend", action="append", help="report only these backends (as serve's --backend)")
    doctor.add_argument("--state-dir", help="the service's folder, as serve's --state-dir (default: per-user cache)")
    _add_backend_flags(doctor)
    doctor.set_defaults(run=_doctor)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args))
