"""What the real-world corpus' tests share: a measurement as the GPU host's runner writes it, a pinned
mirror or a skip, a stale batch refused, a carried package's imports followed."""

from __future__ import annotations

import ast
import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from workshop.realworld import dataset, pack
from workshop.realworld.manifest import Mirror, load

MIRRORS = Path("/work/.mirror")


def pinned_mirror(repo: str, commit: str, probe: str) -> Mirror:
    """The mirror of `repo` at `commit`, or the test skipped where it is absent or lacks the commit (`probe`: a file there)."""
    try:
        mirror = Mirror(MIRRORS, repo, commit)
        mirror.read(probe)
    except FileNotFoundError as error:
        pytest.skip(f"no mirror of {repo}: {error}")
    except Exception as error:  # git show fails: the pinned commit is not in the mirror
        pytest.skip(f"the mirror of {repo} lacks {commit[:12]}: {error}")
    return mirror


def built_from_mirrors(build: Callable[[Path, Path], object], out: Path) -> list[dict[str, Any]]:
    """The rows of a manifest that `build` writes afresh from the mirrors to `out`."""
    build(MIRRORS, out)
    return load(out)


def refuses_stale(row: dict[str, Any], key: str, match: str, out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of `row` with `key` (a digest) zeroed is refused with a message matching `match`."""
    monkeypatch.setattr(pack, "load", lambda: [{**row, key: "0" * 64}])
    with pytest.raises(ValueError, match=match):
        pack.pack(out, MIRRORS)


def measured(entry_id: str, speedup: float, t_candidate_ms: float = 0.1, gpu: str = "H200") -> dict[str, Any]:
    """A result line as the runner writes it for a measurement."""
    return {
        "id": entry_id,
        "gpu": gpu,
        "seconds": 2.0,
        "speedup": speedup,
        "ci95": [speedup * 0.98, speedup * 1.02],
        "t_reference_ms": speedup * t_candidate_ms,
        "t_candidate_ms": t_candidate_ms,
        "details": {
            "round_ratios": [speedup] * 5,
            "tolerance": {"rule": "kernelbench", "atol_rtol": {"f32": 0.01}},
            "correctness": {"out": {"max_abs_err": 1e-6}},
            "versions": {"torch": "2.11.0"},
            "driver": "580",
        },
    }


def assembled(rows: list[dict[str, Any]], results: list[dict[str, Any]], folder: Path) -> list[dict[str, Any]]:
    """The records that `assemble` makes of run results over a manifest of `rows`, all of them measured."""
    manifest, lines, records = folder / "manifest.jsonl.gz", folder / "results.jsonl", folder / "records.jsonl.gz"
    with gzip.open(manifest, "wt") as stream:
        stream.writelines(json.dumps(row) + "\n" for row in rows)
    lines.write_text("".join(json.dumps(line) + "\n" for line in results))
    assert dataset.assemble([lines], records, [manifest]) == {"correct": len(results)}
    return dataset.read(records)


def carried_imports_resolve(lib: Path, module: str, seen: set[str]) -> None:
    """Follow the top-level imports of `module` (and of each package above it) that name a package carried
    in lib (a folder there), through lib; fail on one not carried."""
    if module in seen:
        return
    seen.add(module)
    carried = {folder.name for folder in lib.iterdir() if folder.is_dir()}
    parts = module.split(".")
    for depth in range(1, len(parts)):
        carried_imports_resolve(lib, ".".join(parts[:depth]), seen)
    folder = lib.joinpath(*parts)
    path = folder / "__init__.py" if folder.is_dir() else folder.with_suffix(".py")
    assert path.is_file(), f"{module} is imported but not carried"
    package = parts if folder.is_dir() else parts[:-1]
    statements = [node for node in ast.parse(path.read_text()).body if isinstance(node, (ast.Import, ast.ImportFrom))]
    for node in statements:
        if isinstance(node, ast.ImportFrom):
            target = ".".join(package[: len(package) - node.level + 1] + [node.module or ""]).strip(".") if node.level else node.module
            if target and target.split(".")[0] in carried:
                carried_imports_resolve(lib, target, seen)
                for alias in node.names:
                    if (lib.joinpath(*target.split("."), alias.name)).is_dir() or lib.joinpath(
                        *target.split("."), f"{alias.name}.py"
                    ).is_file():
                        carried_imports_resolve(lib, f"{target}.{alias.name}", seen)
        else:
            for alias in node.names:
                if alias.name.split(".")[0] in carried:
                    carried_imports_resolve(lib, alias.name, seen)
