"""Install Karpenter's own v1 CRDs, so NodePools are real API objects in a sim cluster.

The CRDs are karpenter-provider-aws v1.14.1's (pkg/apis/crds), read unmodified from
../shared/upstream: the API server validates a NodePool or EC2NodeClass exactly as on EKS.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

UPSTREAM = Path(__file__).resolve().parents[3].parent / "shared" / "upstream" / "karpenter-provider-aws-v1.14.1"
CRDS = (UPSTREAM / "karpenter.sh_nodepools.yaml", UPSTREAM / "karpenter.sh_nodeoverlays.yaml",
        UPSTREAM / "karpenter.k8s.aws_ec2nodeclasses.yaml")


def install_karpenter_crds(client: ApiClient, timeout: float = 60.0) -> None:
    """Create the CRDs and wait until the API server serves them (Established)."""
    from kubernetes.client import ApiextensionsV1Api

    api = ApiextensionsV1Api(client)
    names = []
    for path in CRDS:
        crd = yaml.safe_load(path.read_text())
        api.create_custom_resource_definition(crd)
        names.append(crd["metadata"]["name"])
    deadline = time.monotonic() + timeout
    while names:
        conditions = api.read_custom_resource_definition(names[0]).status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            names.pop(0)
        elif time.monotonic() > deadline:
            raise TimeoutError(f"CRD {names[0]} not established after {timeout:.0f}s")
        else:
            time.sleep(0.2)
