"""One file's way from text to forecast requests: discover kernels, find their references,
read launches and sizes, build requests, compile facts (cached).

Shared by the language server and the CLI, so both see the same kernels, references and
numbers; nothing here speaks LSP or HTTP (the server's forecasts.py asks the forecaster).
Runs in the server's per-file background task, so no LSP handler waits on it.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from stat import S_ISREG
from typing import Any

from kernelcast.cache import ResultCache, content_key
from kernelcast.kernels_runtime.cuda_facts import first_error_line, torch_included, with_torch_types
from kernelcast.kernels_runtime.facts import FactsResult, KernelFacts, compile_facts
from kernelcast.kernels_runtime.facts import cache_key as facts_cache_key
from kernelcast.kernels_runtime.hardware import GpuSpec
from kernelcast.kernels_runtime.source.alternatives import one_path_each
from kernelcast.kernels_runtime.source.cuda_text import template_instances, without_extension_code
from kernelcast.kernels_runtime.source.discovery import DiscoveredKernel, Discovery, discover, normalise_code
from kernelcast.kernels_runtime.source.entry_points import kernel_meant, launched_by, no_kernel_meant
from kernelcast.kernels_runtime.source.host_launch import host_launch
from kernelcast.kernels_runtime.source.launch_spec import (
    GUESSED_CONFIG,
    GUESSED_GRID,
    TRITON_LAUNCH_OPTIONS,
    LaunchSpec,
    LaunchSpecError,
    as_cuda_pragma,
    find_launch_spec,
    kernelbench_input_shapes,
    with_problem_inputs,
)
from kernelcast.kernels_runtime.source.model_layers import kernelbench_init_values
from kernelcast.kernels_runtime.source.timed_path import NO_INPUTS, Inputs, guessed_trips
from kernelcast.project_config import ProjectConfig, load_project_config
from kernelcast.references import FILE_ORIGINS, KERNELBENCH_ORIGIN, NoReference, Reference, kernelbench_problem_of, resolve_reference
from kernelcast.settings import Settings
from kernelcast.wire import (
    ASSUMED_CANDIDATE_CONFIG,
    ASSUMED_CANDIDATE_GRID,
    ASSUMED_CANDIDATE_LAUNCH,
    ASSUMED_CANDIDATE_LOOPS,
    ASSUMED_REFERENCE_CONFIG,
    ASSUMED_REFERENCE_GRID,
    ASSUMED_REFERENCE_LAUNCH,
    ASSUMED_REFERENCE_LOOPS,
    ASSUMED_SIZES,
    Forecast,
    ForecastRequest,
    KernelSide,
    Measurement,
)

logger = logging.getLogger(__name__)

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_LSP_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
# A generated file with thousands of kernels would hold its first hint back for minutes
# (one reference lookup and one forecast each); hand-written files have a few.
MAX_KERNELS = 100
# The class a KernelBench solution file defines: its kernels are launched from its host code.
KERNELBENCH_CLASS = "ModelNew"


@dataclass
class KernelResult:
    kernel: DiscoveredKernel
    reference: Reference | None = None
    no_reference: str | None = None
    forecast: Forecast | None = None
    measurement: Measurement | None = None
    unavailable: str | None = None  # why the forecaster gave no answer
    stands_in_for: str | None = None  # the configured backend whose forecast will replace the one shown
    stand_in_failure: str | None = None  # why that backend did not answer: the stand-in's forecast stays
    unchanged: bool = False  # candidate's code equals the reference's
    # A KernelBench solution's problem where its reference is another file (a solution): the inputs both are timed on.
    problem_model: Reference | None = None
    part_of: str | None = None  # a kernel inside a KernelBench ModelNew: forecast as part of it
    computed_at: float | None = None
    from_cache: bool = False
    launch: LaunchSpec | None = None  # its launch pragma
    launch_error: str | None = None
    host_launch: LaunchSpec | None = None  # without a pragma: the launch its file's host code makes
    facts: KernelFacts | None = None
    reference_facts: KernelFacts | None = None
    facts_error: str | None = None


@dataclass
class FileAnalysis:
    uri: str
    version: int | None
    text: str
    path: Path
    discovery: Discovery
    results: list[KernelResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    disabled_reason: str | None = None  # `kernelcast: off`, excluded, …
    hardware: GpuSpec | None = None
    # Reference files as read for this version of the text (`_reference_file`).
    reference_files: dict[str, str] = field(default_factory=dict)  # by path

    @property
    def lines(self) -> list[str]:
        """Lines as LSP counts them: str.splitlines also breaks at U+2028, form feeds and more,
        which would put every position below one on the wrong line."""
        return _LSP_LINE.findall(self.text) or [""]

    def result_at(self, line: int) -> KernelResult | None:
        """The kernel whose definition spans `line` (innermost first)."""
        matches = [r for r in self.results if r.kernel.body.start_line <= line <= r.kernel.body.end_line]
        return min(matches, key=lambda r: r.kernel.body.end_line - r.kernel.body.start_line, default=None)


def forecast_key(request: ForecastRequest, backend: Any) -> str:
    """Everything the forecaster sees (code with its macros, facts with the launch, sizes, GPU) and which backend answers."""
    sides = (request.candidate, request.reference)
    return content_key(
        "forecast",
        {
            "candidate": normalise_code(request.candidate.code, request.candidate.language),
            "reference": normalise_code(request.reference.code, request.reference.language),
            "languages": [side.language for side in sides],
            "facts": [side.facts for side in sides],
            "problem": request.problem or {},
            "assumed": list(request.assumed),
            "hardware": request.hardware.get("fingerprint"),
            "backend": [backend.name, backend.model_id, backend.version, backend.calibration_version],
        },
    )


def measurement_key(kernel: DiscoveredKernel, reference: Reference, problem: dict[str, Any] | None, hardware: GpuSpec) -> str:
    return content_key(
        "measurement",
        {
            "candidate": normalise_code(kernel.code, kernel.language),
            "reference": normalise_code(reference.code, reference.language),
            "problem": problem or {},
            "gpu": hardware.fingerprint(),
        },
    )


def measured_on(outcome: Measurement, hardware: GpuSpec) -> bool:
    """Whether the GPU that measured is the one forecasts are for (the measurement names it as
    its spec key's first part), so its labelled pair may correct that GPU class's forecasts."""
    return outcome.gpu == hardware.key.split("-")[0]


def analyse_text(
    uri: str,
    version: int | None,
    text: str,
    path: Path,
    workspace_root: Path | None,
    settings: Settings,
    hardware: GpuSpec,
    reference_override: str | None = None,
) -> FileAnalysis:
    """The static part (no forecaster): kernels, pragmas, references. Safe to run in a thread.

    `reference_override` (path[::kernel], an absolute path) comes before the file's pragma, for `--reference`.
    """
    # A client may send lone surrogates (JSON "\udcff"); no encoder downstream takes them.
    # One U+FFFD each keeps every position where it was.
    text = _LONE_SURROGATE.sub("\ufffd", text)
    discovery = discover(text, str(path))
    analysis = FileAnalysis(
        uri, version, text, path, discovery, problems=list(discovery.problems) + list(discovery.pragmas.problems), hardware=hardware
    )
    if discovery.pragmas.off:
        analysis.disabled_reason = "kernelcast: off in this file"
        return analysis
    if settings.excludes(str(path)):
        analysis.disabled_reason = "excluded by the kernelcast.exclude setting"
        return analysis
    config = load_project_config(path, workspace_root)
    analysis.problems.extend(config.problems)
    if len(discovery.kernels) > MAX_KERNELS:
        analysis.problems.append(f"{len(discovery.kernels)} kernels in this file; kernelcast forecasts the first {MAX_KERNELS}")
    for kernel in discovery.kernels[:MAX_KERNELS]:
        result = KernelResult(kernel)
        try:
            result.launch = find_launch_spec(text, kernel.name, kernel.language)
        except LaunchSpecError as error:
            result.launch_error = f"{kernel.name}: launch pragma ignored: {error}"
            analysis.problems.append(result.launch_error)
        if result.launch is None and result.launch_error is None and kernel.language in FACT_LANGUAGES:
            result.host_launch = host_launch(text, kernel.name, kernel.language, python_file=path.suffix == ".py")
        if discovery.kind == "kernelbench" and kernel.name != KERNELBENCH_CLASS:
            result.part_of = KERNELBENCH_CLASS
            analysis.results.append(result)
            continue
        attach_reference(result, discovery, path, workspace_root, config, settings.allow_references_outside_workspace, reference_override)
        if result.unchanged and result.reference is not None:  # the same code launched otherwise is a change
            reference_launch = _launch_in(_reference_file(result.reference, analysis), result.reference)
            result.unchanged = _same_launch(result.launch or result.host_launch, reference_launch)
        analysis.results.append(result)
    return analysis


def _same_launch(one: LaunchSpec | None, other: LaunchSpec | None) -> bool:
    """Whether two launches are the same as the forecaster sees them (a side whose launch is not read counts as the same)."""
    if one is None or other is None:
        return True
    return {**one.as_launch(), "kernel": None} == {**other.as_launch(), "kernel": None}


def attach_reference(
    result: KernelResult,
    discovery: Discovery,
    path: Path,
    workspace_root: Path | None,
    config: ProjectConfig,
    allow_outside_workspace: bool,
    reference_override: str | None,
) -> None:
    """The kernel's reference, or why it has none, and whether its code is the reference's."""
    kernel = result.kernel
    found = resolve_reference(kernel, discovery, path, workspace_root, config, allow_outside_workspace, reference_override)
    if isinstance(found, NoReference):
        result.no_reference = found.reason
    else:
        result.reference = found
        result.unchanged = normalise_code(kernel.code, kernel.language) == normalise_code(found.code, found.language)
        if found.origin != KERNELBENCH_ORIGIN:  # KernelBench's own reference is the problem already
            problem = kernelbench_problem_of(kernel, discovery, path, workspace_root, allow_outside_workspace)
            result.problem_model = problem if problem is not None and problem.code != found.code else None


def problem_sizes(result: KernelResult, path: Path, workspace_root: Path | None) -> dict[str, Any] | None:
    config = load_project_config(path, workspace_root)
    sizes = dict(config.problem)
    if result.problem_model and result.problem_model.problem:
        sizes.update(result.problem_model.problem)
    if result.reference and result.reference.problem:
        sizes.update(result.reference.problem)
    if result.launch is not None:
        sizes.update(result.launch.problem_sizes())
    return sizes or None


def build_request(analysis: FileAnalysis, result: KernelResult, problem: dict[str, Any] | None, threshold: float) -> ForecastRequest:
    """The forecaster's input for one kernel and its reference, each shown as the corpus the
    embedded model learnt from shows kernels: with its file's preprocessor lines (the macros
    its indexes and tiles use) and, in its facts, the launch its pragma describes."""
    assert result.reference is not None and analysis.hardware is not None
    reference, kernel = result.reference, result.kernel
    reference_file = _reference_file(reference, analysis)
    reference_code, candidate_code, candidate_file = reference.code, kernel.code, analysis.text
    if result.problem_model is not None:  # two solutions: each read as timed, on the problem's inputs
        problem_text = _reference_file(result.problem_model, analysis)
        reference_file, reference_code, candidate_code, candidate_file = (
            with_problem_inputs(text, problem_text) for text in (reference_file, reference_code, candidate_code, candidate_file)
        )
    # A launch read from host code guesses what it leaves to run time as the problem's elements.
    elements = _elements(problem)
    inputs = problem_inputs(reference_file)
    reference_launch, candidate_launch, assumed = _stated_launches(analysis, result, elements, inputs)
    if result.launch is None and candidate_launch is not None:  # the reference's launch stands in: so do its sizes
        problem = {**candidate_launch.problem_sizes(), **(problem or {})}
    sides = (
        _side(
            reference_code, reference.language, reference.name, result.reference_facts, reference_file, reference_launch, inputs, elements
        ),
        _side(candidate_code, kernel.language, kernel.name, result.facts, candidate_file, candidate_launch, inputs, elements),
    )
    return ForecastRequest(
        reference=sides[0],
        candidate=sides[1],
        hardware={**analysis.hardware.to_json(), "fingerprint": analysis.hardware.fingerprint()},
        problem=_with_precision(problem, reference_launch, candidate_launch),
        threshold=threshold,
        assumed=(*assumed, *_unstated(problem, (reference_launch, candidate_launch), sides)),
    )


def _unstated(problem: dict[str, Any] | None, launches: tuple[LaunchSpec | None, ...], sides: tuple[KernelSide, ...]) -> list[str]:
    """What a request's launches leave assumed: the problem's sizes, where neither it nor a launch with
    a grid it read states how much work there is (the forecast is then made as for the corpus copies
    the weights learnt without sizes, whose spread covers not knowing them), and the trips of a
    non-CUDA side's host loops whose bounds its text does not fix (reference first)."""
    stating = [launch for launch in launches if launch is not None and GUESSED_GRID not in launch.guessed]
    sized = any(isinstance(value, (int, float)) for value in (problem or {}).values())
    loops = [words for side, words in zip(sides, _GUESSED_LOOPS) if side.language != "cuda" and guessed_trips(side.code)]
    return ([] if sized or stating else [ASSUMED_SIZES]) + loops


