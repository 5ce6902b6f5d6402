"""Long waits say what they await and for how long.

On a terminal (stderr is a TTY) a wait is one live line, redrawn in place by rich and gone when
the wait ends: `waiting for nvidia.com/mig.config.state=success (12s of 300s): 1/3 nodes`. rich
is imported only then. Elsewhere (pipes, CI logs, tests) a wait prints what it printed before:
one line every `every` seconds when the caller asks for it, nothing otherwise.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from gpuctl.util.lazy_import import LazyImport
from gpuctl.util.output import info

if TYPE_CHECKING:
    import rich.console as rich_console
    import rich.text as rich_text
else:
    rich_console = LazyImport("rich.console")
    rich_text = LazyImport("rich.text")


def live_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False


class Waiting:
    """A wait in progress; call `update(detail)` on every poll. Use as a context manager."""

    def __init__(self, what: str, timeout: float | None = None, every: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.timeout = timeout
        self.every = every
        self.clock = clock
        self.started = self._said = clock()
        self._status: Any = None
        self._console: Any = None

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started

    def line(self, detail: str = "") -> str:
        """What the live line shows: what is awaited, for how long of how long, and its state (last, so
        that a narrow terminal cuts the state, not the time)."""
        limit = f" of {self.timeout:.0f}s" if self.timeout else ""
        return f"waiting for {self.what} ({self.elapsed:.0f}s{limit}){': ' + detail if detail else ''}"

    def _text(self, detail: str = "") -> Any:
        """The line, cut to the terminal's width (beside the spinner): a live line never wraps."""
        text = rich_text.Text(self.line(detail))
        text.truncate(max(20, self._console.width - 3), overflow="ellipsis")
        return text

    def __enter__(self) -> Waiting:
        self.started = self._said = self.clock()
        if live_terminal():
            self._console = rich_console.Console(file=sys.stderr, highlight=False)
            self._status = self._console.status(self._text(), spinner="dots")
            self._status.start()
        return self

    def update(self, detail: str = "", what: str | None = None) -> None:
        if what is not None:
            self.what = what
        if self._status is not None:
            self._status.update(self._text(detail))
        elif self.every is not None and self.clock() - self._said >= self.every:
            info(f"  waiting for {self.what}{': ' + detail if detail else ''} ({self.elapsed:.0f}s)")
            self._said = self.clock()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


def waiting(what: str, timeout: float | None = None, every: float | None = None,
            clock: Callable[[], float] = time.monotonic) -> Waiting:
    """`with waiting("the kube-apiserver at https://...", 120) as wait: ... wait.update("not ready")`."""
    return Waiting(what, timeout, every, clock)
