"""Forecasts, facts and measurements on disk (diskcache), shared by editor windows.

Keys are hashes of content — never LSP version numbers, which restart when a file
is reopened. A cache that cannot be opened is moved aside and rebuilt; a folder that
cannot be made, or a cache that fails later (disk full, read-only), degrades to no
caching. The server shows each problem to the user once (`new_warnings`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import diskcache

from kernelcast import paths

logger = logging.getLogger(__name__)

SIZE_LIMIT_BYTES = 512 * 2**20
# diskcache's defaults (64 MB mmap, 32 MB page cache per thread's connection) made the
# server's RSS climb with the size of the cache file while typing; the LSP reads a few
# small rows per edit and needs neither.
SQLITE_SETTINGS = {"sqlite_mmap_size": 0, "sqlite_cache_size": 2**9}
_PROBE_KEY = "kernelcast:probe"


def content_key(kind: str, parts: dict[str, Any]) -> str:
    """A stable key for anything whose result depends only on `parts`."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return f"{kind}:{hashlib.sha256(blob).hexdigest()}"


class ResultCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.warnings: list[str] = []
        self._reported = 0
        self._cache = self._open()

    def _open(self) -> diskcache.Cache | None:
        try:
            return self._open_and_probe()
        except Exception as error:  # sqlite3.DatabaseError, OSError, …: anything that stops the open
            first = error
        # Only a folder holding a cache is moved aside: never a file or a folder of the user's.
        if not (self.directory / "cache.db").is_file():
            self._disable(first)
            return None
        aside = self.directory.with_name(f"{self.directory.name}.corrupt-{int(time.time())}")
        try:
            shutil.move(str(self.directory), str(aside))
            cache = self._open_and_probe()
        except Exception as second:
            self._disable(second)
            return None
        self._warn(f"cache at {self.directory} could not be opened ({first}); moved to {aside} and rebuilt")
        return cache

    def _open_and_probe(self) -> diskcache.Cache:
        paths.private_dir(self.directory)
        cache = diskcache.Cache(str(self.directory), size_limit=SIZE_LIMIT_BYTES, eviction_policy="least-recently-used", **SQLITE_SETTINGS)
        cache.set(_PROBE_KEY, time.time())
        cache.get(_PROBE_KEY)
        return cache

    def _disable(self, error: Exception) -> None:
        self._warn(f"cache disabled: {self.directory} is unusable ({error}); results are kept in memory only")

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            logger.warning(message)
            self.warnings.append(message)

    def new_warnings(self) -> list[str]:
        """Warnings not handed out before: the server shows each to the user once."""
        fresh, self._reported = self.warnings[self._reported :], len(self.warnings)
        return fresh

    def get(self, key: str) -> Any:
        if self._cache is None:
            return None
        try:
            return self._cache.get(key)
        except Exception as error:
            self._degrade("read", error)
            return None

    def put(self, key: str, value: Any) -> None:
        if self._cache is None:
            return
        try:
            self._cache.set(key, value)
        except Exception as error:
            self._degrade("write", error)

    def _degrade(self, action: str, error: Exception) -> None:
        self._warn(f"cache {action} failed ({error}); results are kept in memory only")

    def clear(self) -> int:
        if self._cache is None:
            return 0
        try:
            return int(self._cache.clear())
        except Exception as error:
            self._degrade("clear", error)
            return 0

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()
