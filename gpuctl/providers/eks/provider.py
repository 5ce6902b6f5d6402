"""EksProvider: EKS clusters and managed GPU node groups through boto3, Karpenter GPU NodePools.

Everything gpuctl creates in AWS (cluster, node groups, IAM roles) carries gpuctl's tag, and
deletion removes only what bears it. Each ensure_* describes first and writes only a difference.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuctl.kube.kube import Kube
from gpuctl.model import labels as L
from gpuctl.model.change import Change, Step
from gpuctl.model.cloud_options import CloudOptions
from gpuctl.model.spec import NodeGroupSpec, PlatformSpec
from gpuctl.providers.base import ClusterInfo, NodeGroupInfo, scaled_bounds
from gpuctl.providers.eks import CAPABILITIES
from gpuctl.providers.eks import nodegroups as ng
from gpuctl.providers.eks.aws import GONE, MANAGED_TAGS, AwsSession, bx, error_code, get_or_none, translated, wait_for
from gpuctl.providers.eks.karpenter import karpenter_objects
from gpuctl.providers.eks.repair import REPAIR_ON, delete_own_addon, ensure_repair, models_repair, observe_repair
from gpuctl.providers.eks.roles import (
    CLUSTER_POLICIES,
    NODE_POLICIES,
    cluster_role_name,
    delete_role,
    ensure_role,
    node_role_name,
)
from gpuctl.providers.eks.token import EXEC_API_VERSION
from gpuctl.stack import karpenter as stack_karpenter
from gpuctl.util.errors import CloudError, GpuctlError, NotFound, UsageError
from gpuctl.util.output import info
from gpuctl.util.words import plural

if TYPE_CHECKING:
    from botocore.client import BaseClient

CLUSTER_TIMEOUT_S = 25 * 60.0  # EKS control planes take 10-15 minutes
NODEGROUP_TIMEOUT_S = 20 * 60.0
KARPENTER_DRAIN_TIMEOUT_S = 10 * 60.0  # Karpenter terminates an instance (drain, then EC2) in a minute or two
ROLE_PROPAGATION_S = 60.0  # a new IAM role can be refused by EKS for a few seconds after creation
CLUSTER_FAILED = frozenset({"FAILED", GONE})
NODEGROUP_FAILED = frozenset({"CREATE_FAILED", "DELETE_FAILED", "DEGRADED", GONE})
DELETE_FIX = "retry the delete, or delete it in the AWS console"


def _managed(item: dict[str, Any]) -> bool:
    tags = item.get("tags") or {}
    return all(tags.get(k) == v for k, v in MANAGED_TAGS.items())


NODEGROUP_LABEL = ng.NODEGROUP_LABEL


class EksProvider:
    cloud = "eks"
    capabilities = CAPABILITIES

    def __init__(self, options: CloudOptions) -> None:
        self.options = options
        # Inputs are checked before anything is touched.
        self.ami_type = ng.check_ami_type(options.ami_type or ng.DEFAULT_AMI_TYPE)
        if options.node_role and not (options.node_role.startswith("arn:") and ":role/" in options.node_role):
            raise UsageError("--node-role", f"{options.node_role!r} is not an IAM role ARN",
                             "pass arn:aws:iam::<account>:role/<name>")
        self._session: AwsSession | None = None

    # -- AWS plumbing ---------------------------------------------------------------------

    @property
    def aws(self) -> AwsSession:
        if self._session is None:
            self._session = AwsSession(self.options.profile, self.options.region)
        return self._session

    def _eks(self) -> BaseClient:
        return self.aws.client("eks")

    def check_node_group(self, spec: NodeGroupSpec) -> None:
        ng.choose_instance_type(spec)  # an instance type for these GPUs, before anything is touched

    def check_credentials(self) -> None:
        with translated("checking AWS credentials"):
            self.aws.client("sts").get_caller_identity()

    def _fix(self, command: str) -> str:
        region = f" --region {self.aws.region}"
        profile = f" --profile {self.options.profile}" if self.options.profile else ""
        return f"clean up with 'gpuctl {command} --cloud eks{region}{profile} --yes'"

    # -- clusters -------------------------------------------------------------------------

    def _describe_cluster(self, name: str) -> dict[str, Any] | None:
        found = get_or_none(f"describing EKS cluster {name!r}", self._eks().describe_cluster, name=name)
        return found["cluster"] if found else None

    def _existing_cluster(self, name: str) -> dict[str, Any]:
        cluster = self._describe_cluster(name)
        if cluster is None:
            raise NotFound(f"EKS cluster {name!r} not found in {self.aws.region}",
                           "see 'gpuctl cluster list --cloud eks' (and check --region)")
        return cluster

    def ensure_cluster(self, name: str) -> Change:
        change = Change.NO_CHANGE
        current = self._describe_cluster(name)
        if current is None:
            self._create_cluster(name)
            change = Change.CREATED
        elif current["status"] == "ACTIVE":
            return change
        elif current["status"] == "DELETING":
            raise CloudError(f"EKS cluster {name!r} is being deleted", "wait until it is gone, then rerun")
        wait_for(f"EKS cluster {name!r}", lambda: self._describe_cluster(name), "ACTIVE", CLUSTER_FAILED,
                 self._fix(f"cluster delete --name {name}"), CLUSTER_TIMEOUT_S)
        return change

    def _create_cluster(self, name: str) -> None:
        subnets = list(self.options.subnets) or self._default_subnets()
        role, fresh = ensure_role(self.aws.client("iam"), cluster_role_name(name), "eks.amazonaws.com",
                                  CLUSTER_POLICIES, self.aws.partition)
        params: dict[str, Any] = {"name": name, "roleArn": role, "resourcesVpcConfig": {"subnetIds": subnets},
                                  "tags": MANAGED_TAGS}
        if self.options.kubernetes_version:
            params["version"] = self.options.kubernetes_version
        info(f"creating EKS cluster {name!r} in {self.aws.region} (EKS takes 10-15 minutes)")
        self._create(f"creating EKS cluster {name!r}", lambda: self._eks().create_cluster(**params), fresh)

    def _create(self, doing: str, create: Callable[[], object], fresh_role: bool) -> None:
        """`create()`, retried while EKS cannot assume an IAM role created moments ago."""
        deadline = time.monotonic() + (ROLE_PROPAGATION_S if fresh_role else 0)
        with translated(doing):
            while True:
                try:
                    create()
                    return
                except bx.ClientError as exc:
                    propagating = error_code(exc) == "InvalidParameterException" and "role" in str(exc).lower()
                    if not propagating or time.monotonic() > deadline:
                        raise
                time.sleep(5)

    def _default_subnets(self) -> list[str]:
        ec2 = self.aws.client("ec2")
        hint = "pass --subnet SUBNET_ID, at least two, in different availability zones"
        with translated("looking up the default VPC"):
            vpcs = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]
            if not vpcs:
                raise UsageError("--subnet", f"none given and {self.aws.region} has no default VPC", hint)
            subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpcs[0]["VpcId"]]}])["Subnets"]
        if not subnets:
            raise UsageError("--subnet", f"none given and the default VPC {vpcs[0]['VpcId']} has no subnets", hint)
        return sorted(s["SubnetId"] for s in subnets)

    def get_cluster(self, name: str) -> ClusterInfo | None:
        cluster = self._describe_cluster(name)
        if cluster is None:
            return None
        return ClusterInfo(name, self.cloud, cluster["status"], cluster.get("endpoint"), cluster.get("version", ""))

    def list_clusters(self) -> list[ClusterInfo]:
        with translated("listing EKS clusters"):
            names = [n for page in self._eks().get_paginator("list_clusters").paginate() for n in page["clusters"]]
        return [info_ for n in sorted(names) if (info_ := self.get_cluster(n)) is not None]

    def delete_cluster(self, name: str) -> Change:
        """Delete gpuctl's node groups, then the cluster and its IAM roles if gpuctl made them."""
        cluster = self._existing_cluster(name)
        groups = [g for n in self._nodegroup_names(name) if (g := self._describe_nodegroup(name, n))]
        ours = [g for g in groups if _managed(g)]
        foreign = [g for g in groups if not _managed(g)]
        if _managed(cluster) and foreign:
            raise UsageError("--name", f"EKS cluster {name!r} has node groups gpuctl did not create: "
                             f"{', '.join(g['nodegroupName'] for g in foreign)}",
                             "delete them with the tool that made them, then rerun")
        self._remove_karpenter_capacity(name, cluster)
        for group in ours:
            with translated(f"deleting node group {group['nodegroupName']!r}"):
                self._eks().delete_nodegroup(clusterName=name, nodegroupName=group["nodegroupName"])
        for group in ours:
            self._wait_nodegroup(name, group["nodegroupName"], deleting=True)
        if not _managed(cluster):
            if not foreign and delete_own_addon(self._eks(), name):
                info(f"  deleted the add-on gpuctl installed on EKS cluster {name!r} (eks-node-monitoring-agent)")
            info(f"EKS cluster {name!r} was not created by gpuctl: kept; "
                 f"deleted {plural(len(ours), 'gpuctl node group')}")
            self._delete_node_role(name, remaining=foreign)
            return Change.UPDATED if ours else Change.NO_CHANGE
        with translated(f"deleting EKS cluster {name!r}"):
            self._eks().delete_cluster(name=name)
        wait_for(f"EKS cluster {name!r} deletion", lambda: self._describe_cluster(name), GONE,
                 frozenset({"FAILED"}), DELETE_FIX, CLUSTER_TIMEOUT_S)
        delete_role(self.aws.client("iam"), cluster_role_name(name))
        self._delete_node_role(name, remaining=[])
        return Change.DELETED

    def _remove_karpenter_capacity(self, name: str, cluster: dict[str, Any]) -> None:
        """gpuctl's NodePools and NodeOverlays go first, and Karpenter terminates the instances they launched, while
        it still runs (it may run on the node groups deleted next): instances would outlive the cluster. A cluster
        that cannot be reached is said and left to the rest of the delete."""
        if cluster["status"] != "ACTIVE":
            return
        try:
            claims = stack_karpenter.remove_capacity(Kube.connect(config_dict=self.kubeconfig(name)),
                                                     KARPENTER_DRAIN_TIMEOUT_S)
        except GpuctlError as exc:
            info(f"  could not remove gpuctl's Karpenter NodePools of EKS cluster {name!r} first: {exc.message}; "
                 "instances Karpenter launched may outlive the cluster: check EC2 for karpenter.sh/nodepool tags")
            return
        if claims:
            info(f"  Karpenter terminated {plural(claims, 'NodeClaim')} of EKS cluster {name!r}")

    def _delete_node_role(self, cluster: str, remaining: list[dict[str, Any]]) -> None:
        """Delete the node role gpuctl made, unless a node group that stays still uses it."""
        role = node_role_name(cluster)
        if not any(g.get("nodeRole", "").endswith(f":role/{role}") for g in remaining):
            delete_role(self.aws.client("iam"), role)

    def context_name(self, cluster: str) -> str:
        return f"gpuctl-eks-{cluster}"

    def node_selector(self, nodegroup: str) -> str:
        return f"{NODEGROUP_LABEL}={nodegroup}"

    def kubeconfig(self, cluster: str) -> dict[str, Any]:
        """Server and CA from EKS; the user is an exec plugin, so the file holds no token and stays
        the same from run to run (a token expires within 15 minutes)."""
        found = self._existing_cluster(cluster)
        if found["status"] != "ACTIVE":
            raise CloudError(f"EKS cluster {cluster!r} is {found['status']}, not ACTIVE",
                             f"rerun 'gpuctl cluster create --cloud eks --name {cluster}' to wait for it")
        name = self.context_name(cluster)
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": {
                "server": found["endpoint"], "certificate-authority-data": found["certificateAuthority"]["data"]}}],
            "users": [{"name": name, "user": {"exec": self._exec_plugin(cluster)}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name,
        }

    def _exec_plugin(self, cluster: str) -> dict[str, Any]:
        """gpuctl's own token command (no aws CLI needed), or with --exec-auth `aws eks get-token`."""
        profile = ["--profile", self.options.profile] if self.options.profile else []
        if self.options.exec_auth:
            command = "aws"
            args = ["eks", "get-token", "--cluster-name", cluster, "--region", self.aws.region, "--output", "json"]
        else:
            command = sys.executable
            args = ["-m", "gpuctl.providers.eks.token", "--cluster", cluster, "--region", self.aws.region]
        return {"apiVersion": EXEC_API_VERSION, "command": command, "args": args + profile,
                "interactiveMode": "Never"}

    def cluster_steps(self, spec: PlatformSpec, client: Kube) -> list[Step]:
        """enable-node-repair (unless --no-node-repair): the node monitoring agent add-on, node auto repair on the
        managed node groups of this run. With --karpenter: a GPU NodePool (and NodeOverlay where the group shares
        its GPUs) per node group of this run, and their EC2NodeClass. gpuctl does not run Karpenter on EKS: a
        NodeOverlay is in force only where its NodeOverlay feature gate is on (alpha, off by default), which the
        step says; so is Karpenter's node repair (gate NodeRepair), which docs/clouds.md says how to turn on."""
        steps = [] if self.options.no_node_repair else [self._repair_step(spec)]
        if self.options.karpenter:
            steps.append(stack_karpenter.nodepool_step(client, lambda: karpenter_objects(spec, self.options),
                                                       note=stack_karpenter.OVERLAY_GATE_NOTE))
        return steps

    def _repair_step(self, spec: PlatformSpec) -> Step:
        names = [g.spec.name for g in spec.groups if g.spec.nodes > 0]  # (nodes 0: no managed node group)

        def groups() -> list[dict[str, Any]]:
            return [g for n in names if (g := self._describe_nodegroup(spec.name, n)) is not None]

        def update(name: str, change: dict[str, Any]) -> None:
            self._update_nodegroup(spec.name, name, change)

        return Step("enable-node-repair", lambda: observe_repair(self._eks(), spec.name, groups()),
                    lambda: ensure_repair(self._eks(), spec.name, groups(), update))

    # -- node groups ----------------------------------------------------------------------

    def _describe_nodegroup(self, cluster: str, name: str) -> dict[str, Any] | None:
        found = get_or_none(f"describing node group {name!r} of EKS cluster {cluster!r}",
                            self._eks().describe_nodegroup, clusterName=cluster, nodegroupName=name)
        return found["nodegroup"] if found else None

    def _existing_nodegroup(self, cluster: str, name: str) -> dict[str, Any]:
        group = self._describe_nodegroup(cluster, name)
        if group is None:
            raise NotFound(f"node group {name!r} not found in EKS cluster {cluster!r}",
                           f"see 'gpuctl nodegroup list --cloud eks --cluster {cluster}'")
        return group

    def _nodegroup_names(self, cluster: str) -> list[str]:
        self._existing_cluster(cluster)
        with translated(f"listing node groups of EKS cluster {cluster!r}"):
            pages = self._eks().get_paginator("list_nodegroups").paginate(clusterName=cluster)
            return sorted(n for page in pages for n in page["nodegroups"])

    def _wait_nodegroup(self, cluster: str, name: str, deleting: bool = False) -> None:
        def describe() -> dict[str, Any] | None:
            return self._describe_nodegroup(cluster, name)

        if deleting:
            wait_for(f"node group {name!r} deletion", describe, GONE, frozenset({"DELETE_FAILED"}), DELETE_FIX,
                     NODEGROUP_TIMEOUT_S)
        else:
            wait_for(f"node group {name!r}", describe, "ACTIVE", NODEGROUP_FAILED,
                     self._fix(f"nodegroup delete --cluster {cluster} --name {name}"), NODEGROUP_TIMEOUT_S)

    def ensure_node_group(self, cluster: str, spec: NodeGroupSpec) -> Change:
        instance_type = ng.choose_instance_type(spec)
        scaling = ng.scaling_config(spec)
        current = self._describe_nodegroup(cluster, spec.name)
        if current is None:
            self._create_nodegroup(cluster, spec, instance_type, scaling)
            self._wait_nodegroup(cluster, spec.name)
            return Change.CREATED
        if current["status"] == "DELETING":
            raise CloudError(f"node group {spec.name!r} is being deleted", "wait until it is gone, then rerun")
        if current["status"] != "ACTIVE":  # wait out CREATING/UPDATING; a failed state raises with AWS's reason
            self._wait_nodegroup(cluster, spec.name)
            current = self._existing_nodegroup(cluster, spec.name)
        self._check_compatible(spec, current, instance_type)
        update: dict[str, Any] = {}
        if current.get("scalingConfig") != scaling:
            update["scalingConfig"] = scaling
        labels = {k: v for k, v in spec.registration_labels().items() if (current.get("labels") or {}).get(k) != v}
        if labels:
            update["labels"] = {"addOrUpdateLabels": labels}
        wanted, have = list(map(ng.eks_taint, spec.taints)), current.get("taints") or []
        named = {(w["key"], w["effect"]) for w in wanted}  # Kubernetes tells taints apart by key and effect
        taints = {"addOrUpdateTaints": [t for t in wanted if t not in have],
                  "removeTaints": [t for t in have if (t["key"], t["effect"]) not in named]}  # no longer named
        if taints := {k: v for k, v in taints.items() if v}:
            update["taints"] = taints
        if not update:
            return Change.NO_CHANGE
        self._update_nodegroup(cluster, spec.name, update)
        return Change.UPDATED

    def _check_compatible(self, spec: NodeGroupSpec, current: dict[str, Any], instance_type: str) -> None:
        """What EKS cannot change in place. Without an explicit flag, any type with the same GPUs will do."""
        have = (current.get("instanceTypes") or ["?"])[0]
        known = ng.catalog_instance(have)
        same_gpus = known is not None and known[0] == spec.gpu and known[1].gpus == spec.gpus_per_node
        if have != instance_type and (spec.instance_type or not same_gpus):
            raise UsageError("--instance-type", f"node group {spec.name!r} runs {have}, not {instance_type}",
                             "an instance type cannot change: add a node group with another name")
        if self.options.ami_type and current.get("amiType") != self.ami_type:
            raise UsageError("--ami-type", f"node group {spec.name!r} uses {current.get('amiType')}, not "
                             f"{self.ami_type}", "an AMI type cannot change: add a node group with another name")

    def _create_nodegroup(self, cluster: str, spec: NodeGroupSpec, instance_type: str,
                          scaling: dict[str, int]) -> None:
        found = self._existing_cluster(cluster)
        subnets = list(self.options.subnets) or found["resourcesVpcConfig"]["subnetIds"]
        fresh = False
        role = self.options.node_role
        if role is None:
            role, fresh = ensure_role(self.aws.client("iam"), node_role_name(cluster), "ec2.amazonaws.com",
                                      NODE_POLICIES, self.aws.partition)
        params = {"clusterName": cluster, "nodegroupName": spec.name, "scalingConfig": scaling,
                  "instanceTypes": [instance_type], "amiType": self.ami_type, "subnets": subnets, "nodeRole": role,
                  "labels": spec.registration_labels(), "taints": [ng.eks_taint(t) for t in spec.taints],
                  "tags": MANAGED_TAGS}
        if not self.options.no_node_repair and models_repair(self._eks()):
            params["nodeRepairConfig"] = REPAIR_ON  # a node whose GPU fails is rebooted or replaced
        info(f"creating node group {spec.name!r}: {spec.nodes} x {instance_type} ({self.ami_type})")
        self._create(f"creating node group {spec.name!r}", lambda: self._eks().create_nodegroup(**params), fresh)

    def _update_nodegroup(self, cluster: str, name: str, update: dict[str, Any]) -> None:
        info(f"updating node group {name!r}: {', '.join(sorted(update))}")
        with translated(f"updating node group {name!r}"):
            self._eks().update_nodegroup_config(clusterName=cluster, nodegroupName=name, **update)
        self._wait_nodegroup(cluster, name)

    def scale_node_group(self, cluster: str, name: str, nodes: int, min_nodes: int | None = None,
                         max_nodes: int | None = None) -> Change:
        """desiredSize `nodes`, 0 included (EKS takes minSize 0 and desiredSize 0; maxSize stays at least 1)."""
        current = self._existing_nodegroup(cluster, name)["scalingConfig"]
        low, high = scaled_bounds((current["minSize"], current["maxSize"]), nodes, min_nodes, max_nodes)
        scaling = {"minSize": low, "maxSize": high, "desiredSize": nodes}
        if scaling == current:
            return Change.NO_CHANGE
        if (scaling["minSize"], scaling["maxSize"]) != (current["minSize"], current["maxSize"]):
            info(f"setting the autoscaler bounds of {name!r} to {scaling['minSize']}..{scaling['maxSize']}")
        self._update_nodegroup(cluster, name, {"scalingConfig": scaling})
        return Change.UPDATED

    def _info(self, cluster: str, group: dict[str, Any]) -> NodeGroupInfo:
        instance_type = (group.get("instanceTypes") or ["?"])[0]
        known = ng.catalog_instance(instance_type)
        labels = group.get("labels") or {}
        scaling = group.get("scalingConfig", {})
        desired = scaling.get("desiredSize", 0)
        return NodeGroupInfo(
            name=group["nodegroupName"], cluster=cluster,
            gpu=known[0].name if known else labels.get(L.GPU_MODEL, "-"),
            nodes=desired,
            ready_nodes=desired if group["status"] == "ACTIVE" else 0,  # EKS keeps ACTIVE groups at desiredSize
            gpus_per_node=known[1].gpus if known else int(labels.get(L.GPUS_PER_NODE, 0)),
            min_nodes=scaling.get("minSize"),
            max_nodes=scaling.get("maxSize"),
        )

    def get_node_group(self, cluster: str, name: str) -> NodeGroupInfo | None:
        group = self._describe_nodegroup(cluster, name)
        return self._info(cluster, group) if group else None

    def list_node_groups(self, cluster: str) -> list[NodeGroupInfo]:
        return [self._info(cluster, self._existing_nodegroup(cluster, n)) for n in self._nodegroup_names(cluster)]

    def delete_node_group(self, cluster: str, name: str) -> Change:
        group = self._existing_nodegroup(cluster, name)
        if not _managed(group):
            raise UsageError("--name", f"node group {name!r} was not created by gpuctl",
                             "delete it with the tool that made it (eksctl, the AWS console)")
        with translated(f"deleting node group {name!r}"):
            self._eks().delete_nodegroup(clusterName=cluster, nodegroupName=name)
        self._wait_nodegroup(cluster, name, deleting=True)
        return Change.DELETED