@dataclass(frozen=True)
class _LaunchedSide:
    code: str
    language: str
    name: str | None
    launch: LaunchSpec | None  # its launch pragma, else the launch its host code makes


# The words of a request for a side's host loops whose trips were guessed, reference first.
_GUESSED_LOOPS = (ASSUMED_REFERENCE_LOOPS, ASSUMED_CANDIDATE_LOOPS)
# The words of a request for the parts of a side's host launch it guessed (host_launch.py's `guessed`).
_GUESSED_WORDS = {
    ("candidate", GUESSED_GRID): ASSUMED_CANDIDATE_GRID,
    ("candidate", GUESSED_CONFIG): ASSUMED_CANDIDATE_CONFIG,
    ("reference", GUESSED_GRID): ASSUMED_REFERENCE_GRID,
    ("reference", GUESSED_CONFIG): ASSUMED_REFERENCE_CONFIG,
}


def _stated_launches(
    analysis: FileAnalysis, result: KernelResult, elements: int | None = None, inputs: Inputs = NO_INPUTS
) -> tuple[LaunchSpec | None, LaunchSpec | None, list[str]]:
    """The reference's and the candidate's launch as the request states them, and which were assumed.
    Each side's compiler facts are compiled with these too: a launch that stands in for a side's
    missing one sets that side's occupancy as well, so a copy is not read as slower for having none."""
    assert result.reference is not None
    reference, kernel = result.reference, result.kernel
    candidate_read = result.launch
    if candidate_read is None and result.host_launch is not None:
        candidate_read = host_launch(
            analysis.text, kernel.name, kernel.language, python_file=analysis.path.suffix == ".py", elements=elements, inputs=inputs
        )
    reference_read = _launch_in(_reference_file(reference, analysis), reference, elements)
    return _launches_or_assumed(
        _LaunchedSide(reference.code, reference.language, reference.name, reference_read),
        _LaunchedSide(kernel.code, kernel.language, kernel.name, candidate_read),
    )


