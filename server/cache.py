"""Forecasts, facts and measurements on disk (diskcache), shared by editor windows.

Keys are hashes of content — never LSP version numbers, which restart when a file
is reopened. A cache that cannot be opened is moved aside and rebuilt; a cache
that fails later (disk full, read-only) degrades to no caching with one warning.
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
        self._cache = self._open()

    def _open(self) -> diskcache.Cache | None:
        try:
            return self._open_and_probe()
        except Exception as error:  # sqlite3.DatabaseError, OSError, …: anything that stops the open
            aside = self.directory.with_name(f"{self.directory.name}.corrupt-{int(time.time())}")
            message = f"cache at {self.directory} could not be opened ({error}); moved to {aside} and rebuilt"
            logger.warning(message)
            self.warnings.append(message)
            try:
                shutil.move(str(self.directory), str(aside))
                return self._open_and_probe()
            except Exception as second:
                message = f"cache disabled: {self.directory} is unusable ({second})"
                logger.warning(message)
                self.warnings.append(message)
                return None

    def _open_and_probe(self) -> diskcache.Cache:
        cache = diskcache.Cache(
            str(self.directory), size_limit=SIZE_LIMIT_BYTES, eviction_policy="least-recently-used", **SQLITE_SETTINGS
        )
        cache.set(_PROBE_KEY, time.time())
        cache.get(_PROBE_KEY)
        return cache

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
        message = f"cache {action} failed ({error}); results are kept in memory only"
        if message not in self.warnings:
            logger.warning(message)
            self.warnings.append(message)

    def clear(self) -> int:
        if self._cache is None:
            return 0
        try:
            return self._cache.clear()
        except Exception as error:
            self._degrade("clear", error)
            return 0

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()
