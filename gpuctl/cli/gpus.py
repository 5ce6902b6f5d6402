"""`gpuctl gpus`: the GPU catalog."""

from __future__ import annotations

from dataclasses import asdict

import typer

from gpuctl.cli.settings import settings
from gpuctl.model.catalog import GPUS
from gpuctl.model.site import openstack_flavor
from gpuctl.util.output import emit, is_table

COLUMNS = ("name", "memory_mib", "family", "compute", "mig", "gpus_per_node")
WIDE = ("product", "ec2", "openstack_flavor")


def gpus(ctx: typer.Context) -> None:
    """List the GPU models gpuctl knows, with MIG capability and cloud shapes (site config applied).

    Examples:
      gpuctl gpus
      gpuctl gpus -o json
    """
    fmt = settings(ctx).output
    if is_table(fmt):
        rows = [{
            "name": m.name,
            "product": m.product,
            "memory_mib": m.memory_mib,
            "family": m.family,
            "compute": ".".join(map(str, m.compute_capability)),
            "mig": f"yes ({len(m.mig.profiles)} profiles)" if m.mig else "no",
            "gpus_per_node": m.default_gpus_per_node,
            "ec2": m.default_instance_type.name if m.default_instance_type else None,
            "openstack_flavor": openstack_flavor(m),
        } for m in GPUS.values()]
        emit(rows, fmt, COLUMNS, WIDE)
    else:
        emit([{**asdict(m), "mig_capable": m.mig_capable, "openstack_flavor": openstack_flavor(m)}
              for m in GPUS.values()], fmt)