def _launches_or_assumed(reference: _LaunchedSide, candidate: _LaunchedSide) -> tuple[LaunchSpec | None, LaunchSpec | None, list[str]]:
    """Each side's launch, and which were assumed. A CUDA or Triton side without a launch, where
    the other side has one, is a guess either way: read from its code alone, or, when the two kernels
    take the same parameters (a copy, an edit), launched as the other side is, the likelier guess.
    A launch read from host code names the parts it guessed (its grid, its config)."""
    launches = {"reference": reference.launch, "candidate": candidate.launch}
    assumed = [_GUESSED_WORDS[role, part] for role, launch in launches.items() if launch is not None for part in launch.guessed]
    for missing, known, words in ((candidate, reference, ASSUMED_CANDIDATE_LAUNCH), (reference, candidate, ASSUMED_REFERENCE_LAUNCH)):
        if missing.launch is not None or known.launch is None or known.launch.kind != "kernel" or missing.language not in FACT_LANGUAGES:
            continue
        if missing.name is not None and _same_kernel_parameters(missing, known):
            launches["candidate" if missing is candidate else "reference"] = replace(known.launch, kernel=missing.name)
        assumed.append(words)
    reference_launch, candidate_launch = launches["reference"], launches["candidate"]
    if reference_launch is not None and candidate_launch is not None and _same_kernel_parameters(reference, candidate):
        launches["reference"] = _on_the_problem_of(reference_launch, candidate_launch)
        launches["candidate"] = _on_the_problem_of(candidate_launch, reference_launch)
    return launches["reference"], launches["candidate"], assumed


