"""The Python API of gpuctl; the CLI is a thin layer over these functions.

One module per concern, each importing what it needs at its head: specs (a GpuCluster read, validated and made a
PlatformSpec; a cloud's name judged), manifests (render), platform (plan, apply), clusters, nodegroups, status,
metrics (top, advise), validate, health (doctor), mig, tenants, sim (its tools); reach is how they reach a cluster
or a cloud.
The public names are this package's (`gpuctl.api.<name>`, and `gpuctl.<name>` through gpuctl/__init__.py): each
loads its module at its first use, by name, from _WHERE (the API's one lazy seam), so that a command loads only
the concern it calls (`cluster create --export-spec` no operation; tests/unit/test_lazy_imports.py, bench/startup).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the same names, for mypy: gpuctl.api.apply_platform keeps its signature
    from gpuctl.api.clusters import delete_cluster, list_clusters
    from gpuctl.api.health import doctor
    from gpuctl.api.manifests import render
    from gpuctl.api.metrics import advice_text, advise, top, top_table
    from gpuctl.api.mig import apply_mig
    from gpuctl.api.nodegroups import (
        add_node_group,
        delete_node_group,
        get_node_group,
        list_node_groups,
        scale_node_group,
    )
    from gpuctl.api.platform import apply_platform, plan_platform
    from gpuctl.api.sim import install_sim_tools
    from gpuctl.api.specs import check_cloud, load_document, load_spec, to_platform
    from gpuctl.api.status import gpu_status, status_columns, status_summary
    from gpuctl.api.tenants import add_tenant, ensure_tenant, list_tenants, remove_tenant
    from gpuctl.api.validate import validate_cluster
    from gpuctl.model.cloud_options import CloudOptions
    from gpuctl.model.spec import GroupPlan, PlatformSpec
    from gpuctl.model.specfile import export_spec
    from gpuctl.model.target import ClusterTarget
    from gpuctl.model.tenant import Tenant
    from gpuctl.ops.platform.apply import PlatformResult
    from gpuctl.ops.platform.plan import PlannedStep
    from gpuctl.ops.platform.results import StepResult
    from gpuctl.util.output import reporting

__all__ = ["CloudOptions", "GroupPlan", "PlannedStep", "PlatformResult", "PlatformSpec", "Tenant", "add_node_group",
           "apply_mig", "apply_platform", "delete_cluster", "delete_node_group", "ensure_tenant", "export_spec",
           "get_node_group", "gpu_status", "list_clusters", "list_node_groups", "list_tenants", "load_spec",
           "plan_platform", "remove_tenant", "render", "scale_node_group", "to_platform", "validate_cluster",
           "StepResult", "check_cloud", "install_sim_tools", "load_document", "reporting", "status_columns", "top",
           "status_summary", "top_table", "advise", "advice_text", "add_tenant", "ClusterTarget",
           "doctor"]

# module -> the public names it defines (the API's concerns, then the model's types and the results' types,
# which load with the model or with the operations that make them)
_MODULES: dict[str, tuple[str, ...]] = {
    "gpuctl.api.specs": ("load_spec", "load_document", "to_platform", "check_cloud"),
    "gpuctl.api.manifests": ("render",),
    "gpuctl.api.platform": ("plan_platform", "apply_platform"),
    "gpuctl.api.clusters": ("delete_cluster", "list_clusters"),
    "gpuctl.api.nodegroups": ("add_node_group", "scale_node_group", "delete_node_group", "get_node_group",
                              "list_node_groups"),
    "gpuctl.api.status": ("gpu_status", "status_columns", "status_summary"),
    "gpuctl.api.metrics": ("top", "top_table", "advise", "advice_text"),
    "gpuctl.api.validate": ("validate_cluster",),
    "gpuctl.api.health": ("doctor",),
    "gpuctl.api.mig": ("apply_mig",),
    "gpuctl.api.tenants": ("ensure_tenant", "add_tenant", "list_tenants", "remove_tenant"),
    "gpuctl.api.sim": ("install_sim_tools",),
    "gpuctl.model.cloud_options": ("CloudOptions",),
    "gpuctl.model.spec": ("GroupPlan", "PlatformSpec"),
    "gpuctl.model.specfile": ("export_spec",),
    "gpuctl.model.target": ("ClusterTarget",),
    "gpuctl.model.tenant": ("Tenant",),
    "gpuctl.util.output": ("reporting",),
    "gpuctl.ops.platform.apply": ("PlatformResult",),
    "gpuctl.ops.platform.plan": ("PlannedStep",),
    "gpuctl.ops.platform.results": ("StepResult",),
}
_WHERE: dict[str, str] = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> object:
    """A public name, its module loaded at its first use (lazy seam: a command loads only the concern it calls)
    and the name kept here, so that the next use finds it at once."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuctl.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
