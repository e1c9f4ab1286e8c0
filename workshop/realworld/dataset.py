"""The measured real-world records, what they add up to, and the labelled pairs they give.

    python -m workshop realworld assemble RESULTS.jsonl ...   # → data/records.jsonl.gz (no code)
    python -m workshop realworld pairs --out PAIRS.jsonl       # code read back from the mirrors

A record is a manifest entry joined with what the GPU host made of it: a measurement against
the problem's eager `Model` (S, its 95% interval, both medians, the tolerance it was checked
at) or a failure (kind and message). Failures stay: which share of LLM kernels is wrong or
does not build is a fact users want, and a forecaster must not learn from survivors only.
Messages keep the compiler's and Python's own words, never lines of the solution's code.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kernelcast.kernels_runtime.hardware import lookup
from kernelcast.kernels_runtime.source.launch_spec import with_problem_inputs
from kernelcast.wire import ForecastRequest, KernelSide, LabelledPair, jsonl_records
from workshop.realworld.cuda_l2 import CUDA_L2_KEYS, CUDA_L2_MANIFEST, is_cuda_l2, reference_code
from workshop.realworld.cuda_l2 import generated as cuda_l2_generated
from workshop.realworld.edits import EDIT_KEYS, EDIT_MANIFEST, edited_text, is_edit
from workshop.realworld.helion_examples import HELION_KEYS, HELION_MANIFEST, is_helion
from workshop.realworld.helion_examples import generated as helion_generated
from workshop.realworld.library import LIBRARY_KEYS, LIBRARY_MANIFEST, generated, is_library
from workshop.realworld.linear_attention import FLA_KEYS, FLA_MANIFEST, is_fla
from workshop.realworld.linear_attention import generated as fla_generated
from workshop.realworld.manifest import INDUCTOR, MANIFEST, Mirror, load
from workshop.realworld.prebuild import MAX_LINE_CHARS, error_summary
from workshop.realworld.runner import COMPILED_MODEL, CUT
from workshop.realworld.tritonbench import TRITONBENCH_KEYS, TRITONBENCH_MANIFEST, is_tritonbench, tritonbench_sides

RECORDS = Path(__file__).parent / "data" / "records.jsonl.gz"
# Every list of entries to measure: KernelBench solutions, library operators, fla, helion's examples, TritonBench,
# CUDA-L2, launch edits.
MANIFESTS = (MANIFEST, LIBRARY_MANIFEST, FLA_MANIFEST, HELION_MANIFEST, TRITONBENCH_MANIFEST, CUDA_L2_MANIFEST, EDIT_MANIFEST)
KERNEL_LANGUAGES = ("cuda", "triton")


def plain_message(message: str) -> str:
    """A failure's words without the code it may quote: a build's error lines, else the first
    line and the exception lines after it (Triton's CompilationError prints the offending
    source after its first line; the source is left out)."""
    # A long quoted literal in an exception is the solution's text (a source string passed as a path).
    message = re.sub(r"'(?:[^'\\]|\\.){60,}(?:'|\Z)|\"(?:[^\"\\]|\\.){60,}(?:\"|\Z)", "'…'", message)
    if "Error building extension" in message:
        return error_summary(message)
    lines = [line.rstrip() for line in message.strip().splitlines() if line.strip()]
    exceptions = [line for line in lines[1:] if re.match(r"[A-Za-z_.]*(Error|Exception)\b", line)]
    return "\n".join(line[:MAX_LINE_CHARS] for line in lines[:1] + exceptions[:3])


def record_of(entry: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    record = {key: entry[key] for key in ("id", "source", "repo", "commit", "path", "sha256", "run", "level", "problem")}
    record |= {key: entry[key] for key in ("problem_name", "problem_path", "problem_sha256", "language", "sizes")}
    record |= {
        key: entry[key] for key in (*LIBRARY_KEYS, *FLA_KEYS, *HELION_KEYS, *EDIT_KEYS, *TRITONBENCH_KEYS, *CUDA_L2_KEYS) if key in entry
    }
    record["gpu"] = None  # a measurement names its GPU; a failure may come before any GPU work
    record["build_s"] = result.get("build_s")
    record["gpu_seconds"] = result.get("seconds")
    if "speedup" in result:
        details = result["details"]
        record |= {
            "correct": True,
            "gpu": result["gpu"],
            "speedup": result["speedup"],
            "ci95": result["ci95"],
            "t_reference_ms": result["t_reference_ms"],
            "t_candidate_ms": result["t_candidate_ms"],
            "round_ratios": details["round_ratios"],
            "tolerance": details["tolerance"],
            "max_abs_err": {name: entry["max_abs_err"] for name, entry in details["correctness"].items()},
            "versions": details["versions"],
            "driver": details["driver"],
        }
    else:
        record |= {"correct": False, "failure": {"kind": result["failure"], "message": plain_message(result["message"])}}
    return record


def listed(manifests: Sequence[Path] = MANIFESTS) -> list[dict[str, Any]]:
    """Every entry there is to measure, from every manifest."""
    return [entry for path in manifests for entry in load(path)]


def assemble(
    results: Iterable[Path], out: Path = RECORDS, manifests: Sequence[Path] = MANIFESTS, replace: Iterable[Path] = ()
) -> dict[str, int]:
    """Join run results with the manifests (an id's first result stands) and add them to `out`.

    `replace`: runs that measured recorded kernels again where the first run could not be trusted
    (a small Triton kernel timed at what its host had to spare, identical texts read octaves apart).
    Their measurements take the place of the recorded ones; a failure there leaves the record as it
    was, since the kernel was once measured correct. A problem the re-run measured in part on another
    GPU keeps its old measurements (`_one_gpu_a_problem`); how many were kept so is counted as
    "kept: problem split over GPUs"."""
    entries = {entry["id"]: entry for entry in listed(manifests)}
    records = {record["id"]: record for record in read(out)} if out.exists() else {}
    offered = _first_outcomes(replace, lambda result: result["id"] in entries and "speedup" in result)
    taken = _one_gpu_a_problem(offered, records, entries)
    for key, result in taken.items():
        records[key] = record_of(entries[key], result)
    for key, result in _first_outcomes(results, lambda result: result["id"] in entries).items():
        records.setdefault(key, record_of(entries[key], result))
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt") as stream:
        for record in sorted(records.values(), key=lambda record: record["id"]):
            stream.write(json.dumps(record, sort_keys=True) + "\n")
    counts = Counter("correct" if record["correct"] else record["failure"]["kind"] for record in records.values())
    if len(offered) > len(taken):
        counts["kept: problem split over GPUs"] = len(offered) - len(taken)
    return dict(counts)


def _one_gpu_a_problem(
    offered: dict[str, dict[str, Any]], records: dict[str, dict[str, Any]], entries: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The replacements that leave every problem's correct records on one GPU. Records of one problem
    on two GPUs are never paired (`_problem_group`), so a re-run cut short inside a problem would
    silently take its pairs away."""
    gpus: dict[str, set[str]] = defaultdict(set)
    for key, result in offered.items():
        gpus[entries[key]["problem"]].add(result["gpu"])
    for key, record in records.items():
        if record["correct"] and key not in offered:
            gpus[record["problem"]].add(record["gpu"])
    return {key: result for key, result in offered.items() if len(gpus[entries[key]["problem"]]) == 1}


def _first_outcomes(paths: Iterable[Path], admit: Callable[[dict[str, Any]], bool]) -> dict[str, dict[str, Any]]:
    """Each id's first result in these runs that `admit` takes and that ended in an outcome (a
    measurement cut by a deadline, runner.py, has none)."""
    first: dict[str, dict[str, Any]] = {}
    for path in paths:
        for _, result in jsonl_records(path):
            if CUT not in result and admit(result):
                first.setdefault(result["id"], result)
    return first


def read(path: Path = RECORDS) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as stream:
        return [json.loads(line) for line in stream if line.strip()]


def stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The real-world part of corpus-stats.json: counts per language and per source, failures by
    kind, how many correct kernels are slower than eager PyTorch, S's median and the runtimes.
    Launch edits (`edits.py`) are ours, not the source's: they are counted apart."""
    edited = [record for record in records if is_edit(record)]
    records = [record for record in records if not is_edit(record)]
    correct = [record for record in records if record["correct"]]
    languages: dict[str, dict[str, int]] = defaultdict(lambda: {"tried": 0, "correct": 0})
    for record in records:
        languages[record["language"]]["tried"] += 1
        languages[record["language"]]["correct"] += record["correct"]
    by_source: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_source[record["source"]].append(record)
    return {
        "tried": len(records),
        "correct": len(correct),
        "gpu": dict(Counter(record["gpu"] for record in correct)),
        "languages": {language: counts for language, counts in sorted(languages.items())},
        "problems": len({record["problem_sha256"] for record in correct}),
        "sources": {name: _source_stats(members) for name, members in sorted(by_source.items())},
        **({"launch_edits": {"tried": len(edited), "correct": sum(record["correct"] for record in edited)}} if edited else {}),
    }


# Re-measured kernels are told apart by how long the solution runs: timer jitter rules the
# shortest, run-to-run drift (clocks, memory placement) the longest.
RUNTIME_CLASSES_MS = ((0.05, "under 50 µs"), (0.2, "50-200 µs"), (math.inf, "over 200 µs"))


def reproducibility(records: list[dict[str, Any]], remeasured: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """How many re-measured speedups fall inside the records' 95% CIs: in all, per source and per
    runtime class, with the misses named (the first result of an id counts, as in `assemble`)."""
    recorded = {record["id"]: record for record in records if record["correct"]}
    rows: dict[str, dict[str, Any]] = {}
    for result in remeasured:
        original = recorded.get(result["id"])
        if original is None or "speedup" not in result or result["id"] in rows:
            continue
        low, high = original["ci95"]
        duration = original["t_candidate_ms"]
        rows[result["id"]] = {
            "source": original["source"],
            "class": next(name for limit, name in RUNTIME_CLASSES_MS if duration < limit),
            "inside": low <= result["speedup"] <= high,
            "deviation": abs(result["speedup"] / original["speedup"] - 1),
            "miss": {
                "id": result["id"],
                "recorded": [round(original["speedup"], 4), [round(low, 4), round(high, 4)]],
                "again": round(result["speedup"], 4),
            },
        }

    def summary(members: list[dict[str, Any]]) -> dict[str, Any]:
        deviations = sorted(row["deviation"] for row in members)
        return {
            "compared": len(members),
            "inside_ci": sum(row["inside"] for row in members),
            "share_inside_ci": round(sum(row["inside"] for row in members) / len(members), 4) if members else None,
            "median_abs_deviation": round(statistics.median(deviations), 4) if deviations else None,
            "p90_abs_deviation": round(deviations[int(0.9 * (len(deviations) - 1))], 4) if deviations else None,
        }

    every = list(rows.values())
    return {
        **summary(every),
        "by_source": {name: summary([row for row in every if row["source"] == name]) for name in sorted({row["source"] for row in every})},
        "by_runtime": {name: summary([row for row in every if row["class"] == name]) for _, name in RUNTIME_CLASSES_MS},
        "misses": [row["miss"] for row in every if not row["inside"]],
    }


def _source_stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    correct = [record for record in records if record["correct"]]
    speedups = [record["speedup"] for record in correct]
    runtimes = [record["t_candidate_ms"] for record in correct]
    return {
        "tried": len(records),
        "correct": len(correct),
        "failures": dict(sorted(Counter(record["failure"]["kind"] for record in records if not record["correct"]).items())),
        "slower_than_eager": sum(speedup < 1 for speedup in speedups),
        "s_median": round(statistics.median(speedups), 4) if speedups else None,
        "runtime_ms_range": [round(min(runtimes), 5), round(max(runtimes), 5)] if runtimes else None,
    }


class Codes:
    """The solutions' and problems' text, read back from the mirrors by the manifest's paths."""

    def __init__(self, mirrors: Path) -> None:
        self.mirrors = mirrors
        self.opened: dict[tuple[str, str], Mirror] = {}

    def mirror(self, repo: str, commit: str) -> Mirror:
        return self.opened.setdefault((repo, commit), Mirror(self.mirrors, repo, commit))

    def text(self, repo: str, commit: str, path: str) -> str:
        return self.mirror(repo, commit).read(path).decode("utf-8", "replace")


def pairs(records: list[dict[str, Any]], mirrors: Path) -> Iterator[LabelledPair]:
    """Labelled pairs of the correct records, kinds as wire.PAIR_KINDS names them:
    `llm-vs-eager` and `inductor-vs-eager` (each record against its problem's eager Model),
    `llm-vs-compile` (a solution against torch.compile of the same problem file) and `variant`
    (two solutions of one problem file from one source, S from their speedups over eager, both ways round);
    records pair only with records measured on the same GPU.
    A library's records and helion's examples give `library-vs-eager` and `library-vs-compile` (`library_pairs`), fla's
    `library-vs-naive` and `variant` (`fla_pairs`);
    TritonBench's `llm-vs-human`, `llm-vs-eager` and `variant` (`tritonbench_pairs`); CUDA-L2's `llm-vs-cublas`
    and `variant` (`cuda_l2_pairs`); a launch edit's, `edit` (the solution it was made from against
    it, S from their speedups)."""
    from workshop.realworld.sources import by_name

    codes = Codes(mirrors)
    by_problem: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        if record["correct"]:  # S between two records holds only where both ran on one GPU
            by_problem[(record["problem_sha256"], record["gpu"])].append(record)
    # Sources whose groups pair by rules of their own; KernelBench solutions and their edits follow.
    own_rules: tuple[tuple[Callable[[dict[str, Any]], bool], Callable[[list[dict[str, Any]], Codes], Iterator[LabelledPair]]], ...] = (
        (is_fla, fla_pairs),
        (is_library, library_pairs),
        (is_helion, lambda members, codes: library_pairs(members, codes, helion_generated)),
        (is_tritonbench, tritonbench_pairs),
        (is_cuda_l2, cuda_l2_pairs),
    )
    for members in by_problem.values():
        rule = next((paired for belongs, paired in own_rules if belongs(members[0])), None)
        if rule is not None:
            yield from rule(members, codes)
            continue
        edited = [record for record in members if is_edit(record)]
        members = [record for record in members if not is_edit(record)]
        if not members:
            continue
        first = members[0]
        source = by_name(first["source"])
        problem_code = codes.text(source.problems_repo, source.problems_commit, first["problem_path"])
        eager = KernelSide(problem_code, "pytorch", "Model")
        sides = {}
        for record in members:
            if record["language"] == INDUCTOR:
                sides[record["id"]] = KernelSide(problem_code + COMPILED_MODEL, "pytorch", "ModelNew")
            else:
                language = record["language"] if record["language"] in KERNEL_LANGUAGES else "pytorch"
                sides[record["id"]] = KernelSide(codes.text(record["repo"], record["commit"], record["path"]), language, "ModelNew")
        group = _problem_group(first, f"{first['level']}/{first['problem_name']}")
        compiled = next((record for record in members if record["language"] == INDUCTOR), None)
        for record in members:
            kind = "inductor-vs-eager" if record["language"] == INDUCTOR else "llm-vs-eager"
            yield _pair(record, kind, eager, sides[record["id"]], record["speedup"], record["ci95"], f"{group}/ref=eager")
            if compiled is not None and record is not compiled:
                speedup, interval = _ratio(compiled, record)
                yield _pair(record, "llm-vs-compile", sides[compiled["id"]], sides[record["id"]], speedup, interval, f"{group}/ref=compile")
        solutions = [record for record in members if record["language"] != INDUCTOR]
        timed = {record["id"]: _timed_on(sides[record["id"]], problem_code) for record in solutions}
        for reference in solutions:
            for candidate in solutions:
                # Within one source: a pair must not straddle the sources that folds hold out.
                if candidate is not reference and candidate["source"] == reference["source"]:
                    speedup, interval = _ratio(reference, candidate)
                    yield _pair(
                        candidate,
                        "variant",
                        timed[reference["id"]],
                        timed[candidate["id"]],
                        speedup,
                        interval,
                        f"{group}/ref={reference['id']}",
                        reference,
                    )
        for record in edited:
            base = next((member for member in members if member["id"] == record["base"]), None)
            if base is not None:
                text = edited_text(record, codes.mirror(record["repo"], record["commit"]))
                edit = _timed_on(KernelSide(text, sides[base["id"]].language, "ModelNew"), problem_code)
                speedup, interval = _ratio(base, record)
                yield _pair(record, "edit", timed[base["id"]], edit, speedup, interval, f"{group}/ref={base['id']}", base)


def library_pairs(
    members: list[dict[str, Any]], codes: Codes, generate: Callable[[dict[str, Any]], tuple[str, str]] | None = None
) -> Iterator[LabelledPair]:
    """One operator-shape's pairs: the library kernel against eager PyTorch and against torch.compile
    of the same reference. The candidate's code is the library file that implements the op (read
    from the mirror; helion's: the example file) followed by the generated ModelNew that calls it;
    the reference is generated, by `generate` where given (helion's templates), else by library.py's."""
    first = members[0]
    mirror = codes.mirror(first["repo"], first["commit"])
    generate = generate or (lambda record: generated(record, mirror))
    reference_code = generate(first)[0]
    eager = KernelSide(reference_code, "pytorch", "Model")
    compiled = next((record for record in members if record["language"] == INDUCTOR), None)
    group = _problem_group(first, first["problem"])
    for record in members:
        if record["language"] == INDUCTOR:
            side = KernelSide(reference_code + COMPILED_MODEL, "pytorch", "ModelNew")
            yield _pair(record, "inductor-vs-eager", eager, side, record["speedup"], record["ci95"], f"{group}/ref=eager")
            continue
        harness = generate(record)[1][len(reference_code) :]
        side = KernelSide(codes.text(record["repo"], record["commit"], record["path"]) + "\n" + harness, "triton", "ModelNew")
        yield _pair(record, "library-vs-eager", eager, side, record["speedup"], record["ci95"], f"{group}/ref=eager")
        if compiled is not None:
            compiled_side = KernelSide(reference_code + COMPILED_MODEL, "pytorch", "ModelNew")
            speedup, interval = _ratio(compiled, record)
            yield _pair(record, "library-vs-compile", compiled_side, side, speedup, interval, f"{group}/ref=compile")


def fla_pairs(members: list[dict[str, Any]], codes: Codes) -> Iterator[LabelledPair]:
    """One fla family-shape's pairs: each kernel against the naive reference (`library-vs-naive`), and the
    chunked and the recurrent kernel against each other (`variant`, both ways round). A side's code is
    the fla file it runs (the kernel's, or naive.py) read from the mirror, followed by the generated
    harness; the reference's harness is the whole generated file, the kernel's its ModelNew."""
    first = members[0]
    reference_code = fla_generated(first)[0]
    naive = KernelSide(codes.text(first["repo"], first["commit"], first["naive_path"]) + "\n" + reference_code, "pytorch", "Model")
    sides = {}
    for record in members:
        harness = fla_generated(record)[1][len(reference_code) :]
        kernel = codes.text(record["repo"], record["commit"], record["path"])
        sides[record["id"]] = KernelSide(kernel + "\n" + harness, "triton", "ModelNew")
    group = _problem_group(first, first["problem"])
    timed = {name: _timed_on(side, naive.code) for name, side in sides.items()}
    for record in members:
        yield _pair(record, "library-vs-naive", naive, sides[record["id"]], record["speedup"], record["ci95"], f"{group}/ref=naive")
        yield from _variants(record, members, timed, group)


def tritonbench_pairs(members: list[dict[str, Any]], codes: Codes) -> Iterator[LabelledPair]:
    """One kernel-size's pairs: each LLM candidate against the human Triton kernel it was written to
    replace (track G, `llm-vs-human`) or against the torch operator (track T, `llm-vs-eager`), and against
    each other candidate of the kernel-size (`variant`, both ways round). Each side is the kernel's text and
    the KernelBench file measured, as a user would write them (`tritonbench_sides`), read back from the mirror."""
    sides = {record["id"]: tritonbench_sides(record, codes.mirror(record["repo"], record["commit"])) for record in members}
    candidates = {name: candidate for name, (_, candidate) in sides.items()}
    for record in members:
        reference = sides[record["id"]][0]
        kind = "llm-vs-human" if record["track"] == "G" else "llm-vs-eager"
        group = _problem_group(record, record["problem"])
        yield _pair(
            record, kind, reference, candidates[record["id"]], record["speedup"], record["ci95"], f"{group}/ref={reference.language}"
        )
        yield from _variants(record, members, candidates, group)


def cuda_l2_pairs(members: list[dict[str, Any]], codes: Codes) -> Iterator[LabelledPair]:
    """One shape's pairs: each kernel against torch.matmul (`llm-vs-cublas`), and each kernel against
    one tuned for another GPU or accumulator at the same shape (`variant`, both ways round). A
    kernel's side is the generated file that was timed (its ModelNew builds the .cu file, read from
    the mirror, with load_inline, and pads the inputs where the tiles do not divide the shape); the
    reference is the generated torch file.

    Not the .cu file alone: that hides what the time includes. A padded kernel (16 of the 113) measured
    slower than one of the same shape that needs none in all 27 such pairs, by a median 1.9 octaves,
    which the .cu text cannot show (held-out numbers: benchmarks/results/realworld_eval.md)."""
    first = members[0]
    cublas = KernelSide(reference_code(*first["shape"]), "pytorch", "Model")
    sides = {
        record["id"]: KernelSide(cuda_l2_generated(record, codes.mirror(record["repo"], record["commit"]))[1], "cuda", "ModelNew")
        for record in members
    }
    group = _problem_group(first, first["problem"])
    for record in members:
        yield _pair(record, "llm-vs-cublas", cublas, sides[record["id"]], record["speedup"], record["ci95"], f"{group}/ref=cublas")
        yield from _variants(record, members, sides, group)


def _problem_group(record: dict[str, Any], name: str) -> str:
    """The group of a record's pairs: its problem file (name and digest) on the GPU it ran on. Records
    of one problem measured on two GPUs are never paired, and their candidates are ranked apart."""
    return f"{name}@{record['problem_sha256'][:8]}/{record['gpu']}"


def _variants(record: dict[str, Any], members: list[dict[str, Any]], sides: dict[str, KernelSide], group: str) -> Iterator[LabelledPair]:
    """`variant` pairs of one record: each other member of its group as the reference (`_ratio`)."""
    for other in members:
        if other is not record:
            speedup, interval = _ratio(other, record)
            yield _pair(record, "variant", sides[other["id"]], sides[record["id"]], speedup, interval, f"{group}/ref={other['id']}", other)


def _timed_on(side: KernelSide, problem_code: str) -> KernelSide:
    """A solution as its pairs against another solution show it: with its problem's inputs, which
    the editor reads beside such a pair (analysis.build_request) and which neither file states."""
    return KernelSide(with_problem_inputs(side.code, problem_code), side.language, side.name)


def _ratio(reference: dict[str, Any], candidate: dict[str, Any]) -> tuple[float, tuple[float, float]]:
    """S between two records of one problem: the ratio of their speedups over the reference both were
    timed against, each interleaved with it in its own run, with an interval that adds both records'
    relative half-widths in quadrature.

    Not the ratio of their medians: records of one group are often timed in different runs, and a
    run's conditions move a microsecond kernel's median as a whole. The reference's own median moved
    by more than 5x between runs in a tenth of TritonBench's groups (0.006 against 0.043 ms for one
    human kernel); in a run, reference and candidate move together. On 170 TritonBench variant pairs
    whose two sides are the same text but for comments and whitespace (true S = 1), the medians' ratio
    was off by 0.457 octaves on average, the speedups' by 0.148. The two gave opposite directions to 642
    of TritonBench's 3,874 variant pairs, 104 of LLMKernel's 2,460, 12 of CUDA-L2's 222 and 13 or fewer
    of any other source's pairs of a kind."""
    speedup = candidate["speedup"] / reference["speedup"]
    widths = [math.log(record["ci95"][1] / record["ci95"][0]) / 2 for record in (reference, candidate)]
    half = math.hypot(*widths)
    return speedup, (speedup * math.exp(-half), speedup * math.exp(half))


def _pair(
    record: dict[str, Any],
    kind: str,
    reference: KernelSide,
    candidate: KernelSide,
    speedup: float,
    interval: Any,
    group: str,
    reference_record: dict[str, Any] | None = None,
) -> LabelledPair:
    spec = lookup(record["gpu"])
    hardware = {**spec.to_json(), "fingerprint": spec.fingerprint()}
    suffix = f"/vs/{reference_record['id']}" if reference_record else ""
    return LabelledPair(
        id=f"{record['id']}/{kind}{suffix}",
        kind=kind,
        request=ForecastRequest(reference, candidate, hardware, record["sizes"] or None),
        speedup=speedup,
        op=f"{record['source']}/{record['op']}" if "op" in record else f"L{record['level']}/{record['problem_name']}",
        group=group,
        ci95=(interval[0], interval[1]),
        source=record["source"],
        extra={"language": record["language"]},
    )