def _same_kernel_parameters(first: _LaunchedSide, second: _LaunchedSide) -> bool:
    return first.language == second.language and (parameters := _parameters(first)) is not None and parameters == _parameters(second)


def _on_the_problem_of(launch: LaunchSpec, other: LaunchSpec) -> LaunchSpec:
    """`launch` run on the problem `other` states (a pragma), where `launch` was read from host code
    that left it to run time: each argument it left unknown (host code names a tensor, not its size;
    a size only known at run time) is `other`'s argument of that name, and a grid it guessed covers
    what `other`'s does: as many Triton programs, or, for 1-D CUDA blocks, as many threads in its own
    blocks. Otherwise the tutorial softmax under the pragma Measure proposes (1024 rows) read 3.6x
    faster than its reference, whose host code launches a program per row of an input it does not
    size, read as over a million rows of no bytes."""
    if launch.kind != "kernel" or other.kind != "kernel" or GUESSED_GRID in other.guessed:
        return launch
    stated = {arg.name: arg for arg in other.args if arg.is_array or arg.value is not None}
    args = tuple(stated.get(arg.name, arg) if not arg.is_array and arg.value is None else arg for arg in launch.args)
    grid = launch.grid
    if GUESSED_GRID in launch.guessed and launch.language == "triton":
        grid = other.grid
    elif GUESSED_GRID in launch.guessed and len(other.grid) == 1 and launch.block_threads and other.block_threads:
        grid = other.grid_for_block(launch.block_threads)
    return launch if (args, grid) == (launch.args, launch.grid) else replace(launch, args=args, grid=grid)


_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def _parameters(side: _LaunchedSide) -> tuple[str, ...] | None:
    """The names of the kernel's parameters, in order, or None where its signature is not found: in CUDA the
    last word of each (after its type), in Python the first (before its annotation or default)."""
    found = re.search(rf"\b{re.escape(side.name or '')}\s*\(([^)]*)\)", side.code) if side.name else None
    if found is None:
        return None
    parts = [part for part in found.group(1).split(",") if part.strip()]
    if side.language == "cuda":
        return tuple((_IDENTIFIER.findall(part.split("=")[0]) or [""])[-1] for part in parts)
    return tuple((_IDENTIFIER.findall(part.split(":")[0].split("=")[0]) or [""])[0] for part in parts)


def _with_precision(problem: dict[str, Any] | None, *launches: LaunchSpec | None) -> dict[str, Any] | None:
    """The problem with its precision, as the corpus names problems ("dtype": f16…), read from
    the pragmas' largest floating arrays; an fp16 kernel read as fp32 would be forecast on
    twice its elements. Left out when the sides differ: the corpus shows a precision edit
    without one, each side's own bytes tell it apart."""
    precisions = {launch.float_dtype() for launch in launches if launch is not None} - {None}
    if len(precisions) != 1 or "dtype" in (problem or {}):
        return problem
    return {**(problem or {}), "dtype": precisions.pop()}


# `#include`/`#define` with nothing between `#` and the word: in a Python file holding CUDA
# strings, "# define the model" is a comment. Continued (backslash) macros are left out.
_PREPROCESSOR_LINE = re.compile(r"^[ \t]*#(?:include|define)\b[^\n]*(?<!\\)$", re.M)


@functools.lru_cache(maxsize=8)
def _preprocessor_lines(file_text: str) -> tuple[str, ...]:
    """Read once per text, not once per kernel: a file may hold thousands of kernels."""
    return tuple(_PREPROCESSOR_LINE.findall(file_text))


