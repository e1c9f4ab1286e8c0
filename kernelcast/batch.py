"""Many pairs at once, read as the editor reads files: `kernelcast forecast --batch` and the facts
`kernelcast eval` adds to its pairs.

A batch line's sides are written to a folder of their own and the candidate's file is analysed
as the editor analyses it (analysis.py), with the reference file as its reference: the same
kernels, launch pragmas, sizes and compiler facts, so a search loop or CI gets the forecast the
editor shows. Lines are read in parallel processes; compiles go through the disk cache, where
the editor finds them too, so a second run is fast.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from kernelcast.progress import Progress
from kernelcast.wire import Forecast, ForecastRequest, KernelSide, LabelledPair

DEFAULT_GPU = "H100-SXM"
# A side's language → the suffix its file is written with: discovery reads kernels by it.
SUFFIXES = {"cuda": ".cu", "triton": ".py", "pytorch": ".py"}
# CUDA written in Python: a KernelBench ModelNew, load_inline or CuPy strings. Read as a .py file, as the editor reads it.
_CUDA_IN_PYTHON = re.compile(r"^(?:class\s+ModelNew\b|import\s+\w|from\s+[\w.]+\s+import\b)", re.M)


def file_suffix(side: KernelSide) -> str:
    """The file name ending the editor would have given this side's code."""
    return ".py" if side.language == "cuda" and _CUDA_IN_PYTHON.search(side.code) else SUFFIXES[side.language]


EDITOR_KERNELS = "a __global__ function, a @triton.jit function or a KernelBench ModelNew"

_cache: Any = None


