"""`gpuctl validate`: prove the GPU platform works (exit 6 when a check fails)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpuctl import api
from gpuctl.cli.settings import settings
from gpuctl.cli.types import seconds
from gpuctl.model.spec import SMOKE_IMAGE
from gpuctl.util.errors import ValidationFailed
from gpuctl.util.output import emit

COLUMNS = ("check", "ok", "detail")


def validate(
    ctx: typer.Context,
    nodegroup: Annotated[Optional[str], typer.Option("--nodegroup", metavar="NAME", help="Validate this node group only.")] = None,
    image: Annotated[Optional[str], typer.Option("--image", metavar="IMAGE", help="CUDA smoke-test image (default: NVIDIA's vectoradd sample).")] = None,
    timeout: Annotated[float, typer.Option("--timeout", parser=seconds, help="Seconds the smoke-test pod may take.")] = 120.0,
) -> None:
    """Prove the GPU platform works: allocatable GPUs as configured, one device plugin, no error from `gpuctl
    doctor`'s checks (check `doctor`), a CUDA smoke test.

    In DRA mode: each node's published devices, the DRA driver's kubelet plugin, and the smoke test with its GPU
    from a ResourceClaim. Exit 6 when a check fails.

    Examples:
      gpuctl validate
      gpuctl validate --nodegroup gpu --timeout 300
    """
    opts = settings(ctx)
    checks = api.validate_cluster(nodegroup, SMOKE_IMAGE if image is None else image, timeout, opts.target)
    emit([c.as_dict() for c in checks], opts.output, COLUMNS, fit="detail")  # -o wide: each detail whole
    failed = [c for c in checks if not c.ok]
    if failed:
        raise ValidationFailed(f"{len(failed)} of {len(checks)} checks failed: {failed[0].name}: {failed[0].detail}")