def _side(
    code: str,
    language: str,
    name: str | None,
    facts: KernelFacts | None,
    file_text: str,
    launch: LaunchSpec | None,
    inputs: Inputs = NO_INPUTS,
    elements: int | None = None,
) -> KernelSide:
    if language == "cuda":
        preamble = [line for line in _preprocessor_lines(file_text) if line not in code]
        code = "\n".join([*preamble, code])
    facts_json = _json(facts) or {}
    if launch is not None and launch.kind == "kernel":
        facts_json["launches"] = [launch.as_launch()]
    elif name == KERNELBENCH_CLASS and language in FACT_LANGUAGES:
        launches = embedded_launches(file_text, inputs, elements)
        if launches:
            facts_json["launches"] = [spec.as_launch() for spec in launches]
    return KernelSide(code, language, name, facts_json or None)


@functools.lru_cache(maxsize=8)
def embedded_launches(file_text: str, inputs: Inputs = NO_INPUTS, elements: int | None = None) -> tuple[LaunchSpec, ...]:
    """The launches a KernelBench ModelNew's host code makes of its own kernels (load_inline CUDA,
    Triton): what a block-size or `num_warps` edit of such a file changes. Sizes are read from the
    inputs its `get_inputs()` makes, else from `inputs`, the problem's (problem_inputs). Where the
    problem states no inputs (a solution against its edit, neither file with `get_inputs()`), sizes
    the file cannot read are the pair's stated `elements`; where it does, they stay guessed as
    host_launch guesses them: a library's wrapper derives sizes the stated problem does not name, and
    the KernelBench fit learnt those on the guess (workshop/training/README.md). Only the kernels ModelNew's forward launches
    count where those can be followed: a file also holds backward kernels and ones nothing calls.
    Of a choice between launches (a vectorised kernel or a scalar one, one for wide rows or another
    for narrow), one path counts, the one the code counts read (alternatives.one_path_each)."""
    launches, unread_as = [], None if inputs.shapes else elements
    timed = set(launched_by(one_path_each(file_text, True), True, KERNELBENCH_CLASS))
    for kernel in discover(file_text, "kernelbench.py").kernels:
        if kernel.name != KERNELBENCH_CLASS and kernel.language in FACT_LANGUAGES and (not timed or kernel.name in timed):
            found = host_launch(file_text, kernel.name, kernel.language, python_file=True, elements=unread_as, inputs=inputs)
            if found is not None and found.kind == "kernel":
                launches.append(found)
    return tuple(launches)


def _launch_in(file_text: str, reference: Reference, elements: int | None = None) -> LaunchSpec | None:
    """The reference's own launch pragma, when its file has one that parses, else (without a pragma)
    the launch its host code makes, its unknowns read as `elements`."""
    if reference.name is None or reference.language not in FACT_LANGUAGES:
        return None
    try:
        pragma = find_launch_spec(file_text, reference.name, reference.language)
    except LaunchSpecError:
        return None
    python_file = Path(reference.path).suffix == ".py" if reference.path else reference.language == "triton"
    return pragma or host_launch(file_text, reference.name, reference.language, python_file=python_file, elements=elements)


def _elements(problem: dict[str, Any] | None) -> int | None:
    """How many elements the problem has, for a host launch's unknown sizes: its largest input, else
    the product of its two largest sizes (as the forecaster reads sizes), else None (not stated)."""
    problem = problem or {}
    inputs = [item.get("numel") for item in problem.get("inputs") or () if isinstance(item, dict)]
    counts = [count for count in inputs if isinstance(count, int) and count > 0]
    if counts:
        return max(counts)
    sizes = sorted(
        (value for value in problem.values() if isinstance(value, int) and not isinstance(value, bool) and value > 0), reverse=True
    )
    return sizes[0] * sizes[1] if len(sizes) > 1 else sizes[0] if sizes else None


def measurement_sides(analysis: FileAnalysis, result: KernelResult) -> tuple[dict[str, Any], dict[str, Any]]:
    """Candidate and reference as the measurement runtime wants them: whole files, so launch
    pragmas, macros and helpers come along (a CUDA kernel in a Python string: that string, see
    `_runnable`); KernelBench pairs run as PyTorch modules."""
    assert result.reference is not None
    reference_file = _reference_source(result.reference, analysis)
    if analysis.discovery.kind == "kernelbench":
        candidate = {"code": analysis.text, "language": "pytorch", "name": result.kernel.name}
        return candidate, {"code": reference_file, "language": "pytorch", "name": result.reference.name}
    embedded_reference = _embedded_reference(result.reference, reference_file)
    kernel, reference_path = result.kernel, Path(result.reference.path) if result.reference.path else None
    candidate = {"code": _runnable(analysis.text, kernel.language, analysis.path, kernel), "language": kernel.language, "name": kernel.name}
    reference = {
        "code": _runnable(reference_file, result.reference.language, reference_path, embedded_reference),
        "language": result.reference.language,
        "name": result.reference.name,
    }
    return candidate, reference


def _runnable(file_text: str, language: str, path: Path | None, kernel: DiscoveredKernel | None) -> str:
    """What the runtime compiles for one side: its whole file (a `.cu` file with its local headers);
    for a CUDA kernel in a Python string (RawKernel, load_inline) that string less the extension's
    torch host code, as its facts are compiled, with the launch pragma the file gives the kernel
    copied in where it sits outside the string (a `#` comment above the RawKernel call)."""
    if kernel is None or kernel.unit is None:
        return _compilable(file_text, language, path)
    unit = without_extension_code(kernel.unit)
    try:
        inside, outside = find_launch_spec(unit, kernel.name, "cuda"), find_launch_spec(file_text, kernel.name, "cuda")
    except LaunchSpecError:  # the runtime reads the broken pragma again and says where it breaks
        return unit
    if inside is not None or outside is None:
        return unit
    return f"{as_cuda_pragma(outside, kernel.name)}\n{unit}"


