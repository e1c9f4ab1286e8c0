"""A progress count on stderr for long CLI runs; stdout stays for results."""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

# A terminal redraws at most this often: thousands of quick steps must not flood it.
REDRAW_S = 0.1
# Elsewhere (CI logs, pipes) one line this often, so a log shows the run is alive without a line per step.
LOG_EVERY_S = 10.0


class Progress:
    """`label N/M`: redrawn in place on a terminal, a plain line at the first step and then every
    `every_s` seconds elsewhere, and always one at M/M."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None, every_s: float = LOG_EVERY_S) -> None:
        self.label, self.total = label, total
        self.stream = stream if stream is not None else sys.stderr
        self.in_place = self.stream.isatty()
        self.every_s = REDRAW_S if self.in_place else every_s
        self.done = 0
        self._shown_at = -math.inf  # the first step shows at once: the run has begun
        self._open_line = False

    def advance(self, count: int = 1, note: str = "") -> None:
        self.update(self.done + count, note)

    def update(self, done: int, note: str = "", total: int | None = None) -> None:
        """`done` of the total so far (the total may be restated), with a note on what was done last."""
        self.done = done
        if total is not None:
            self.total = total
        now = time.monotonic()
        if self.done < self.total and now - self._shown_at < self.every_s:
            return
        self._shown_at = now
        text = " ".join(part for part in (self.label, f"{self.done}/{self.total}", note) if part)
        if self.in_place:
            self._open_line = self.done < self.total
            self.stream.write(f"\r{text}\x1b[K" + ("" if self._open_line else "\n"))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        """End a line a terminal still shows in place (a run that stopped before its total)."""
        if self._open_line:
            self.stream.write("\n")
            self.stream.flush()
            self._open_line = False
