"""Which code a kernel is compared against, decided in a fixed order.

(a) a `kernelcast: reference=path[::kernel]` pragma in the file, (b) a project config
rule, (c) the KernelBench convention (`Model` in the file, else `reference.py` beside
it), (d) the same-named kernel in the file's git HEAD version. The first that applies
decides, even when it fails: a broken pragma must be reported, not silently replaced.

Reference paths may not leave the workspace (or, without one, the file's folder) unless
allowed: a cloned repository must not be able to send /etc/passwd to a forecaster.
Reads are cached (files by mtime and size, git by repo, HEAD commit and path) so
resolving on every keystroke costs stats, not subprocesses.
"""

from __future__ import annotations

import functools
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelcast.kernels_runtime.source.discovery import PYTHON_SUFFIXES, DiscoveredKernel, Discovery, discover_bytes, source_text
from kernelcast.kernels_runtime.source.entry_points import launched_by
from kernelcast.kernels_runtime.source.launch_spec import kernelbench_problem
from kernelcast.project_config import ProjectConfig

GIT_TIMEOUT_S = 2.0
_NOT_A_REPO_TTL_S = 5.0  # `git init` in an open workspace is noticed after this long
_PRAGMA_HINT = "and has no `kernelcast: reference=` pragma"
_CACHE_SIZE = 64
OVERRIDE_ORIGIN = "--reference"
# The origin of a reference that is the KernelBench problem (`Model`) a solution solves.
KERNELBENCH_ORIGIN = "kernelbench"
# Origins whose reference is a file on disk (git-head's is a blob of HEAD).
FILE_ORIGINS = (OVERRIDE_ORIGIN, "pragma", "config", KERNELBENCH_ORIGIN)
# The editor and the CLI refuse the same paths with the same words, naming both ways to allow them.
OUTSIDE_HINT = "allow with the setting allowReferencesOutsideWorkspace or the CLI's --allow-references-outside-workspace"


@dataclass(frozen=True)
class Reference:
    code: str
    language: str
    name: str | None
    origin: str  # --reference | pragma | config | kernelbench | git-head
    description: str  # short text for the hover
    path: str | None  # the file it came from
    problem: dict[str, Any] | None  # problem sizes from a config rule, or those a KernelBench file states
    # Its whole file where that is not what `path` holds on disk: git HEAD's version of the file being
    # edited, whose macros, helpers and launch the reference's compiler facts are read with.
    file_text: str | None = None


@dataclass(frozen=True)
class NoReference:
    reason: str


def resolve_reference(
    kernel: DiscoveredKernel,
    discovery: Discovery,
    file_path: Path,
    workspace_root: Path | None,
    config: ProjectConfig,
    allow_outside_workspace: bool = False,
    override: str | None = None,
) -> Reference | NoReference:
    """The reference for `kernel` of the file at `file_path` (whose current text gave `discovery`);
    `override` (the CLI's `--reference`, path[::kernel] with an absolute path) comes before all."""
    file_path = Path(file_path).resolve()
    boundary = _boundary(file_path, workspace_root, allow_outside_workspace)
    if override:
        return _from_spec(override, file_path.parent, OVERRIDE_ORIGIN, kernel, discovery, file_path, boundary, None)
    if discovery.pragmas.reference:
        return _from_spec(discovery.pragmas.reference, file_path.parent, "pragma", kernel, discovery, file_path, boundary, None)
    rule = config.rule_for(file_path)
    if rule is not None and config.root is not None:
        return _from_spec(rule.reference, config.root, "config", kernel, discovery, file_path, boundary, rule.problem)
    if kernel.container == "kernelbench":
        kernelbench = _kernelbench_reference(discovery, file_path, boundary)
        if kernelbench is not None:
            return kernelbench
    return _git_head_reference(kernel, discovery, file_path)


def pragma_reference(
    spec: str,
    kernel: DiscoveredKernel,
    discovery: Discovery,
    file_path: Path,
    workspace_root: Path | None,
    allow_outside_workspace: bool = False,
) -> Reference | NoReference:
    """What a `kernelcast: reference=spec` pragma in this file would give `kernel`, so an editor
    can check a target before it writes one."""
    file_path = Path(file_path).resolve()
    boundary = _boundary(file_path, workspace_root, allow_outside_workspace)
    return _from_spec(spec, file_path.parent, "pragma", kernel, discovery, file_path, boundary, None)