def _json(facts: KernelFacts | None) -> dict[str, Any] | None:
    return facts.to_json() if facts else None


FACT_LANGUAGES = ("cuda", "triton")


def _kernel_facts(
    kernel: DiscoveredKernel,
    file_text: str,
    path: Path | None,
    launch: LaunchSpec | None,
    hardware: GpuSpec,
    cache: ResultCache,
    compile_missing: bool,
) -> FactsResult | None:
    """A discovered kernel's facts, compiled with the macros and helpers it uses: its whole file
    (a `.cu` file with its local headers, Triton), or its embedded CUDA string less the extension's
    torch host code, with the template kernels that host code launched instantiated as it launched
    them. A string that does not compile so is tried without those instantiations, then (a kernel
    of torch types) as the kernel alone."""
    if kernel.unit is None:  # not embedded in Python
        return _file_facts(file_text, kernel.language, kernel.name, path, launch, hardware, cache, compile_missing)
    device_code = without_extension_code(kernel.unit)
    if torch_included(kernel.unit):
        device_code, _ = with_torch_types(device_code)
    instances = template_instances(kernel.unit)
    for code in [f"{device_code}\n{instances}\n"] * bool(instances) + [device_code]:
        found = _facts_for(code, kernel.language, kernel.name, launch, hardware, cache, compile_missing)
        if found is None or _named(found, kernel.name) is not None or not found.error:
            return found
    return _facts_for(kernel.code, kernel.language, kernel.name, launch, hardware, cache, compile_missing)


def _file_facts(
    file_text: str,
    language: str,
    name: str,
    path: Path | None,
    launch: LaunchSpec | None,
    hardware: GpuSpec,
    cache: ResultCache,
    compile_missing: bool,
) -> FactsResult | None:
    """The facts of a kernel compiled with its whole file (a `.cu` file with its local headers, Triton)."""
    return _facts_for(_compilable(file_text, language, path), language, name, launch, hardware, cache, compile_missing)


def _facts_for(
    source: str, language: str, name: str, launch: LaunchSpec | None, hardware: GpuSpec, cache: ResultCache, compile_missing: bool
) -> FactsResult | None:
    """Facts from the disk cache, or compiled in a child process when `compile_missing`."""
    options: dict[str, Any] = {"kernel": name}
    threads = None
    if launch is not None:
        if launch.block:
            threads = 1
            for dim in launch.block:
                threads *= dim
        options.update(threads=threads, smem=launch.smem, launch_options=launch.options)
        if language == "triton":
            options["signature"] = launch.triton_signature()
    # Comments and blank lines do not change a compile: key on the normalised text.
    key = "facts:" + facts_cache_key(normalise_code(source, language), language, hardware.arch, options)
    stored = cache.get(key)
    if stored is not None:
        return FactsResult.from_json(stored)
    if not compile_missing:
        return None
    launch_options = launch.options if launch is not None else {}
    found = compile_facts(
        source,
        language,
        hardware,
        [name],
        threads_per_block=threads,
        dynamic_smem_bytes=launch.smem if launch is not None else 0,
        signature=options.get("signature"),
        constexprs={k: v for k, v in launch_options.items() if k not in TRITON_LAUNCH_OPTIONS} or None,
        num_warps=launch_options.get("num_warps"),
        num_stages=launch_options.get("num_stages"),
    )
    if found.kernels or found.error:
        cache.put(key, found.to_json())
    return found


def fill_facts(analysis: FileAnalysis, cache: ResultCache, compile_missing: bool, is_current: Callable[[], bool]) -> bool:
    """Attach compiler facts of both sides; True when any changed. Runs in a thread."""
    assert analysis.hardware is not None
    changed = False
    for result in analysis.results:
        if not is_current():
            return changed
        kernel, reference = result.kernel, result.reference
        if reference is not None:
            reference_launch, candidate_launch, _ = _stated_launches(analysis, result)
        else:
            reference_launch, candidate_launch = None, result.launch or result.host_launch
        # A KernelBench ModelNew is Python: its CUDA is compiled kernel by kernel (its own results).
        if kernel.language in FACT_LANGUAGES and result.facts is None and kernel.container != "kernelbench":
            found = _kernel_facts(kernel, analysis.text, analysis.path, candidate_launch, analysis.hardware, cache, compile_missing)
            if found is not None:
                result.facts = _named(found, kernel.name)
                result.facts_error = found.error
                changed = changed or result.facts is not None
        if reference is not None and reference.language in FACT_LANGUAGES and result.reference_facts is None and reference.name:
            reference_file = _reference_file(reference, analysis)
            reference_path = Path(reference.path) if reference.path else None
            embedded = _embedded_reference(reference, reference_file)
            found = (
                _kernel_facts(embedded, reference_file, reference_path, reference_launch, analysis.hardware, cache, compile_missing)
                if embedded is not None
                else _file_facts(
                    reference_file,
                    reference.language,
                    reference.name,
                    reference_path,
                    reference_launch,
                    analysis.hardware,
                    cache,
                    compile_missing,
                )
            )
            if found is not None:
                result.reference_facts = _named(found, reference.name)
                changed = changed or result.reference_facts is not None
    return changed