def default_jobs() -> int:
    """The CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _disk_cache() -> Any:
    """One ResultCache per process (the parent's, or a pool worker's)."""
    global _cache
    if _cache is None:
        from kernelcast import paths
        from kernelcast.cache import ResultCache

        _cache = ResultCache(paths.cache_dir())
    return _cache


def _hardware(gpu: Any, key: str = "gpu") -> Any:
    """A GPU name (as --gpu takes it) or a spec object, given under `key`; ValueError in words otherwise."""
    from kernelcast.kernels_runtime.hardware import GpuSpec, lookup

    if isinstance(gpu, str):
        try:
            return lookup(gpu)
        except KeyError as error:
            raise ValueError(error.args[0]) from None
    if isinstance(gpu, dict):
        try:
            return GpuSpec.from_json(gpu)
        except KeyError as error:
            raise ValueError(f"{key}: a spec object needs {error.args[0]!r}; or give a name such as {DEFAULT_GPU}") from None
        except (TypeError, ValueError) as error:
            raise ValueError(f"{key}: not a GPU spec ({error}); give a name such as {DEFAULT_GPU}") from None
    raise ValueError(f"{key} must be a name such as {DEFAULT_GPU} or a spec object, got {gpu!r}")


def _request_hardware(spec: Any) -> Any:
    """A forecast request's `hardware`: a whole spec, else the GPU its `key` names (the default
    without one)."""
    if isinstance(spec, dict) and "compute_capability" not in spec:
        return _hardware(spec.get("key", DEFAULT_GPU), "hardware")
    return _hardware(spec, "hardware")


def _line_hardware(line: dict[str, Any]) -> Any:
    """The line's `gpu`, or its `hardware` read as a forecast request's (as `kernelcast eval` reads a
    pair's), so that a request copied into a batch is forecast for its GPU rather than the default."""
    if "gpu" in line and "hardware" in line:
        raise ValueError("give the GPU once: 'gpu' (a name or a spec object) or 'hardware' (a request's spec), not both")
    return _request_hardware(line["hardware"]) if "hardware" in line else _hardware(line.get("gpu", DEFAULT_GPU))


def editor_request(line: dict[str, Any], threshold: float, compile_facts: bool) -> tuple[ForecastRequest, list[str]]:
    """The request the editor would send for this batch line, with what the editor would note
    about the files (an ignored pragma, a reference read as given); ValueError says why none."""
    from kernelcast.analysis import analyse_text, build_request, fill_facts, problem_sizes
    from kernelcast.kernels_runtime.cuda_facts import first_error_line
    from kernelcast.references import OVERRIDE_ORIGIN, Reference
    from kernelcast.settings import Settings

    if not isinstance(line, dict):
        raise ValueError("a line is a JSON object with 'reference' and 'candidate'")
    sides = {}
    for role in ("reference", "candidate"):
        if role not in line:
            raise ValueError(f"a line needs '{role}'")
        try:
            sides[role] = KernelSide.from_json(line[role])
        except ValueError as error:
            raise ValueError(f"{role}: {error}") from None
    problem = line.get("problem")
    if problem is not None and not isinstance(problem, dict):
        raise ValueError('problem must be an object of sizes, e.g. {"N": 4096}')
    kernelbench_problem = line.get("kernelbench_problem")
    if kernelbench_problem is not None and not isinstance(kernelbench_problem, str):
        raise ValueError("kernelbench_problem must be the text of the KernelBench problem file the two solutions solve")
    hardware = _line_hardware(line)
    reference, candidate = sides["reference"], sides["candidate"]
    with tempfile.TemporaryDirectory(prefix="kernelcast-batch-") as folder:
        root = Path(folder).resolve()
        # The problem goes where the editor looks for it, beside the candidate (KernelBench's reference.py).
        reference_name = "reference" if kernelbench_problem is None else "other_solution"
        reference_path = root / f"{reference_name}{file_suffix(reference)}"
        candidate_path = root / f"candidate{file_suffix(candidate)}"
        reference_path.write_text(reference.code, encoding="utf-8")
        candidate_path.write_text(candidate.code, encoding="utf-8")
        if kernelbench_problem is not None:
            (root / "reference.py").write_text(kernelbench_problem, encoding="utf-8")
        override = f"{reference_path}::{reference.name}" if reference.name else str(reference_path)
        analysis = analyse_text(candidate_path.as_uri(), None, candidate.code, candidate_path, root, Settings(), hardware, override)
        if analysis.disabled_reason:
            raise ValueError(f"candidate: {analysis.disabled_reason}")
        notes = list(analysis.problems)
        if not analysis.results and _plain_python(candidate_path, candidate.code):
            # Plain PyTorch (no KernelBench ModelNew): the editor has no reading of it; it is read as given.
            result = _whole_text(analysis, candidate, root, override)
            notes.append(f"candidate read as given{_as_pytorch(candidate)}: it holds no kernel and no KernelBench ModelNew")
        else:
            result, read_through = _candidate_result(analysis, candidate.name)
            notes += [f"candidate: {read_through}"] if read_through else []
        if result.reference is None:
            if _has_kernels(reference_path) or not _plain_python(reference_path, reference.code):
                # The reason names the temporary file as a --reference; the line's reference is meant.
                raise ValueError(f"reference: {(result.no_reference or '').replace(f'{OVERRIDE_ORIGIN}: {override}: ', '')}")
            # Plain PyTorch (no KernelBench Model): the editor has no reading of it; it is read as given.
            result.reference = Reference(reference.code, "pytorch", reference.name, "batch", "as given", None, None)
            notes.append(f"reference read as given{_as_pytorch(reference)}: it holds no kernel and no KernelBench Model")
        if result.unchanged:
            notes.append("same code as the reference")
        analysis.results = [result]
        if compile_facts:
            fill_facts(analysis, _disk_cache(), True, lambda: True)
        if result.facts_error:
            notes.append(f"{result.kernel.name}: no compiler facts: {first_error_line(result.facts_error)}")
        sizes = problem_sizes(result, candidate_path, root)
        if problem:
            sizes = {**(sizes or {}), **problem}
        request = build_request(analysis, result, sizes, threshold)
    if isinstance(line.get("backend"), str):
        request.backend = line["backend"]
    return request, notes


def _candidate_result(analysis: Any, name: str | None) -> tuple[Any, str | None]:
    """The candidate's kernel the line means: the named one (or the one the named host function
    launches, with a note saying so), else the file's only one."""
    from kernelcast.kernels_runtime.source.entry_points import kernel_meant, no_kernel_meant

    shown = [result for result in analysis.results if result.part_of is None]
    kernels = [result.kernel.name for result in shown]
    names = ", ".join(kernels)
    if name is not None:
        meant, read_through = kernel_meant(analysis.text, str(analysis.path), name, kernels)
        if meant is None:
            raise ValueError(f"candidate: {no_kernel_meant(name, kernels)}")
        return shown[kernels.index(meant)], read_through
    if not shown:
        found = "; ".join(analysis.problems)
        raise ValueError(f"candidate: no kernel found ({EDITOR_KERNELS})" + (f": {found}" if found else ""))
    if len(shown) > 1:
        raise ValueError(f"candidate: {len(shown)} kernels ({names}); name one in candidate.name")
    return shown[0], None


def _whole_text(analysis: Any, side: KernelSide, root: Path, override: str) -> Any:
    """A side's whole text as one PyTorch "kernel", with the line's reference resolved for it."""
    from kernelcast.analysis import KernelResult, attach_reference
    from kernelcast.kernels_runtime.source.discovery import DiscoveredKernel, Span
    from kernelcast.project_config import load_project_config

    whole = Span(0, 0, len(analysis.lines), 0)
    result = KernelResult(DiscoveredKernel(side.name or "candidate", "pytorch", whole, whole, side.code, None))
    attach_reference(result, analysis.discovery, analysis.path, root, load_project_config(analysis.path, root), False, override)
    return result


def _plain_python(path: Path, code: str) -> bool:
    """Whether a side is Python that parses: a side without kernels is then PyTorch (an agent's
    candidate labelled Triton that fell back to torch calls), not a half-written kernel file."""
    from kernelcast.kernels_runtime.source.host_values import parse_module

    return path.suffix == ".py" and parse_module(code) is not None


def _as_pytorch(side: KernelSide) -> str:
    return "" if side.language == "pytorch" else f" as PyTorch (its language says {side.language})"


def _has_kernels(path: Path) -> bool:
    from kernelcast.kernels_runtime.source.discovery import discover

    found = discover(path.read_text(encoding="utf-8"), str(path))
    return bool(found.kernels or found.reference_model)


def prepare_line(number: int, text: str, threshold: float, compile_facts: bool) -> dict[str, Any]:
    """One line of a batch file → {"id", "request", "notes"} or {"id", "error"}; runs in a pool worker."""
    pair_id: Any = number
    try:
        line = json.loads(text)
        if isinstance(line, dict):
            pair_id = line.get("id", number)
        request, notes = editor_request(line, threshold, compile_facts)
    except json.JSONDecodeError as error:
        return {"id": pair_id, "error": f"line {number}: not JSON ({error.msg})"}
    except (ValueError, OSError) as error:
        return {"id": pair_id, "error": f"line {number}: {error}"}
    return {"id": pair_id, "request": request.to_json(), "notes": notes}


def in_parallel(job: Callable[..., Any], arguments: list[tuple[Any, ...]], jobs: int, progress: Progress) -> Iterator[tuple[int, Any]]:
    """(index, result) of `job` on each argument tuple as they finish, in `jobs` spawned processes
    (in this one when one is enough). A job that died (a worker killed) yields the exception."""
    if jobs <= 1 or len(arguments) <= 1:
        for index, args in enumerate(arguments):
            try:
                result = job(*args)
            except Exception as error:  # any bug of one line must not lose the others
                result = error
            progress.advance()
            yield index, result
        return
    with ProcessPoolExecutor(min(jobs, len(arguments)), mp_context=get_context("spawn")) as pool:
        futures: dict[Future[Any], int] = {pool.submit(job, *args): index for index, args in enumerate(arguments)}
        for future in as_completed(futures):
            progress.advance()
            try:
                yield futures[future], future.result()
            except Exception as error:
                yield futures[future], error


def forecast_batch(batch: Path, out: Path, forecaster: Any, threshold: float, compile_facts: bool, jobs: int) -> int:
    """`kernelcast forecast --batch`: one output line per input line, in order; exit 1 when any failed, 2 when the input cannot be read."""
    try:
        lines = [(number, text) for number, text in enumerate(batch.read_text(encoding="utf-8").splitlines(), 1) if text.strip()]
    except (OSError, UnicodeDecodeError) as error:
        print(f"kernelcast forecast: cannot read {batch}: {getattr(error, 'strerror', None) or error}", file=sys.stderr)
        return 2
    try:
        sink = open(out, "w", encoding="utf-8")
    except OSError as error:
        print(f"kernelcast forecast: cannot write {out}: {error.strerror}", file=sys.stderr)
        return 2
    prepared: list[dict[str, Any]] = [{} for _ in lines]
    progress = Progress("kernelcast forecast: read", len(lines))
    arguments = [(number, text, threshold, compile_facts) for number, text in lines]
    for index, outcome in in_parallel(prepare_line, arguments, jobs, progress):
        number = lines[index][0]
        prepared[index] = outcome if isinstance(outcome, dict) else {"id": number, "error": f"line {number}: failed: {outcome!r}"}
    answers = _forecasts(forecaster, [ForecastRequest.from_json(entry["request"]) if "request" in entry else None for entry in prepared])
    failures = 0
    with sink:
        for (number, _), entry, answer in zip(lines, prepared, answers):
            output: dict[str, Any] = {"id": entry["id"]}
            if isinstance(answer, Forecast):
                output.update(answer.to_json())
                if entry["notes"]:
                    output["notes"] = entry["notes"]
            else:
                output["error"] = entry.get("error") or f"line {number}: {answer}"
            failures += "error" in output
            sink.write(json.dumps(output) + "\n")
    if failures:
        print(f"kernelcast forecast: {failures} line(s) could not be forecast; see 'error' in {out}", file=sys.stderr)
        return 1
    return 0


# Requests per forecaster call: a batching backend predicts a chunk at once.
FORECAST_CHUNK = 256


def _forecasts(forecaster: Any, requests: list[ForecastRequest | None]) -> list[Forecast | str | None]:
    """Each request's forecast, or why the backend gave none; None where there was no request.
    A chunk the backend fails on is asked again request by request, so one bad line loses only itself."""
    from kernelcast.models.service.llm_common import LLMBackendError

    answers: list[Forecast | str | None] = [None] * len(requests)
    asked = [index for index, request in enumerate(requests) if request is not None]
    for start in range(0, len(asked), FORECAST_CHUNK):
        chunk = asked[start : start + FORECAST_CHUNK]
        try:
            for index, forecast in zip(chunk, forecaster.forecast_many([requests[i] for i in chunk])):
                answers[index] = forecast
        except (ValueError, KeyError, LLMBackendError):
            for index in chunk:
                try:
                    answers[index] = forecaster.forecast(requests[index])
                except (ValueError, KeyError, LLMBackendError) as error:
                    answers[index] = str(error.args[0] if error.args else error)
    return answers


def request_with_facts(request: dict[str, Any]) -> dict[str, Any]:
    """A pair's request (JSON) with facts added to the sides that lack them; runs in a pool worker."""
    from kernelcast.analysis import read_as_the_editor

    parsed = ForecastRequest.from_json(request)
    hardware = _request_hardware(parsed.hardware)
    read, problems = read_as_the_editor(parsed, hardware, _disk_cache())
    return {"request": read.to_json(), "problems": problems}


def add_facts(pairs: list[LabelledPair], jobs: int) -> list[str]:
    """Compiler facts for every pair side that lacks them, compiled as the editor compiles them
    (in place); returns why a side got none, per pair."""
    wanting = [i for i, pair in enumerate(pairs) if any(_wants_facts(side) for side in (pair.request.reference, pair.request.candidate))]
    progress = Progress("kernelcast eval: compiler facts", len(wanting))
    problems = []
    arguments = [(pairs[index].request.to_json(),) for index in wanting]
    for position, outcome in in_parallel(request_with_facts, arguments, jobs, progress):
        pair = pairs[wanting[position]]
        if isinstance(outcome, dict):
            pair.request = ForecastRequest.from_json(outcome["request"])
            problems += [f"{pair.id}: {problem}" for problem in outcome["problems"]]
        else:
            problems.append(f"{pair.id}: no compiler facts: {outcome!r}")
    return problems


# How many sides without compiler facts `report_fact_problems` names before it counts the rest.
FACT_PROBLEMS_SHOWN = 5


def report_fact_problems(problems: list[str], program: str) -> None:
    """The first of `add_facts`' problems on stderr, then how many more: a run whose facts all failed
    (no nvcc, workers that could not start) must not pass for one that had them."""
    for problem in problems[:FACT_PROBLEMS_SHOWN]:
        print(f"{program}: {problem}", file=sys.stderr)
    if len(problems) > FACT_PROBLEMS_SHOWN:
        print(f"{program}: … and {len(problems) - FACT_PROBLEMS_SHOWN} more sides without compiler facts", file=sys.stderr)


def _wants_facts(side: KernelSide) -> bool:
    from kernelcast.analysis import FACT_LANGUAGES

    return not side.facts and side.language in FACT_LANGUAGES
