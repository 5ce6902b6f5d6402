"""gpuctl: turn a cloud account into a working, shared GPU platform on Kubernetes.

The Python API the CLI is built on:

    import gpuctl
    spec = gpuctl.to_platform(*gpuctl.load_spec(Path("gpu-platform.yaml")))
    target = gpuctl.ClusterTarget(kubeconfig=None, context=None)  # kubectl's --kubeconfig and --context
    print([p.as_dict() for p in gpuctl.plan_platform(spec, target)])
    result = gpuctl.apply_platform(spec, target, report=print)
"""

from __future__ import annotations

import importlib
import os

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """gpuctl.api's public names (its __all__, the one list of them), loaded on first use: `gpuctl --help`
    imports this package and must stay fast (not even typing). A submodule's name is left to the import
    system, so that `from gpuctl import model` imports gpuctl.model, never the API."""
    here = os.path.dirname(__file__)
    if not name.startswith("_") and not os.path.exists(os.path.join(here, name)) \
            and not os.path.exists(os.path.join(here, f"{name}.py")):
        api = importlib.import_module("gpuctl.api")
        if name in api.__all__:
            return getattr(api, name)
    raise AttributeError(f"module 'gpuctl' has no attribute {name!r}")