_PRAGMA_ONCE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once\b[^\n]*$", re.M)
_LOCAL_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"[^\n]*$', re.M)
# How much header text is pasted into one file, and how deep includes are followed: a guard against
# a project that includes a generated megabyte or an include loop a guard macro would have stopped.
MAX_PASTED_BYTES = 1 << 20
MAX_INCLUDE_DEPTH = 16


def _compilable(file_text: str, language: str, path: Path | None) -> str:
    """A CUDA file as the compiler of facts and the GPU runtime need it: they compile in a folder of
    their own, where the project's headers are not, so each `#include "header"` found beside the file
    that names it is pasted in, once (as `#pragma once` would, which in the pasted text would name the
    file compiled). Headers not found stay as written."""
    if language != "cuda" or path is None or not _LOCAL_INCLUDE.search(file_text):
        return file_text
    pasted: set[Path] = set()
    room = [MAX_PASTED_BYTES]

    def expand(text: str, folder: Path, depth: int) -> str:
        def paste(include: re.Match[str]) -> str:
            header = (folder / include.group(1)).resolve()
            if header in pasted:
                return ""
            content = _header_text(header) if depth < MAX_INCLUDE_DEPTH else None
            if content is None or len(content) > room[0]:
                return include.group(0)
            pasted.add(header)
            room[0] -= len(content)
            return expand(_PRAGMA_ONCE.sub("", content), header.parent, depth + 1)

        return _LOCAL_INCLUDE.sub(paste, text)

    return expand(file_text, path.parent, 0)


def _header_text(path: Path) -> str | None:
    """A header's text, read again only when it changed on disk: facts are compiled anew on every
    edit of the file that includes it."""
    try:
        found = path.stat()
    except OSError:
        return None
    return _read_header(path, found.st_mtime_ns, found.st_size) if S_ISREG(found.st_mode) else None


