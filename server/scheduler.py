"""Per-file debounced work: a new edit cancels the file's running task and starts over.

pygls has no debounce helper; this is the whole of it. The task itself decides,
after every await, whether its text is still current (analysis.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)


class FileScheduler:
    def __init__(
        self,
        work: Callable[[str], Awaitable[None]],
        after_each: Callable[[], None] = lambda: None,
        on_failure: Callable[[str, Exception], None] = lambda uri, error: None,
    ) -> None:
        self._work = work
        self._after_each = after_each  # e.g. tell the client the server went idle
        self._on_failure = on_failure  # e.g. tell the user, who would otherwise see nothing happen
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def schedule(self, uri: str, delay_s: float) -> None:
        """Run `work(uri)` after `delay_s` unless another call for `uri` comes first."""
        self.cancel(uri)
        self._tasks[uri] = asyncio.get_running_loop().create_task(self._run(uri, delay_s))

    def cancel(self, uri: str) -> None:
        task = self._tasks.pop(uri, None)
        if task is not None and not task.done():
            task.cancel()

    def cancel_all(self) -> None:
        for uri in list(self._tasks):
            self.cancel(uri)

    def pending(self) -> int:
        return sum(1 for task in self._tasks.values() if not task.done())

    async def _run(self, uri: str, delay_s: float) -> None:
        try:
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            await self._work(uri)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # one file's failure must not stop the others
            logger.exception("analysis of %s failed", uri)
            self._on_failure(uri, error)
        finally:
            if self._tasks.get(uri) is asyncio.current_task():
                del self._tasks[uri]
                self._after_each()