def _boundary(file_path: Path, workspace_root: Path | None, allow_outside_workspace: bool) -> Path | None:
    """The folder reference paths must stay inside: the workspace, or the file's own folder."""
    return None if allow_outside_workspace else Path(workspace_root or file_path.parent).resolve()


def pragma_line(language: str, reference: str) -> str:
    """The comment a "Set reference…" code action inserts."""
    marker = "//" if language == "cuda" else "#"
    value = f'"{reference}"' if any(ch.isspace() for ch in reference) else reference
    return f"{marker} kernelcast: reference={value}"


# --- pragma and config: path[::kernel] -------------------------------------------------


def _from_spec(
    spec: str,
    base: Path,
    origin: str,
    kernel: DiscoveredKernel,
    discovery: Discovery,
    file_path: Path,
    boundary: Path | None,
    problem: dict[str, Any] | None,
) -> Reference | NoReference:
    path_text, _, wanted = spec.partition("::")
    where = f"{origin}: {_shortened(spec)}"
    target = (base / path_text).resolve() if path_text else file_path  # `::other`: a kernel of this file
    if boundary is not None and not target.is_relative_to(boundary):
        return NoReference(f"no reference: {where} points outside the workspace ({boundary}); {OUTSIDE_HINT}")
    found = discovery if target == file_path else _read_discovery(target)
    if isinstance(found, str):
        return NoReference(f"no reference: {where}: {found}")
    choice = _choose(found, wanted or None, kernel, target, same_file=target == file_path)
    if isinstance(choice, str):
        return NoReference(f"no reference: {where}: {choice}")
    if choice is found.reference_model:  # a KernelBench Model: the sizes its file states, under the rule's
        problem = {**kernelbench_problem(choice.code), **(problem or {})}
    return Reference(choice.code, choice.language, choice.name, origin, where, str(target), problem)


def _choose(found: Discovery, wanted: str | None, kernel: DiscoveredKernel, path: Path, same_file: bool) -> DiscoveredKernel | str:
    """The reference kernel in `found` (the file at `path`): by name (or the one the host function of
    that name launches), else the same name, else the only one."""
    candidates = list(found.kernels) + ([found.reference_model] if found.reference_model else [])
    if same_file:
        candidates = [k for k in candidates if k.name != kernel.name]
    names = _listed(candidates)
    if wanted is not None:
        match = next((k for k in candidates if k.name == wanted), None) or _launched_by_host_code(path, wanted, candidates)
        if match is None and same_file and wanted == kernel.name:
            return f"`{wanted}` is this kernel itself (the reference of the file's other kernels)"
        return match or f"no kernel `{wanted}` there; it has {names}"
    same_name = next((k for k in candidates if k.name == kernel.name), None)
    if same_name is not None:
        return same_name
    if found.reference_model is not None and (kernel.container == "kernelbench" or not found.kernels):
        return found.reference_model
    if len(candidates) == 1:
        return candidates[0]
    if not candidates and same_file:
        return f"that is this file, and `{kernel.name}` its only kernel; name another file (a copy, to measure it against itself)"
    return f"name the kernel with `::name`; it has {names}" if candidates else "it has no kernels"


def _launched_by_host_code(path: Path, wanted: str, candidates: list[DiscoveredKernel]) -> DiscoveredKernel | None:
    """The candidate the host function or class `wanted` of the file on disk launches first."""
    try:
        status = path.stat()
    except OSError:
        return None
    by_name = {k.name: k for k in candidates}
    launched = _host_launches(path, (status.st_mtime_ns, status.st_size), wanted)
    return next((by_name[name] for name in launched if name in by_name), None)


