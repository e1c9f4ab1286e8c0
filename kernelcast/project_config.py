"""Project settings: `[tool.kernelcast]` in pyproject.toml, or the top level of kernelcast.toml.

The nearest config walking up from a file wins, never above the workspace root; in one
folder kernelcast.toml beats pyproject.toml, and a pyproject.toml without
`[tool.kernelcast]` is passed over. Paths are relative to the config file's folder.

    [tool.kernelcast]
    target_gpu = "H100-SXM"            # the GPU forecasts are for (kernels_runtime.hardware)
    problem = { N = 16777216 }         # default problem sizes for every file
    [[tool.kernelcast.references]]     # the first rule whose `files` match applies
    files = "kernels/*_v2.cu"          # a glob or a list of globs; `*` stays in a folder, `**` spans folders
    reference = "kernels/baseline.cu::vector_add"
    problem = { N = 1048576 }          # sizes for these files, over the defaults

Mistakes become `problems` (with file and line where TOML tells us), never exceptions,
and parsed files are cached by (path, mtime, size) so the per-keystroke lookup is a few stats.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from kernelcast.kernels_runtime.hardware import lookup

CONFIG_FILE = "kernelcast.toml"
PYPROJECT_FILE = "pyproject.toml"
_RULE_KEYS = frozenset({"files", "reference", "problem"})
_TOP_KEYS = frozenset({"target_gpu", "problem", "references"})


@dataclass(frozen=True)
class ReferenceRule:
    files: tuple[str, ...]  # globs relative to the config's folder
    reference: str  # path[::kernel], relative to the config's folder
    problem: dict[str, int] = field(default_factory=dict)  # defaults merged under the rule's own sizes

    def matches(self, relative_path: str) -> bool:
        return any(_glob_regex(pattern).fullmatch(relative_path) for pattern in self.files)


@dataclass(frozen=True)
class ProjectConfig:
    root: Path | None  # the config file's folder; None when no config applies
    target_gpu: str | None
    problem: dict[str, int]
    references: tuple[ReferenceRule, ...]
    problems: tuple[str, ...]
    path: Path | None = None  # the config file itself

    def rule_for(self, file_path: Path) -> ReferenceRule | None:
        """The first reference rule whose globs match the file, if any."""
        if self.root is None or not self.references:
            return None
        try:
            relative = Path(file_path).resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return None  # the file is not under this config's folder
        return next((rule for rule in self.references if rule.matches(relative)), None)


NO_CONFIG = ProjectConfig(None, None, {}, (), ())
_CACHE: dict[Path, tuple[tuple[int, int], ProjectConfig | None]] = {}


def load_project_config(file_path: Path, workspace_root: Path | None) -> ProjectConfig:
    """The config that applies to `file_path`: the nearest one up to `workspace_root`."""
    start = Path(file_path).resolve().parent
    stop = Path(workspace_root).resolve() if workspace_root is not None else None
    for folder in (start, *start.parents):
        for name in (CONFIG_FILE, PYPROJECT_FILE):
            config = _cached_config(folder / name)
            if config is not None:
                return config
        if folder == stop:
            break
    return NO_CONFIG


def target_gpu_for(file_path: Path, workspace_root: Path | None, explicit: str | None) -> str | None:
    """The GPU to forecast for, by name: an explicit choice (`--gpu`, the `targetGpu` setting)
    beats the project's `target_gpu`; None leaves it to the local GPU, else H100-SXM
    (kernels_runtime.hardware.resolve_target). The CLI and the editor both ask here."""
    return explicit or load_project_config(file_path, workspace_root).target_gpu


def _cached_config(path: Path) -> ProjectConfig | None:
    try:
        status = path.stat()
    except OSError:
        return None
    stamp = (status.st_mtime_ns, status.st_size)
    cached = _CACHE.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    config = _read_config(path)
    _CACHE[path] = (stamp, config)
    return config


def _read_config(path: Path) -> ProjectConfig | None:
    """The parsed config; None for a pyproject.toml that has no kernelcast section."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        return _broken(path, f"{path}: cannot read ({error})")
    is_pyproject = path.name == PYPROJECT_FILE
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        if is_pyproject and "tool.kernelcast" not in text:
            return None
        return _broken(path, f"{path}: invalid TOML: {error}")
    if is_pyproject:
        section = data.get("tool", {}).get("kernelcast") if isinstance(data.get("tool"), dict) else None
        if section is None:
            return None
    else:
        section = data
    return _config_from_table(path, text, section)


def _broken(path: Path, problem: str) -> ProjectConfig:
    return ProjectConfig(path.parent, None, {}, (), (problem,), path)


