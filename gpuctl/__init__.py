"""gpuctl: turn a cloud account into a working, shared GPU platform on Kubernetes.

The Python API the CLI is built on:

    import gpuctl
    spec = gpuctl.to_platform(*gpuctl.load_spec(Path("gpu-platform.yaml")))
    target = gpuctl.ClusterTarget(kubeconfig=None, context=None)  # kubectl's --kubeconfig and --context
    print([p.as_dict() for p in gpuctl.plan_platform(spec, target)])
    result = gpuctl.apply_platform(spec, target, report=print)
"""

from __future__ import annotations

__version__ = "0.1.0"

# gpuctl.api.__all__ (a test keeps them equal); listed here so that looking up a submodule
# such as gpuctl.model.labels never imports the API.
_API = frozenset({
    "CloudOptions", "GroupPlan", "PlannedStep", "PlatformResult", "PlatformSpec", "Tenant", "add_node_group",
    "apply_mig", "apply_platform", "delete_cluster", "delete_node_group", "ensure_tenant", "export_spec",
    "get_node_group", "gpu_status", "list_clusters", "list_node_groups", "list_tenants", "load_spec",
    "plan_platform", "remove_tenant", "render", "scale_node_group", "to_platform", "validate_cluster",
    "StepResult", "check_cloud", "install_sim_tools", "load_document", "reporting", "status_columns", "top",
    "top_table", "advise", "advice_text", "add_tenant", "ClusterTarget",
})


def __getattr__(name: str) -> object:
    # Loaded on first use: `gpuctl --help` imports this package and must stay fast (not even typing).
    if name not in _API:
        raise AttributeError(f"module 'gpuctl' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module("gpuctl.api"), name)