@functools.lru_cache(maxsize=64)
def _host_launches(path: Path, stamp: tuple[int, int], wanted: str) -> tuple[str, ...]:
    """What `wanted` launches in the file as it was at `stamp` (mtime, size): read once, not once per
    kernel on every edit of a file whose kernels all name it."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ()
    return launched_by(text, path.suffix.lower() in PYTHON_SUFFIXES, wanted)


def _listed(kernels: tuple[DiscoveredKernel, ...] | list[DiscoveredKernel], shown: int = 10) -> str:
    """Kernel names for a message, the first few of a long list."""
    names = ", ".join(f"`{k.name}`" for k in kernels[:shown]) or "no kernels"
    return names + (f" and {len(kernels) - shown} more" if len(kernels) > shown else "")


def _shortened(text: str, limit: int = 100) -> str:
    """A path from a file, cut for a one-line message."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


_FILE_CACHE: dict[Path, tuple[tuple[int, int], Discovery]] = {}


def _read_discovery(path: Path) -> Discovery | str:
    """The file's discovery, cached by (mtime, size); a readable reason when it cannot be read."""
    try:
        status = path.stat()
    except FileNotFoundError:
        return f"{_shortened(path.name)} does not exist"
    except OSError as error:
        return f"cannot read {_shortened(path.name)} ({error.strerror})"
    if not path.is_file():
        return f"{_shortened(path.name)} is not a file"
    stamp = (status.st_mtime_ns, status.st_size)
    cached = _FILE_CACHE.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        found = discover_bytes(path.read_bytes(), str(path))
    except OSError as error:
        return f"cannot read {_shortened(path.name)} ({error.strerror})"
    _remember(_FILE_CACHE, path, (stamp, found))
    if not found.kernels and not found.reference_model and found.problems:
        return f"{path.name}: {found.problems[0]}"
    return found


# --- KernelBench -------------------------------------------------------------------------


def kernelbench_problem_of(
    kernel: DiscoveredKernel,
    discovery: Discovery,
    file_path: Path,
    workspace_root: Path | None,
    allow_outside_workspace: bool = False,
) -> Reference | None:
    """The KernelBench problem a `ModelNew` solves (`Model` in its file, else in `reference.py`
    beside it), whatever its reference is: KernelBench times a solution on its problem's inputs,
    so a solution measured against another solution is too."""
    if kernel.container != "kernelbench":
        return None
    file_path = Path(file_path).resolve()
    found = _kernelbench_reference(discovery, file_path, _boundary(file_path, workspace_root, allow_outside_workspace))
    return found if isinstance(found, Reference) else None


def _kernelbench_reference(discovery: Discovery, file_path: Path, boundary: Path | None) -> Reference | NoReference | None:
    """`Model` in this file, else in `reference.py` beside it, with the sizes its file states (as the
    measured corpora read them); None when neither exists.

    `reference.py` may be a link: it is held to the same boundary as a pragma's path."""
    if discovery.reference_model is not None:
        model = discovery.reference_model
        sizes = kernelbench_problem(model.code)
        return Reference(model.code, "pytorch", model.name, KERNELBENCH_ORIGIN, "Model in this file", str(file_path), sizes)
    beside = file_path.parent / "reference.py"
    if beside == file_path or not beside.is_file():
        return None
    if boundary is not None and not beside.resolve().is_relative_to(boundary):
        return NoReference(f"no reference: {beside.name} beside this file points outside the workspace ({boundary}); {OUTSIDE_HINT}")
    found = _read_discovery(beside)
    if isinstance(found, str) or found.reference_model is None:
        return NoReference(f"no reference: {beside.name} beside this file has no KernelBench `Model` class with `get_inputs`")
    model = found.reference_model
    sizes = kernelbench_problem(model.code)
    return Reference(model.code, "pytorch", model.name, KERNELBENCH_ORIGIN, f"Model in {beside.name}", str(beside), sizes)


# --- git HEAD ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Repository:
    top: Path
    git_dir: Path  # per worktree: holds HEAD
    common_dir: Path  # shared: holds refs and packed-refs


_REPOSITORIES: dict[Path, tuple[float, _Repository | None]] = {}
_HEAD_FILES: dict[tuple[Path, str, str], tuple[Discovery, str] | None] = {}