def _config_from_table(path: Path, text: str, table: Any) -> ProjectConfig:
    problems: list[str] = []

    def report(message: str, key: str, occurrence: int = 0) -> None:
        line = _line_of_key(text, key, occurrence)
        problems.append(f"{path}{f':{line}' if line else ''}: {message}")

    if not isinstance(table, dict):
        report("[tool.kernelcast] must be a table", "kernelcast")
        return ProjectConfig(path.parent, None, {}, (), tuple(problems), path)
    if path.name == CONFIG_FILE and isinstance(table.get("tool"), dict) and "kernelcast" in table["tool"]:
        report(
            f"{CONFIG_FILE} takes its settings at the top level: drop the `[tool.kernelcast]` header "
            "(and write `[[references]]` for `[[tool.kernelcast.references]]`), or move the table into pyproject.toml",
            "tool",
        )
        table = {**table["tool"]["kernelcast"], **{key: value for key, value in table.items() if key != "tool"}}
    for key in sorted(set(table) - _TOP_KEYS):
        report(f"unknown setting {key!r}; known: {', '.join(sorted(_TOP_KEYS))}", key)
    target_gpu = _target_gpu(table.get("target_gpu"), report)
    defaults = _problem_sizes(table.get("problem", {}), report, "problem")
    rules: list[ReferenceRule] = []
    raw_rules = table.get("references", [])
    if not isinstance(raw_rules, list):
        report("`references` must be an array of tables ([[tool.kernelcast.references]])", "references")
        raw_rules = []
    for index, raw in enumerate(raw_rules):
        rule = _rule(raw, defaults, lambda message, key="references": report(f"reference rule {index + 1}: {message}", key, index))
        if rule is not None:
            rules.append(rule)
    return ProjectConfig(path.parent, target_gpu, defaults, tuple(rules), tuple(problems), path)


def _target_gpu(value: Any, report: Callable[..., None]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        report('`target_gpu` must be a string such as "H100-SXM"', "target_gpu")
        return None
    try:
        return lookup(value).key
    except KeyError as error:
        report(str(error.args[0]), "target_gpu")
        return None


def _problem_sizes(value: Any, report: Callable[..., None], key: str) -> dict[str, int]:
    if not isinstance(value, dict):
        report("`problem` must be a table of sizes, e.g. { N = 1048576 }", key)
        return {}
    sizes: dict[str, int] = {}
    for name, size in value.items():
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            sizes[name] = size
        else:
            report(f"problem size {name!r} must be a positive integer, got {size!r}", key)
    return sizes


def _rule(raw: Any, defaults: dict[str, int], report: Callable[..., None]) -> ReferenceRule | None:
    if not isinstance(raw, dict):
        report("must be a table with `files` and `reference`")
        return None
    for key in sorted(set(raw) - _RULE_KEYS):
        report(f"unknown key {key!r}; known: files, reference, problem")
    files = raw.get("files")
    globs = (files,) if isinstance(files, str) else tuple(files) if isinstance(files, list) else ()
    if not globs or not all(isinstance(g, str) and g.strip() for g in globs):
        report("`files` must be a glob or a list of globs")
        return None
    reference = raw.get("reference")
    if not isinstance(reference, str) or not reference.strip():
        report("`reference` must be a non-empty string `path[::kernel]`")
        return None
    problem = {**defaults, **_problem_sizes(raw.get("problem", {}), report, "problem")}
    return ReferenceRule(globs, reference.strip(), problem)


def _line_of_key(text: str, key: str, occurrence: int) -> int | None:
    """1-based line of the `occurrence`-th line mentioning `key` (TOML keeps no positions)."""
    pattern = re.compile(rf"^[ \t]*(?:\[\[?[\w.\"]*\b{re.escape(key)}\b|{re.escape(key)}\s*=)", re.MULTILINE)
    matches = list(pattern.finditer(text))
    if not matches:
        return None
    chosen = matches[min(occurrence, len(matches) - 1)]
    return text.count("\n", 0, chosen.start()) + 1


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    """fnmatch-style glob over a relative POSIX path: `*` and `?` stay in one folder, `**` spans any."""
    parts: list[str] = []
    for token in re.finditer(r"\*\*/|\*\*|\*|\?|\[[^\]/]+\]|[^*?\[]+|\[", pattern.strip().removeprefix("./")):
        text = token.group()
        if text == "**/":
            parts.append("(?:.*/)?")
        elif text == "**":
            parts.append(".*")
        elif text == "*":
            parts.append("[^/]*")
        elif text == "?":
            parts.append("[^/]")
        elif text.startswith("[") and len(text) > 1:
            negated = text[1] == "!"
            parts.append("[" + ("^" if negated else "") + text[2 if negated else 1 : -1].replace("\\", "\\\\") + "]")
        else:
            parts.append(re.escape(text))
    return re.compile("".join(parts))
