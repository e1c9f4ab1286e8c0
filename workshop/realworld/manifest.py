"""The manifest of real-world kernels: one line per distinct solution file of a listed source.

A line names the file (source, repository, commit, path, SHA-256), its KernelBench problem
(level, number, the problem file's path and SHA-256 at the pinned commit), the language the
solution's kernels are written in and the problem's sizes (module constants, input dtype). No code:
`pack` reads the files from the mirrors again when a batch is made for the GPU host.

    python -m workshop realworld manifest --mirrors /work/.mirror [--out workshop/realworld/data/manifest.jsonl.gz]
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import subprocess
import threading
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelcast.kernels_runtime.source.launch_spec import kernelbench_problem
from workshop.realworld.sources import SOURCES, Source

DATA = Path(__file__).parent / "data"
MANIFEST = DATA / "manifest.jsonl.gz"
INDUCTOR = "inductor"


@dataclass
class Entry:
    id: str
    source: str
    repo: str
    commit: str
    path: str
    sha256: str
    run: str
    level: int
    problem: int
    problem_name: str
    problem_path: str
    problem_sha256: str
    language: str  # cuda | triton | pytorch (no custom kernel) | inductor (torch.compile of the problem)
    sizes: dict[str, Any] = field(default_factory=dict)  # module constants and the inputs' dtype
    same_as: list[str] = field(default_factory=list)  # other paths of the source with this very content


class Mirror:
    """One repository's git mirror, read at one commit.

    Files are read through one `git cat-file --batch` per mirror, started at the first read: a
    `git show` per file took 10 s for CUDA-L2's 3,736 kernel files on 2 cores."""

    def __init__(self, mirrors: Path, repo: str, commit: str) -> None:
        self.git_dir = mirrors / repo.replace("/", "+") / "repo"
        if not self.git_dir.is_dir():
            raise FileNotFoundError(f"no mirror of {repo} at {self.git_dir}: fetch github:{repo} first")
        self.commit = commit
        self._reader: subprocess.Popen[bytes] | None = None
        self._reading = threading.Lock()

    def paths(self) -> list[str]:
        listed = subprocess.run(
            ["git", f"--git-dir={self.git_dir}", "ls-tree", "-r", "--name-only", self.commit], capture_output=True, text=True, check=True
        )
        return listed.stdout.splitlines()

    def read(self, path: str) -> bytes:
        """The file's bytes at the commit; FileNotFoundError where the commit has no such file."""
        with self._reading:
            reader = self._reader or self._start_reader()
            assert reader.stdin is not None and reader.stdout is not None
            reader.stdin.write(f"{self.commit}:{path}\n".encode())
            reader.stdin.flush()
            header = reader.stdout.readline().split()  # <object> <type> <size>, or <name> missing
            if len(header) == 3:
                data = reader.stdout.read(int(header[2]))
                reader.stdout.read(1)  # the newline after the contents
                if header[1] == b"blob":
                    return data
        raise FileNotFoundError(f"{self.git_dir} has no file {path} at {self.commit}: {b' '.join(header).decode(errors='replace')}")

    def _start_reader(self) -> subprocess.Popen[bytes]:
        self._reader = subprocess.Popen(
            ["git", f"--git-dir={self.git_dir}", "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        weakref.finalize(self, _stop_reader, self._reader)
        return self._reader


def _stop_reader(reader: subprocess.Popen[bytes]) -> None:
    """git cat-file --batch exits at the end of its input."""
    assert reader.stdin is not None and reader.stdout is not None
    reader.stdin.close()
    reader.wait()
    reader.stdout.close()


def language_of(text: str) -> str:
    """What the solution's own kernels are written in; `pytorch` where it only calls torch."""
    if re.search(r"\bload_inline\b|\bcpp_extension\b|__global__", text):
        return "cuda"
    if re.search(r"@triton\.(jit|autotune)|\btriton\.jit\b", text):
        return "triton"
    return "pytorch"


def problem_index(mirror: Mirror, levels: tuple[int, ...]) -> dict[tuple[int, int], str]:
    """(level, number) → the problem file's path."""
    index = {}
    for path in mirror.paths():
        found = re.fullmatch(r"KernelBench/level(\d)/(\d+)_[^/]+\.py", path)
        if found and int(found.group(1)) in levels:
            index[int(found.group(1)), int(found.group(2))] = path
    return index


def entries(source: Source, mirrors: Path) -> Iterator[Entry]:
    """Every distinct solution of one source, each with its problem; a file whose problem is missing is skipped."""
    mirror = Mirror(mirrors, source.repo, source.commit)
    problems_mirror = mirror if source.problems_repo == source.repo else Mirror(mirrors, source.problems_repo, source.problems_commit)
    problems = problem_index(problems_mirror, source.levels)
    problem_texts: dict[str, bytes] = {}
    seen: dict[str, Entry] = {}
    for path in sorted(mirror.paths()):
        where = source.solution(path)
        if where is None or where.level not in source.levels or (where.level, where.problem) not in problems:
            continue
        data = mirror.read(path)
        digest = hashlib.sha256(data).hexdigest()
        if digest in seen:
            seen[digest].same_as.append(path)
            continue
        problem_path = problems[where.level, where.problem]
        if problem_path not in problem_texts:
            problem_texts[problem_path] = problems_mirror.read(problem_path)
        problem_data = problem_texts[problem_path]
        text = data.decode("utf-8", "replace")
        inductor = path == problem_path and source.problems_repo == source.repo
        seen[digest] = Entry(
            id=f"{source.name}:{digest[:16]}",
            source=source.name,
            repo=source.repo,
            commit=source.commit,
            path=path,
            sha256=digest,
            run=where.run,
            level=where.level,
            problem=where.problem,
            problem_name=Path(problem_path).stem,
            problem_path=problem_path,
            problem_sha256=hashlib.sha256(problem_data).hexdigest(),
            language=INDUCTOR if inductor else language_of(text),
            sizes=kernelbench_problem(problem_data.decode("utf-8", "replace")),
        )
    yield from seen.values()


def build(mirrors: Path, out: Path = MANIFEST, only: list[str] | None = None) -> dict[str, int]:
    """Write the manifest; the count of entries per source."""
    chosen = [source for source in SOURCES if not only or source.name in only]
    return write_rows(out, (asdict(entry) for source in chosen for entry in entries(source, mirrors)))


def write_rows(out: Path, rows: Iterable[dict[str, Any]], counted_by: str = "source") -> dict[str, int]:
    """Write manifest rows (gzipped JSON lines, keys sorted); the count of rows per value of `counted_by`."""
    counts: dict[str, int] = {}
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt") as stream:
        for row in rows:
            stream.write(json.dumps(row, sort_keys=True) + "\n")
            counts[row[counted_by]] = counts.get(row[counted_by], 0) + 1
    return counts


def load(path: Path = MANIFEST) -> list[dict[str, Any]]:
    """A manifest's rows; none where it was never built."""
    if not path.exists():
        return []
    with gzip.open(path, "rt") as stream:
        return [json.loads(line) for line in stream if line.strip()]
