"""Waits that last as long as things converge, not a fixed time that suits two nodes.

A wait for many nodes (capacity, MIG state) looks at the cluster again and again; each look counts what
has converged (`Count`: nodes that advertise their GPUs, device-plugin pods updated and ready, ...). The
wait ends
- done, when a look says so;
- stalled, when no count rose for `stall` seconds (STALL_S): WaitTimeout (exit 7) naming what was
  awaited, how long nothing moved, and the counts;
- at the limit, after `timeout` seconds in all when one is given (the caller's, or the `--timeout` of
  `apply` and `cluster create` for every such wait of the command, see `wait_limit`): WaitTimeout likewise.
A count is compared with the previous look, not with its best: a rollout that first takes every pod
down (a device-plugin restart) and brings them back is progress, not a stall.
On a terminal the wait is a live line with the counts (gpuctl.util.progress).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from gpuctl.util.errors import WaitTimeout
from gpuctl.util.progress import waiting

STALL_S = 120.0  # no count rose for this long: the wait has stalled
POLL_S = 0.5  # between looks; a look that took longer (1,000 nodes) is followed by as long a pause
SAY_STALLED_AFTER_S = 10.0  # the live line says how long nothing moved once it is this long

_LIMIT: ContextVar[float | None] = ContextVar("gpuctl_wait_limit", default=None)


@dataclass(frozen=True)
class Count:
    """How many of `total` things have converged; `label` says what (`nodes advertise their GPUs`)."""

    label: str
    done: int
    total: int

    def __str__(self) -> str:
        return f"{self.done}/{self.total} {self.label}"


@dataclass(frozen=True)
class Look:
    """One look at a converging state: is it done, the counts, and what is still wrong (for messages)."""

    finished: bool
    counts: tuple[Count, ...] = ()
    detail: str = ""

    def summary(self) -> str:
        counts = ", ".join(map(str, self.counts))
        return "; ".join(part for part in (counts, self.detail) if part)


@contextmanager
def wait_limit(seconds: float | None) -> Iterator[None]:
    """Within this block, every wait_until without a timeout of its own gives up after `seconds`
    (None: only a stall ends it). How a command's `--timeout` reaches the waits of its steps."""
    token = _LIMIT.set(seconds)
    try:
        yield
    finally:
        _LIMIT.reset(token)


def current_limit() -> float | None:
    """The limit wait_limit set, if any."""
    return _LIMIT.get()


def moved(before: dict[str, int] | None, now: dict[str, int]) -> bool:
    """Whether any count rose since the last look (a count seen for the first time is not progress)."""
    return before is not None and any(value > before[label] for label, value in now.items() if label in before)


def pause_after(look_s: float, poll: float = POLL_S) -> float:
    """The pause after a look that took `look_s`: `poll`, or as long as the look when that is longer, so that
    looking at 1,000 nodes takes at most half of a CPU the cluster needs too."""
    return max(poll, look_s)


def wait_until(what: str, look: Callable[[], Look], hint: str, *, stall: float = STALL_S,
               timeout: float | None = None, every: float | None = None, poll: float = POLL_S,
               clock: Callable[[], float] | None = None, sleep: Callable[[float], None] | None = None) -> Look:
    """Look until a look is finished and return it. Raise WaitTimeout when no count rose for `stall`
    seconds, or after `timeout` seconds or the wait_limit in force, whichever is shorter (neither: only a
    stall ends it). `every`: also a progress line every so many seconds where stderr is no terminal.
    `clock` and `sleep` (default time.monotonic and time.sleep, looked up at each call) are for tests."""
    clock, sleep = clock or time.monotonic, sleep or time.sleep
    limit = min((t for t in (timeout, current_limit()) if t is not None), default=None)
    with waiting(what, limit, every, clock=clock) as wait:
        started = last_move = clock()
        before: dict[str, int] | None = None
        while True:
            began = clock()
            seen = look()
            if seen.finished:
                return seen
            now = clock()
            counts = {c.label: c.done for c in seen.counts}
            if moved(before, counts):
                last_move = now
            before = counts
            if limit is not None and now - started >= limit:
                raise WaitTimeout(f"{what}: not done after {limit:.0f}s: {seen.summary()}", hint)
            if now - last_move >= stall:
                raise WaitTimeout(f"{what}: no progress for {stall:.0f}s (after {now - started:.0f}s): "
                                  f"{seen.summary()}", hint)
            quiet = now - last_move
            line = ", ".join(map(str, seen.counts)) or seen.detail
            if quiet >= SAY_STALLED_AFTER_S:
                line += f" (no progress for {quiet:.0f}s of {stall:.0f}s)"
            wait.update(line)
            ends = last_move + stall if limit is None else min(last_move + stall, started + limit)
            sleep(min(pause_after(now - began, poll), ends - now))  # never past the moment the wait would end
