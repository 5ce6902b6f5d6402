"""Ctrl-C that is never lost between a run's steps.

Python turns SIGINT into KeyboardInterrupt wherever the main thread is, and code on the way may end it without
a word: asyncio's runner (Python 3.11 asyncio/runners.py Runner._on_sigint) only cancels its task, so a task
that completes anyway returns normally and the interrupt is gone. A run of steps records the signal as well, and
asks at each step boundary whether one came."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class InterruptRecord:
    """Whether SIGINT came while `recording_interrupts` was in force."""

    def __init__(self) -> None:
        self.seen = False

    def check(self) -> None:
        """KeyboardInterrupt where a SIGINT came and something swallowed its KeyboardInterrupt."""
        if self.seen:
            raise KeyboardInterrupt


@contextmanager
def recording_interrupts() -> Iterator[InterruptRecord]:
    """SIGINT recorded, then raised as KeyboardInterrupt as Python's own handler does; the previous handler back
    on exit. Off the main thread (no signals there) only the record, never set."""
    record = InterruptRecord()
    if threading.current_thread() is not threading.main_thread():
        yield record
        return

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        record.seen = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield record
    finally:
        signal.signal(signal.SIGINT, previous)
