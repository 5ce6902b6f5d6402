"""A Ctrl-C that code on the way swallows still stops a run of steps (gpuctl/util/interrupts.py)."""

from __future__ import annotations

import os
import signal

import pytest

from gpuctl.util.interrupts import recording_interrupts


def test_a_swallowed_ctrl_c_is_raised_at_the_next_check_and_the_handler_restored() -> None:
    before = signal.getsignal(signal.SIGINT)
    with recording_interrupts() as record:
        record.check()  # nothing came yet
        try:
            os.kill(os.getpid(), signal.SIGINT)  # Python runs the handler before the next bytecode
        except KeyboardInterrupt:
            pass  # what asyncio's runner or a careless except does to it
        assert record.seen
        with pytest.raises(KeyboardInterrupt):
            record.check()
    assert signal.getsignal(signal.SIGINT) is before
