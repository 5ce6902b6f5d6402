"""Site configuration: what differs between one OpenStack (or AWS) site and another.

Read from $GPUCTL_SITE_CONFIG or ~/.config/gpuctl/site.yaml, e.g.

    openstack:
      flavors: {t4: g2.5xlarge, a100-40gb: g4.a100.8xlarge}
      labels: {nvidia_gpu_enabled: "true"}   # Magnum labels of new GPU clusters and node groups
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from gpuctl.model.catalog import GPUS, GpuModel
from gpuctl.util.errors import UsageError

_KNOWN = {"openstack": {"flavors", "labels"}}
# CERN's convention: images of clusters with this label carry the NVIDIA driver and toolkit.
DEFAULT_OPENSTACK_LABELS = {"nvidia_gpu_enabled": "true"}


def site_config_path() -> Path:
    if custom := os.environ.get("GPUCTL_SITE_CONFIG"):
        return Path(custom)
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "gpuctl" / "site.yaml"


@lru_cache(maxsize=1)
def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    # lazy seam: strict_yaml's loader subclasses PyYAML's, and `gpus` reads no site.yaml unless there is one
    from gpuctl.model.strict_yaml import read_yaml

    doc = read_yaml(path, str(path)) or {}
    if not isinstance(doc, dict):
        raise UsageError(str(path), "must be a mapping", "see the example in gpuctl/model/site.py")
    for section, value in doc.items():
        if section not in _KNOWN:
            raise UsageError(f"{path}: {section}", "unknown key", f"use one of: {', '.join(_KNOWN)}")
        if value is not None and not isinstance(value, dict):
            raise UsageError(f"{path}: {section}", "must be a mapping", "see the example in gpuctl/model/site.py")
        for key in value or {}:
            if key not in _KNOWN[section]:
                raise UsageError(f"{path}: {section}.{key}", "unknown key",
                                 f"use one of: {', '.join(sorted(_KNOWN[section]))}")
    for gpu, flavor in ((doc.get("openstack") or {}).get("flavors") or {}).items():
        if gpu not in GPUS:
            raise UsageError(f"{path}: openstack.flavors.{gpu}", "unknown GPU", f"use one of: {', '.join(GPUS)}")
        if not isinstance(flavor, str) or not flavor:
            raise UsageError(f"{path}: openstack.flavors.{gpu}", "must be a flavor name", "e.g. g2.5xlarge")
    labels = (doc.get("openstack") or {}).get("labels")
    if labels is not None and (not isinstance(labels, dict)
                               or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())):
        raise UsageError(f"{path}: openstack.labels", "must map label names to strings",
                         'quote values: {nvidia_gpu_enabled: "true"}')
    return doc


def openstack_flavor(model: GpuModel) -> str:
    """The site's flavor for `model`, else the catalog default."""
    flavors = (_load(site_config_path()).get("openstack") or {}).get("flavors") or {}
    return flavors.get(model.name, model.openstack_flavor)


def openstack_labels() -> dict[str, str]:
    """Magnum labels for GPU clusters and node groups: the site's, else nvidia_gpu_enabled=true."""
    labels = (_load(site_config_path()).get("openstack") or {}).get("labels")
    return dict(DEFAULT_OPENSTACK_LABELS if labels is None else labels)
