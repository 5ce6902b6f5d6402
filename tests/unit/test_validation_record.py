"""The validated-spec digest is the same in every process: a converged `cluster create` re-run (a new process,
a new hash seed) finds its spec validated and runs no smoke test."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
from dataclasses import replace
from gpuctl.model.catalog import get_gpu
from gpuctl.model.spec import UNSTATED, GroupPlan, NodeGroupSpec, PlatformSpec
from gpuctl.model.stack_spec import StackSpec
from gpuctl.ops.validation_record import spec_digest
group = GroupPlan(NodeGroupSpec("gpu", get_gpu("t4"), 2, 1))
spec = PlatformSpec("demo", "sim", (group,), StackSpec("bundled"), unstated=frozenset(UNSTATED))
print(spec_digest(spec), spec_digest(replace(spec, unstated=frozenset())))
"""


def digests(seed: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": seed})
    return proc.stdout.split()


def test_the_digest_does_not_follow_the_hash_seed_nor_what_a_command_line_left_unsaid() -> None:
    runs = [digests(seed) for seed in ("1", "2", "3", "4")]
    assert len({d for run in runs for d in run}) == 1, runs
