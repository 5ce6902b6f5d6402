"""Cloud repair on EKS: the node monitoring agent add-on and managed node groups' node auto repair.

The agent (add-on `eks-node-monitoring-agent`, a DaemonSet; github.com/aws/eks-node-monitoring-agent) reads each
node's logs and sets NodeConditions, among them `AcceleratedHardwareReady=False` on NVIDIA XID errors and failed
DCGM diagnostics. Node auto repair (`nodeRepairConfig.enabled` on CreateNodegroup / UpdateNodegroupConfig) then
reboots or replaces a managed node group's node once a condition has held for its delay (10 min for
AcceleratedHardwareReady, EKS user guide "node-repair"). Its ServiceAccount carries no IAM role: the add-on needs
none (its ClusterRole patches nodes/status).

Adopted, not owned: an add-on already installed is left as it is (whoever installed it keeps it); the one gpuctl
creates carries gpuctl's tag, and only that one is deleted, with the last of gpuctl's node groups of a cluster
gpuctl did not create. Karpenter's node repair is its own controller's (alpha gate NodeRepair), which gpuctl does
not run on EKS: docs/clouds.md says how to turn it on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuctl.model.change import Change, Observed
from gpuctl.providers.eks.aws import MANAGED_TAGS, get_or_none, translated
from gpuctl.util.output import info

if TYPE_CHECKING:
    from botocore.client import BaseClient

ADDON = "eks-node-monitoring-agent"
REPAIR_ON = {"enabled": True}


def models_repair(eks: BaseClient) -> bool:
    """Whether this botocore's EKS model has node auto repair (botocore 1.36.6 and later)."""
    return "nodeRepairConfig" in eks.meta.service_model.operation_model("CreateNodegroup").input_shape.members


def describe_addon(eks: BaseClient, cluster: str) -> dict[str, Any] | None:
    found = get_or_none(f"describing add-on {ADDON!r} of EKS cluster {cluster!r}", eks.describe_addon,
                        clusterName=cluster, addonName=ADDON)
    return found["addon"] if found else None


def repair_on(group: dict[str, Any]) -> bool:
    return (group.get("nodeRepairConfig") or {}).get("enabled") is True


def observe_repair(eks: BaseClient, cluster: str, groups: list[dict[str, Any]]) -> Observed:
    """What enable-node-repair would do: install the agent add-on, turn node auto repair on for `groups` (the
    managed node groups of this run, as described)."""
    todo = [] if describe_addon(eks, cluster) else [f"install add-on {ADDON}"]
    if models_repair(eks):
        todo += [f"node auto repair on for {g['nodegroupName']}" for g in groups if not repair_on(g)]
    if not todo:
        return Observed(Change.NO_CHANGE)
    return Observed(Change.CREATED if todo[0].startswith("install") else Change.UPDATED, "; ".join(todo))


def ensure_repair(eks: BaseClient, cluster: str, groups: list[dict[str, Any]],
                  update_group: Callable[[str, dict[str, Any]], None]) -> Change:
    """Install the agent add-on where the cluster has none, and turn node auto repair on where it is off
    (`update_group(name, update)`: UpdateNodegroupConfig, awaited)."""
    change = Change.NO_CHANGE
    if describe_addon(eks, cluster) is None:
        info(f"installing EKS add-on {ADDON!r}: it marks a node with a failing GPU AcceleratedHardwareReady=False")
        with translated(f"installing add-on {ADDON!r} on EKS cluster {cluster!r}"):
            eks.create_addon(clusterName=cluster, addonName=ADDON, tags=MANAGED_TAGS)
        change = Change.CREATED
    if models_repair(eks):
        for group in groups:
            if not repair_on(group):
                update_group(group["nodegroupName"], {"nodeRepairConfig": REPAIR_ON})
                change = Change.UPDATED if change is Change.NO_CHANGE else change
    return change


def delete_own_addon(eks: BaseClient, cluster: str) -> bool:
    """Delete the agent add-on if gpuctl installed it (its tag); True if it did."""
    addon = describe_addon(eks, cluster)
    if addon is None or any((addon.get("tags") or {}).get(k) != v for k, v in MANAGED_TAGS.items()):
        return False
    with translated(f"deleting add-on {ADDON!r} of EKS cluster {cluster!r}"):
        eks.delete_addon(clusterName=cluster, addonName=ADDON)
    return True