def _git_head_reference(kernel: DiscoveredKernel, discovery: Discovery, file_path: Path) -> Reference | NoReference:
    try:
        repository = _repository_of(file_path.parent)
        if repository is None:
            return NoReference(f"no reference: file is not in git {_PRAGMA_HINT}")
        commit = _head_commit(repository)
        if commit is None:
            return NoReference(f"no reference: the git repository has no commit yet {_PRAGMA_HINT}")
        relative = file_path.relative_to(repository.top).as_posix()
        committed = _head_version(repository, commit, relative)
    except FileNotFoundError:
        return NoReference(f"no reference: git is not installed {_PRAGMA_HINT}")
    except subprocess.TimeoutExpired:
        return NoReference(f"no reference: git took longer than {GIT_TIMEOUT_S:g} s")
    except (OSError, ValueError) as error:
        return NoReference(f"no reference: git failed ({error})")
    short = commit[:7]
    if committed is None:
        return NoReference(f"no reference: {relative} is untracked or new since git HEAD ({short}) {_PRAGMA_HINT}")
    head, head_text = committed
    # Overloads share a name: take the one at the same place among its namesakes.
    namesakes = [k for k in discovery.kernels if k.name == kernel.name]
    ordinal = next((i for i, k in enumerate(namesakes) if k == kernel), 0)
    matches = [k for k in head.kernels if k.name == kernel.name]
    if not matches:
        names = _listed(head.kernels)
        return NoReference(f"no reference: `{kernel.name}` is new since git HEAD ({short}); HEAD has {names}")
    match = matches[min(ordinal, len(matches) - 1)]
    where = f"git HEAD ({short}): {match.name}"
    return Reference(match.code, match.language, match.name, "git-head", where, str(file_path), None, head_text)


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    environment = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"}
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=GIT_TIMEOUT_S, env=environment, check=False)


def _repository_of(folder: Path) -> _Repository | None:
    """The repository holding `folder`, cached (a miss only briefly, so a new repo is noticed)."""
    cached = _REPOSITORIES.get(folder)
    if cached is not None and (cached[1] is not None or time.monotonic() - cached[0] < _NOT_A_REPO_TTL_S):
        return cached[1]
    result = _git(["rev-parse", "--show-toplevel", "--absolute-git-dir", "--git-common-dir"], folder)
    repository = None
    if result.returncode == 0:
        top, git_dir, common_dir = result.stdout.decode("utf-8", "surrogateescape").splitlines()[:3]
        repository = _Repository(Path(top).resolve(), Path(git_dir), (folder / common_dir).resolve())
    _REPOSITORIES[folder] = (time.monotonic(), repository)
    return repository


def _head_commit(repository: _Repository) -> str | None:
    """HEAD's commit read from the git files (no subprocess), with `git rev-parse` for odd layouts."""
    head = (repository.git_dir / "HEAD").read_text(encoding="utf-8").strip()
    if not head.startswith("ref: "):
        return head or None
    ref = head[len("ref: ") :]
    try:
        return (repository.common_dir / ref).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        pass
    packed = repository.common_dir / "packed-refs"
    if packed.is_file():
        for line in packed.read_text(encoding="utf-8").splitlines():
            commit, _, name = line.partition(" ")
            if name == ref:
                return commit
    result = _git(["rev-parse", "--verify", "--quiet", "HEAD"], repository.top)
    if result.returncode != 0:
        return None
    return result.stdout.decode().strip() or None


def _head_version(repository: _Repository, commit: str, relative: str) -> tuple[Discovery, str] | None:
    """Discovery and text of the file as committed in `commit`; None when it is not there."""
    key = (repository.top, commit, relative)
    if key not in _HEAD_FILES:
        result = _git(["show", "--no-textconv", f"{commit}:{relative}"], repository.top)
        committed = None
        if result.returncode == 0:
            committed = (discover_bytes(result.stdout, relative), source_text(result.stdout)[0] or "")
        _remember(_HEAD_FILES, key, committed)
    return _HEAD_FILES[key]


def _remember(cache: dict[Any, Any], key: object, value: object) -> None:
    """Store in a small cache, dropping the oldest entry when full."""
    if len(cache) >= _CACHE_SIZE:
        cache.pop(next(iter(cache)))
    cache[key] = value


def workspace_root(path: Path) -> Path | None:
    """The command line's workspace for a file, as an editor's is its opened folder: the git top of
    the file's folder, else its folder. References may point only inside it unless allowed."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path.parent, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return path.parent
    return Path(top.stdout.strip()) if top.returncode == 0 else path.parent
