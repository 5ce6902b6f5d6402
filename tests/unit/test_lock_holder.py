"""The apply Lease's holder identity: a later gpuctl on the same host proves a killed one dead."""

from __future__ import annotations

import os
import socket
import subprocess

from gpuctl.kube.lock import holder_identity, holder_is_dead


def test_a_running_holder_is_alive() -> None:
    assert not holder_is_dead(holder_identity())


def test_a_holder_whose_process_is_gone_is_dead() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert holder_is_dead(f"{socket.gethostname()}/{gone.pid}/1.abcdef")


def test_a_reused_pid_is_another_process() -> None:
    assert holder_is_dead(f"{socket.gethostname()}/{os.getpid()}/1.abcdef")


def test_a_holder_elsewhere_or_unreadable_may_be_alive() -> None:
    assert not holder_is_dead(f"not-{socket.gethostname()}/1/1.abcdef")
    assert not holder_is_dead("someone")
    assert not holder_is_dead(f"{socket.gethostname()}/{os.getpid()}/abcdef")  # old form: pid alive
