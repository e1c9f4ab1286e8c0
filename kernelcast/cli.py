"""The `kernelcast` command: one entry point for the editor, the service and people.

Sub-commands import what they need when they run, so `kernelcast lsp` does not
pay for the forecaster service and `kernelcast forecast` does not pay for pygls.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from kernelcast import __version__


def _lsp(args: argparse.Namespace) -> int:
    from kernelcast.server.app import run_stdio

    run_stdio()
    return 0


def _serve(args: argparse.Namespace) -> int:
    from kernelcast import paths
    from kernelcast.models.service import serve

    state_dir = paths.private_dir(Path(args.state_dir)) if args.state_dir else paths.service_dir()
    try:
        serve(state_dir, args.backend or ["embedded"], host=args.host, port=args.port)
    except (ValueError, KeyError, OSError) as error:
        print(f"kernelcast serve: {error}", file=sys.stderr)
        return 2
    return 0


def _forecast(args: argparse.Namespace) -> int:
    from kernelcast.kernels_runtime.hardware import resolve_target
    from kernelcast.models.forecaster import Forecaster

    try:
        hardware = resolve_target(args.gpu)
        forecaster = Forecaster([args.backend])
    except KeyError as error:
        print(f"kernelcast forecast: {error.args[0]}", file=sys.stderr)
        return 2
    if args.batch:
        return _forecast_batch(args, forecaster)
    if not args.file:
        print("kernelcast forecast: give a FILE, or --batch IN.jsonl --out OUT.jsonl", file=sys.stderr)
        return 2
    return _forecast_file(args, forecaster, hardware)


def _forecast_file(args: argparse.Namespace, forecaster: Any, hardware: Any) -> int:
    from kernelcast.forecast import ForecastRequest, KernelSide
    from kernelcast.kernels_runtime.discovery import discover_bytes, normalise_code
    from kernelcast.kernels_runtime.project_config import load_project_config
    from kernelcast.kernels_runtime.references import NoReference, resolve_reference

    path = Path(args.file).resolve()
    try:
        data = path.read_bytes()
    except OSError as error:
        print(f"kernelcast forecast: cannot read {args.file}: {error.strerror}", file=sys.stderr)
        return 2
    discovery = discover_bytes(data, str(path))
    if args.reference:
        discovery = dataclasses.replace(discovery, pragmas=dataclasses.replace(discovery.pragmas, reference=args.reference))
    root = _workspace_root(path)
    config = load_project_config(path, root)
    kernels = [k for k in discovery.kernels if args.kernel in (None, k.name)]
    rows: list[dict[str, Any]] = []
    problems = list(discovery.problems) + list(discovery.pragmas.problems) + list(config.problems)
    if args.kernel and not kernels:
        names = ", ".join(k.name for k in discovery.kernels) or "none"
        problems.append(f"no kernel named {args.kernel!r} (kernels here: {names})")
    for kernel in kernels:
        row: dict[str, Any] = {"kernel": kernel.name, "language": kernel.language, "line": kernel.signature.start_line + 1}
        found = resolve_reference(kernel, discovery, path, root, config, allow_outside_workspace=True)
        if isinstance(found, NoReference):
            row["no_reference"] = found.reason
        elif normalise_code(kernel.code, kernel.language) == normalise_code(found.code, found.language):
            row.update(reference=found.description, unchanged=True)
        else:
            problem = {**config.problem, **(found.problem or {})} or None
            request = ForecastRequest(
                reference=KernelSide(found.code, found.language, found.name),
                candidate=KernelSide(kernel.code, kernel.language, kernel.name),
                hardware={**hardware.to_json(), "fingerprint": hardware.fingerprint()},
                problem=problem,
                threshold=args.threshold,
            )
            result = forecaster.forecast(request)
            row.update(reference=found.description, message=result.message(), forecast=result.to_json())
        rows.append(row)
    if args.json:
        print(json.dumps({"file": str(path), "gpu": hardware.key, "kernels": rows, "problems": problems}, indent=2))
    else:
        for problem in problems:
            print(f"note: {problem}")
        for row in rows:
            words = row.get("message") or row.get("no_reference") or "same code as the reference"
            print(f"{path.name}:{row['line']}: {row['kernel']}: {words}")
            if "reference" in row:
                print(f"    reference: {row['reference']} · GPU: {hardware.name}")
        if not rows:
            print(f"{path.name}: no kernels forecast")
    return 0 if rows else 1


def _forecast_batch(args: argparse.Namespace, forecaster: Any) -> int:
    from kernelcast.forecast import ForecastRequest
    from kernelcast.kernels_runtime.hardware import lookup

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


def _workspace_root(path: Path) -> Path | None:
    """The git top of the file's folder, else its folder: where references may point."""
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=path.parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return path.parent
    return Path(top.stdout.strip()) if top.returncode == 0 else path.parent


def _doctor(args: argparse.Namespace) -> int:
    from kernelcast import paths
    from kernelcast.kernels_runtime.hardware import detect_local_gpus
    from kernelcast.models import backends
    from kernelcast.models.service import read_state

    report: dict[str, Any] = {"kernelcast": __version__, "python": sys.version.split()[0]}
    gpus = detect_local_gpus()
    report["gpu"] = [f"{g.name} ({g.spec.arch}, driver {g.spec.driver})" for g in gpus] or "none detected (nvidia-ml-py or driver absent)"
    nvcc = shutil.which("nvcc")
    report["nvcc"] = _first_line([nvcc, "--version"], last=True) if nvcc else "not found"
    for module in ("torch", "triton", "cupy", "cuda.core", "pynvml"):
        report[module] = "installed" if _module_exists(module) else "not installed"
    statuses = {}
    for name in backends.known_backends():
        try:
            status = backends.create(name).status()
            statuses[name] = ("ok: " if status.available else "unavailable: ") + status.detail
        except Exception as error:  # a broken optional backend is reported, not fatal
            statuses[name] = f"unavailable: {error}"
    report["backends"] = statuses
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
    serve.set_defaults(run=_serve)

    forecast = commands.add_parser("forecast", help="forecast the kernels of a file against their references")
    forecast.add_argument("file", nargs="?", help=".cu, .cuh or .py file")
    forecast.add_argument("--kernel", help="only this kernel")
    forecast.add_argument("--reference", help="reference as path[::kernel] (overrides pragma and config)")
    forecast.add_argument("--gpu", help="target GPU (H100-SXM, H100-PCIe, H200, A100, L40S, RTX4090, B200)")
    forecast.add_argument("--backend", default="embedded", help="forecaster backend (default: embedded)")
    forecast.add_argument("--threshold", type=float, default=0.8, help="confidence below which to defer (default 0.8)")
    forecast.add_argument("--json", action="store_true", help="print JSON")
    forecast.add_argument("--batch", help="JSONL of pairs to forecast")
    forecast.add_argument("--out", help="JSONL to write forecasts to (with --batch)")
    forecast.set_defaults(run=_forecast)

    doctor = commands.add_parser("doctor", help="report what kernelcast can use on this machine")
    doctor.add_argument("--json", action="store_true")
    doctor.set_defaults(run=_doctor)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args))