@functools.lru_cache(maxsize=64)
def _read_header(path: Path, modified_ns: int, size: int) -> str | None:
    """The text of `path` as it was at `modified_ns` and `size` (the cache key), or None where unreadable."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _embedded_reference(reference: Reference, file_text: str) -> DiscoveredKernel | None:
    """A CUDA reference that its Python file embeds in a string (load_inline, RawKernel), as discovered
    there: it compiles from its string, as a candidate does, where the Python file as a whole does not."""
    if reference.language != "cuda" or not reference.path or Path(reference.path).suffix != ".py":
        return None
    found = _discovered(file_text, reference.path)
    return next((kernel for kernel in found if kernel.name == reference.name and kernel.unit is not None), None)


@functools.lru_cache(maxsize=8)
def _discovered(file_text: str, path: str) -> tuple[DiscoveredKernel, ...]:
    """A reference file's kernels, discovered once per text: every kernel of the edited file that
    names it asks again on every edit."""
    return tuple(discover(file_text, path).kernels)


@functools.lru_cache(maxsize=8)
def problem_inputs(reference_text: str) -> Inputs:
    """The input shapes a KernelBench problem file's `get_inputs()` makes and the values its
    `get_init_inputs()` returns: a `ModelNew` file without its own is built and timed with these
    (KernelBench builds and calls both models alike). Read once per text: every forecast of an
    edit reads its reference again."""
    return Inputs(tuple(kernelbench_input_shapes(reference_text)), kernelbench_init_values(reference_text))


@dataclass(frozen=True)
class _ReadSide:
    """A request's side read as a file, before its facts: the kernel its name means (KernelBench's
    class included) and the launch its file states, or why it gets no facts. No kernel where the
    side has facts already or is neither CUDA nor Triton."""

    side: KernelSide
    kernel: str | None = None
    launch: LaunchSpec | None = None
    problem: str | None = None
    own_code: str | None = None  # the kernel's own text, where it is not the side's whole text

    @property
    def code(self) -> str:
        """The text the editor sends for the side: its kernel's own, else the side's whole text (KernelBench's class)."""
        return self.own_code or self.side.code


def _read_side(side: KernelSide, elements: int | None, inputs: Inputs) -> _ReadSide:
    """The side's kernel and its launch pragma, else the launch its host code makes, the sizes it
    leaves to run time read as `elements` (the problem's, as the editor reads them)."""
    if side.facts or side.language not in FACT_LANGUAGES:
        return _ReadSide(side)
    name, kernels = _kernel_named(side)
    if name is None and side.name is not None:
        return _ReadSide(side, problem=f"no facts: {no_kernel_meant(side.name, [kernel.name for kernel in kernels])}")
    if name is None:
        return _ReadSide(side, problem="no facts: name the side's kernel (it holds none or several)")
    if name == KERNELBENCH_CLASS:  # Python, as in the editor: its kernels have facts of their own, the class none
        return _ReadSide(side, name)
    try:
        pragma = find_launch_spec(side.code, name, side.language)
    except LaunchSpecError as error:
        return _ReadSide(side, name, None, f"{name}: launch pragma ignored: {error}")
    python_file = side.language == "triton"
    launch = pragma or host_launch(side.code, name, side.language, python_file=python_file, elements=elements, inputs=inputs)
    own_code = next((kernel.code for kernel in kernels if kernel.name == name), None)
    return _ReadSide(side, name, launch, own_code=own_code)


def _with_facts(
    read: _ReadSide, hardware: GpuSpec, cache: ResultCache, inputs: Inputs, elements: int | None
) -> tuple[KernelSide, str | None]:
    """The read side with the compiler facts of its kernel, compiled for its launch, and why it has none."""
    side, name = read.side, read.kernel
    if name is None:
        return side, read.problem
    if name == KERNELBENCH_CLASS:
        return _side(side.code, side.language, name, None, side.code, None, inputs, elements), None
    found = _facts_for(side.code, side.language, name, read.launch, hardware, cache, True)
    facts = _named(found, name) if found is not None else None
    problem = read.problem
    if facts is None and found is not None and found.error:
        problem = f"{name}: no facts: {first_error_line(found.error)}"
    return _side(read.code, side.language, name, facts, side.code, read.launch), problem


def read_as_the_editor(request: ForecastRequest, hardware: GpuSpec, cache: ResultCache) -> tuple[ForecastRequest, list[str]]:
    """The request with the compiler facts and launches the editor attaches to sides that have no facts
    yet and are CUDA or Triton, each side's code read as a file (its macros, its launch pragma, the
    launch its host code makes on the request's problem), and why a side got none. As in the editor
    (_launches_or_assumed), a kernel without a launch is launched as the other side's where their
    parameters match, and what was guessed joins the request's `assumed`: the forecast's spread
    covers it and its hover names it. `kernelcast eval` reads its pairs so."""
    inputs = problem_inputs(request.reference.code)
    elements = _elements(request.problem)
    reference, candidate = (_read_side(side, elements, inputs) for side in (request.reference, request.candidate))
    assumed: list[str] = []
    if not (request.reference.facts or request.candidate.facts):  # given facts state their own launches
        reference_launch, candidate_launch, assumed = _launches_or_assumed(
            *(_LaunchedSide(read.code, read.side.language, read.kernel, read.launch) for read in (reference, candidate))
        )
        reference, candidate = replace(reference, launch=reference_launch), replace(candidate, launch=candidate_launch)
    (reference_side, reference_problem), (candidate_side, candidate_problem) = (
        _with_facts(read, hardware, cache, inputs, elements) for read in (reference, candidate)
    )
    # The candidate's launch states sizes the request's problem leaves out, as a batch line's does.
    problem = {**candidate.launch.problem_sizes(), **(request.problem or {})} if candidate.launch is not None else request.problem
    assumed += _unstated(problem, (reference.launch, candidate.launch), (reference_side, candidate_side))
    answer = replace(
        request,
        reference=reference_side,
        candidate=candidate_side,
        problem=_with_precision(problem or None, reference.launch, candidate.launch),
        assumed=tuple(dict.fromkeys([*request.assumed, *assumed])),
    )
    return answer, [why for why in (reference_problem, candidate_problem) if why]


def _kernel_named(side: KernelSide) -> tuple[str | None, list[DiscoveredKernel]]:
    """The kernel of a side's language its name means (itself, the one a host function of that name
    launches, or KernelBench's class), else the side's one kernel of that language; and its kernels."""
    where = "side.cu" if side.language == "cuda" else "side.py"
    kernels = [kernel for kernel in discover(side.code, where).kernels if kernel.language == side.language]
    names = [kernel.name for kernel in kernels]
    if side.name == KERNELBENCH_CLASS:
        return side.name, kernels
    if side.name is None:
        return (names[0] if len(names) == 1 else None), kernels
    return kernel_meant(side.code, where, side.name, names)[0], kernels


def _reference_source(reference: Reference, analysis: FileAnalysis) -> str:
    """The reference's whole file: its version that is not on disk (git HEAD's), else the editor's
    text when it is this file, else the file on disk (its path was already checked to be allowed),
    else the kernel's own code."""
    if reference.file_text is not None:
        return reference.file_text
    if reference.path and Path(reference.path) == analysis.path:
        return analysis.text
    if reference.origin in FILE_ORIGINS and reference.path and Path(reference.path).suffix in (".cu", ".cuh", ".py"):
        try:
            return Path(reference.path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            pass
    return reference.code


def _reference_file(reference: Reference, analysis: FileAnalysis) -> str:
    """`_reference_source`, a file on disk read once per version of the text for facts and
    forecasts (the measure action reads it afresh: a reference saved since must be what runs)."""
    if reference.path is None or reference.origin not in FILE_ORIGINS:
        return _reference_source(reference, analysis)
    if reference.path in analysis.reference_files:
        return analysis.reference_files[reference.path]
    text = _reference_source(reference, analysis)
    if text is not reference.code:  # read, not the fallback: the fallback differs per kernel
        analysis.reference_files[reference.path] = text
    return text


def _named(found: FactsResult, name: str) -> KernelFacts | None:
    if name in found.kernels:
        return found.kernels[name]
    return next((facts for facts in found.kernels.values() if facts.name == name), None)
