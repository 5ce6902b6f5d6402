"""Issue 4, EKS: `gpuctl cluster create --cloud eks` against moto, with a sim cluster as the data plane.

One EKS cluster for the module, created through the real CLI; the tests look at it the way a user
would (boto3 on moto, kubectl-like reads through the kubeconfig gpuctl wrote) and end by deleting it.
"""

from __future__ import annotations

import json
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_gpuctl
from tests.emulators.eks import ACCESS_KEY_ID, SECRET_ACCESS_KEY, EksEmulator
from tests.emulators.eks.dataplane import SimDataPlane
from tests.emulators.eks.emulator import AMBIENT_AWS

pytestmark = pytest.mark.integration

REGION = ("--cloud", "eks", "--region", "us-east-1")
# The columns every provider fills alike (its bounds and Karpenter half: test_nodegroup_verbs on the sim).
BASIC = ("name", "cluster", "gpu", "nodes", "readyNodes", "gpusPerNode")
# Kubernetes 1.37 (issue 32): the version the sim data plane runs; EKS itself decides which versions it offers
KUBERNETES = "1.37"
CREATE = ("cluster", "create", *REGION, "--name", "eks1", "--gpu", "t4", "--slices", "4", "--karpenter",
          "--charts", "bundled", "--kubernetes-version", KUBERNETES)
NODEPOOL = ("karpenter.sh", "v1", "nodepools", "gpuctl-gpu")
NODECLASS = ("karpenter.k8s.aws", "v1", "ec2nodeclasses", "gpuctl-gpu")


@dataclass
class Eks:
    emulator: EksEmulator
    env: dict[str, str]
    first: dict[str, Any]
    outputs: list[str]  # every stdout and stderr gpuctl printed, checked for secrets at the end

    def gpuctl(self, *args: str, env: dict[str, str] | None = None):
        proc = run_gpuctl(*args, env=env or self.env)
        self.outputs += [proc.stdout, proc.stderr]
        return proc

    @property
    def dataplane(self) -> SimDataPlane:
        """The emulator's data plane: there while the emulator runs."""
        assert self.emulator.dataplane is not None
        return self.emulator.dataplane

    def api(self):
        from kubernetes import config

        return config.new_client_from_config(self.env["KUBECONFIG"])


@pytest.fixture(scope="module")
def eks(sim_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Eks]:
    work = tmp_path_factory.mktemp("eks")
    # The patch outlives the emulator, which deletes its sim clusters from their own state dir.
    with pytest.MonkeyPatch.context() as patch, EksEmulator(work) as emulator:
        patch.setenv("GPUCTL_STATE_DIR", str(work / "state"))  # the data plane's sim clusters, apart
        env = emulator.env(dict(sim_env, KUBECONFIG=str(work / "kube" / "config"), GPUCTL_STATE_DIR=str(work / "state")))
        for key in AMBIENT_AWS:
            patch.delenv(key, raising=False)
        for key, value in env.items():  # this process too runs the kubeconfig's exec plugin
            if key.startswith("AWS_"):
                patch.setenv(key, value)
        proc = run_gpuctl("-o", "json", *CREATE, env=env)
        assert proc.returncode == 0, proc.stderr
        yield Eks(emulator, env, json.loads(proc.stdout), [proc.stdout, proc.stderr])


def test_create_runs_the_whole_flow_and_validates(eks: Eks) -> None:
    steps = {s["step"]: s["outcome"] for s in eks.first["steps"]}
    assert list(steps) == ["ensure-cluster", "ensure-nodegroup/gpu", "write-kubeconfig", "write-gpu-config",
                           "enable-node-repair", "apply-karpenter-nodepool", "configure-nodes/gpu", "install-nfd",
                           "install-gpu-operator",
                           "restart-device-plugin", "wait-capacity/gpu", "validate/gpu"]
    assert steps["ensure-cluster"] == steps["ensure-nodegroup/gpu"] == steps["apply-karpenter-nodepool"] == "created"
    assert steps["enable-node-repair"] == "created"  # the add-on (and the group's repair: moto drops it at create)
    assert steps["validate/gpu"] == "passed"
    checks = {c["check"]: c["ok"] for c in eks.first["checks"]}
    assert checks == {"node-config": True, "capacity": True, "device-plugin": True, "smoke-test": True,
                      "doctor": True}, checks
    # gpuctl does not run Karpenter on EKS: the NodeOverlay it writes is in force only with Karpenter's gate on
    assert "FEATURE_GATES=NodeOverlay=true" in eks.outputs[1]
    assert [{k: g[k] for k in BASIC} for g in eks.first["nodeGroups"]] == [
        {"name": "gpu", "cluster": "eks1", "gpu": "t4", "nodes": 1, "readyNodes": 1, "gpusPerNode": 1}]


def test_the_cluster_runs_the_kubernetes_version_asked_for(eks: Eks) -> None:
    """CreateCluster carries --kubernetes-version (botocore's model checks the request); the data plane answers
    with the same minor."""
    from kubernetes import client as k8s

    assert eks.emulator.client("eks").describe_cluster(name="eks1")["cluster"]["version"] == KUBERNETES
    served = k8s.VersionApi(eks.api()).get_code()
    assert f"{served.major}.{served.minor}" == KUBERNETES, served.git_version


def test_moto_holds_an_nvidia_gpu_node_group_with_the_gpu_taint(eks: Eks) -> None:
    client = eks.emulator.client("eks")
    group = client.describe_nodegroup(clusterName="eks1", nodegroupName="gpu")["nodegroup"]
    assert group["amiType"] == "AL2023_x86_64_NVIDIA"
    assert group["instanceTypes"] == ["g4dn.xlarge"]
    assert group["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert group["scalingConfig"] == {"minSize": 1, "maxSize": 1, "desiredSize": 1}
    assert group["nodeRole"].endswith(":role/gpuctl-eks1-node")
    assert group["tags"] == {"gpuctl.dev/managed-by": "gpuctl"}
    cluster = client.describe_cluster(name="eks1")["cluster"]
    assert cluster["tags"] == {"gpuctl.dev/managed-by": "gpuctl"} and cluster["status"] == "ACTIVE"
    iam = eks.emulator.client("iam")
    policies = iam.list_attached_role_policies(RoleName="gpuctl-eks1-node")["AttachedPolicies"]
    assert sorted(p["PolicyName"] for p in policies) == ["AmazonEC2ContainerRegistryReadOnly", "AmazonEKSWorkerNodePolicy",
                                                         "AmazonEKS_CNI_Policy"]


def test_kubeconfig_holds_no_token_and_authenticates_by_eks_token(eks: Eks, tmp_path: Path) -> None:
    path = Path(eks.env["KUBECONFIG"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    doc = yaml.safe_load(path.read_text())
    assert doc["current-context"] == "gpuctl-eks-eks1"
    user = next(u["user"] for u in doc["users"] if u["name"] == "gpuctl-eks-eks1")
    assert user == {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
                             "args": ["-m", "gpuctl.providers.eks.token", "--cluster", "eks1", "--region", "us-east-1"],
                             "interactiveMode": "Never"}}
    cluster = eks.emulator.client("eks").describe_cluster(name="eks1")["cluster"]
    server = next(c["cluster"] for c in doc["clusters"] if c["name"] == "gpuctl-eks-eks1")
    assert server == {"server": cluster["endpoint"], "certificate-authority-data": cluster["certificateAuthority"]["data"]}
    # The exec plugin's token is accepted for this cluster only: the webhook checks the signed cluster id.
    from kubernetes.client import AuthenticationV1Api, V1SelfSubjectReview

    review = AuthenticationV1Api(eks.api()).create_self_subject_review(V1SelfSubjectReview())
    assert review.status.user_info.username.startswith("arn:aws:")
    assert "system:masters" in review.status.user_info.groups
    import base64

    import requests

    from tests.support.eks import get_token

    ca = tmp_path / "ca.crt"
    ca.write_bytes(base64.b64decode(server["certificate-authority-data"]))
    sts = eks.emulator.client("sts")
    codes = {name: requests.get(f"{server['server']}/api/v1/nodes", verify=str(ca), timeout=30,
                                headers={"Authorization": f"Bearer {get_token(sts, name)}"}).status_code
             for name in ("eks1", "another-cluster")}
    assert codes == {"eks1": 200, "another-cluster": 401}


def test_karpenter_nodepool_and_ec2nodeclass_exist(eks: Eks) -> None:
    from kubernetes.client import CustomObjectsApi

    api = CustomObjectsApi(eks.api())
    pool = api.get_cluster_custom_object(*NODEPOOL)
    spec = pool["spec"]["template"]["spec"]
    requirements = {r["key"]: r["values"] for r in spec["requirements"]}
    assert requirements["karpenter.k8s.aws/instance-gpu-name"] == ["t4"]
    assert requirements["karpenter.k8s.aws/instance-gpu-count"] == ["1"]
    assert requirements["karpenter.sh/capacity-type"] == ["on-demand", "spot"]
    assert spec["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert spec["nodeClassRef"] == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpuctl-gpu"}
    assert pool["spec"]["limits"] == {"nodes": 1, "nvidia.com/gpu": 4}  # 1 node of 1 T4 sliced 4 ways
    overlay = api.get_cluster_custom_object("karpenter.sh", "v1alpha1", "nodeoverlays", "gpuctl-gpu")
    assert overlay["spec"]["capacity"] == {"nvidia.com/gpu": "4"}
    assert pool["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10m",
                                          "budgets": [{"nodes": "10%"}]}  # the real CRD's default
    assert {f["manager"] for f in pool["metadata"]["managedFields"]} == {"gpuctl"}
    node_class = api.get_cluster_custom_object(*NODECLASS)["spec"]
    assert node_class["role"] == "gpuctl-eks1-node"
    assert node_class["amiSelectorTerms"] == [{"alias": "al2023@latest"}]
    assert node_class["subnetSelectorTerms"] == [{"tags": {"karpenter.sh/discovery": "eks1"}}]
    assert node_class["securityGroupSelectorTerms"] == [{"tags": {"karpenter.sh/discovery": "eks1"}}]


def test_status_shows_four_gpus_per_node(eks: Eks) -> None:
    proc = eks.gpuctl("status", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    nodes = json.loads(proc.stdout)["nodes"]
    assert [n["node"] for n in nodes] == ["gpu-0"]
    assert nodes[0]["allocatable"] == {"nvidia.com/gpu": 4}
    assert nodes[0]["taints"] == ["nvidia.com/gpu=true:NoSchedule"]


def test_node_repair_is_on_the_gpu_group_and_the_agent_add_on_is_gpuctls(eks: Eks) -> None:
    """Issue 31: a node whose GPU fails is marked by the agent (AcceleratedHardwareReady=False) and replaced by
    EKS node auto repair. The emulator serves the add-on API moto lacks (tests/emulators/eks/addons.py)."""
    client = eks.emulator.client("eks")
    group = client.describe_nodegroup(clusterName="eks1", nodegroupName="gpu")["nodegroup"]
    assert group["nodeRepairConfig"] == {"enabled": True}
    addon = client.describe_addon(clusterName="eks1", addonName="eks-node-monitoring-agent")["addon"]
    assert addon["tags"] == {"gpuctl.dev/managed-by": "gpuctl"} and addon["status"] == "ACTIVE"
    assert "installing EKS add-on 'eks-node-monitoring-agent'" in eks.outputs[1]


def _plan(eks: Eks, spec: Path, *flags: str) -> dict[str, dict[str, str]]:
    exported = eks.gpuctl(*CREATE, *flags, "--export-spec")
    assert exported.returncode == 0, exported.stderr
    spec.write_text(exported.stdout)
    planned = eks.gpuctl("-o", "json", "plan", "-f", str(spec))
    assert planned.returncode == 0, planned.stderr
    return {s["step"]: s for s in json.loads(planned.stdout)}


def test_plan_names_node_repair_where_it_is_off(eks: Eks, tmp_path: Path) -> None:
    client = eks.emulator.client("eks")
    client.delete_addon(clusterName="eks1", addonName="eks-node-monitoring-agent")
    client.update_nodegroup_config(clusterName="eks1", nodegroupName="gpu", nodeRepairConfig={"enabled": False})
    step = _plan(eks, tmp_path / "spec.yaml")["enable-node-repair"]
    assert (step["action"], step["detail"]) == (
        "created", "install add-on eks-node-monitoring-agent; node auto repair on for gpu")
    assert "enable-node-repair" not in _plan(eks, tmp_path / "off.yaml", "--no-node-repair")
    applied = eks.gpuctl("-o", "json", *CREATE)  # back as gpuctl leaves it, for the tests that follow
    assert applied.returncode == 0, applied.stderr
    assert {s["step"]: s["outcome"] for s in json.loads(applied.stdout)["steps"]}["enable-node-repair"] == "created"
    assert client.describe_nodegroup(clusterName="eks1", nodegroupName="gpu")["nodegroup"]["nodeRepairConfig"] == {
        "enabled": True}


def test_second_run_changes_nothing(eks: Eks) -> None:
    from kubernetes.client import CustomObjectsApi

    api = CustomObjectsApi(eks.api())
    versions = [api.get_cluster_custom_object(*o)["metadata"]["resourceVersion"] for o in (NODEPOOL, NODECLASS)]
    writes = list(eks.dataplane.writes)
    proc = eks.gpuctl("-o", "json", *CREATE)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["changed"] is False
    outcomes = {s["step"]: s["outcome"] for s in result["steps"]}
    assert set(outcomes.values()) == {"no change"}  # no smoke test either on a converged cluster
    assert [c["check"] for c in result["checks"]] == ["capacity"] and result["checks"][0]["ok"]
    assert eks.dataplane.writes == writes  # no EKS write at all
    assert [api.get_cluster_custom_object(*o)["metadata"]["resourceVersion"] for o in (NODEPOOL, NODECLASS)] == versions


def test_nodegroup_add_scale_delete(eks: Eks) -> None:
    from kubernetes.client import CoreV1Api

    v1 = CoreV1Api(eks.api())
    where = (*REGION, "--cluster", "eks1", "--name", "infer")
    added = eks.gpuctl("-o", "json", "nodegroup", "add", *where, "--gpu", "t4", "--gpus-per-node", "4")
    assert added.returncode == 0, added.stderr
    assert [{k: g[k] for k in BASIC} for g in json.loads(added.stdout)] == [
        {"name": "infer", "cluster": "eks1", "gpu": "t4", "nodes": 1, "readyNodes": 1, "gpusPerNode": 4}]
    group = eks.emulator.client("eks").describe_nodegroup(clusterName="eks1", nodegroupName="infer")["nodegroup"]
    assert group["instanceTypes"] == ["g4dn.12xlarge"]
    nodes = v1.list_node(label_selector="eks.amazonaws.com/nodegroup=infer").items
    assert [n.metadata.labels["node.kubernetes.io/instance-type"] for n in nodes] == ["g4dn.12xlarge"]

    gpu_taint = ("--taint", "nvidia.com/gpu=true:NoSchedule")  # a command naming taints names them all
    for taints in ((*gpu_taint, "--taint", "dedicated=infer:NoSchedule"), gpu_taint):
        again = eks.gpuctl("nodegroup", "add", *where, "--gpu", "t4", "--gpus-per-node", "4", *taints)
        assert again.returncode == 0, again.stderr
        group = eks.emulator.client("eks").describe_nodegroup(clusterName="eks1", nodegroupName="infer")["nodegroup"]
        keys = len(taints) // 2
        assert [t["key"] for t in group["taints"]] == ["nvidia.com/gpu", "dedicated"][:keys], group["taints"]
        nodes = v1.list_node(label_selector="eks.amazonaws.com/nodegroup=infer").items
        assert [sorted(t.key for t in n.spec.taints) for n in nodes] == [["dedicated", "nvidia.com/gpu"][2 - keys:]]

    scaled = eks.gpuctl("nodegroup", "scale", *where, "--nodes", "2")
    assert scaled.returncode == 0, scaled.stderr
    assert "node group 'infer': updated" in scaled.stderr
    assert len(v1.list_node(label_selector="eks.amazonaws.com/nodegroup=infer").items) == 2
    listed = eks.gpuctl("-o", "json", "nodegroup", "list", *REGION, "--cluster", "eks1")
    assert [(g["name"], g["nodes"]) for g in json.loads(listed.stdout)] == [("gpu", 1), ("infer", 2)]

    deleted = eks.gpuctl("nodegroup", "delete", *where, "--yes")
    assert deleted.returncode == 0, deleted.stderr
    assert eks.emulator.client("eks").list_nodegroups(clusterName="eks1")["nodegroups"] == ["gpu"]
    assert v1.list_node(label_selector="eks.amazonaws.com/nodegroup=infer").items == []


def test_a_node_group_gpuctl_did_not_create_is_not_deleted(eks: Eks) -> None:
    client = eks.emulator.client("eks")
    role = client.describe_nodegroup(clusterName="eks1", nodegroupName="gpu")["nodegroup"]["nodeRole"]
    client.create_nodegroup(clusterName="eks1", nodegroupName="theirs", nodeRole=role, subnets=["subnet-1"],
                            instanceTypes=["t3.medium"], scalingConfig={"minSize": 0, "maxSize": 1, "desiredSize": 0})
    try:
        proc = eks.gpuctl("nodegroup", "delete", *REGION, "--cluster", "eks1", "--name", "theirs", "--yes")
        assert proc.returncode == 2
        assert "node group 'theirs' was not created by gpuctl" in proc.stderr
        deleting = eks.gpuctl("cluster", "delete", *REGION, "--name", "eks1", "--yes")
        assert deleting.returncode == 2 and "has node groups gpuctl did not create: theirs" in deleting.stderr
        assert client.describe_cluster(name="eks1")["cluster"]["status"] == "ACTIVE"
    finally:
        client.delete_nodegroup(clusterName="eks1", nodegroupName="theirs")
        eks.dataplane.wait_idle()


def test_cluster_list_shows_the_cluster(eks: Eks) -> None:
    proc = eks.gpuctl("-o", "json", "cluster", "list", *REGION)
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(proc.stdout)
    assert (row["name"], row["cloud"], row["status"]) == ("eks1", "eks", "ACTIVE")
    assert row["endpoint"].startswith("https://127.0.0.1:")


def test_bad_inputs_exit_2_without_an_eks_write(eks: Eks) -> None:
    writes = list(eks.dataplane.writes)
    for extra, message in [(("--ami-type", "UBUNTU"), "--ami-type: 'UBUNTU' is not an NVIDIA GPU AMI type"),
                           (("--node-role", "gpu-nodes"), "--node-role: 'gpu-nodes' is not an IAM role ARN"),
                           (("--gpus-per-node", "2"), "--gpus-per-node: no t4 instance type has 2 GPUs"),
                           (("--instance-type", "g5.xlarge"), "--instance-type: g5.xlarge has a10g GPUs, not t4"),
                           (("--instance-type", "g4dn.2xlarge"), "--instance-type: node group 'gpu' runs g4dn.xlarge"),
                           (("--ami-type", "BOTTLEROCKET_x86_64_NVIDIA"), "--ami-type: node group 'gpu' uses "
                                                                           "AL2023_x86_64_NVIDIA")]:
        proc = eks.gpuctl(*CREATE, *extra)
        assert proc.returncode == 2 and message in proc.stderr, (extra, proc.stderr)
    assert eks.dataplane.writes == writes


def test_a_failed_node_group_exits_4_with_the_reason_and_the_cleanup(eks: Eks) -> None:
    eks.dataplane.failures["broken"] = ("AsgInstanceLaunchFailures",
                                                 "Could not launch On-Demand Instances. InsufficientInstanceCapacity")
    where = (*REGION, "--cluster", "eks1", "--name", "broken")
    proc = eks.gpuctl("nodegroup", "add", *where, "--gpu", "t4")
    assert proc.returncode == 4, proc.stderr
    assert "node group 'broken': CREATE_FAILED: AsgInstanceLaunchFailures: Could not launch" in proc.stderr
    assert "clean up with 'gpuctl nodegroup delete --cluster eks1 --name broken --cloud eks --region us-east-1 --yes'" \
        in proc.stderr
    cleanup = eks.gpuctl("nodegroup", "delete", *where, "--yes")
    assert cleanup.returncode == 0, cleanup.stderr
    assert "broken" not in eks.emulator.client("eks").list_nodegroups(clusterName="eks1")["nodegroups"]


def test_bad_credentials_exit_3_without_the_secret(eks: Eks, tmp_path: Path) -> None:
    from moto.core.authorization import enable_iam_authentication

    iam = eks.emulator.client("iam")
    iam.create_user(UserName="someone")
    key = iam.create_access_key(UserName="someone")["AccessKey"]["AccessKeyId"]
    wrong = "wrong-secret-do-not-print-0123456789"
    cases = [({"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": wrong}, "AWS rejected the credentials (SignatureDoesNotMatch)"),
             ({"AWS_ACCESS_KEY_ID": "AKIAUNKNOWNKEY000000", "AWS_SECRET_ACCESS_KEY": wrong},
              "AWS rejected the credentials (InvalidClientTokenId)")]
    with enable_iam_authentication():  # moto checks signatures only when asked
        for creds, message in cases:
            proc = eks.gpuctl(*CREATE, env=dict(eks.env, **creds))
            assert proc.returncode == 3, proc.stderr
            assert message in proc.stderr and "aws configure" in proc.stderr
            assert wrong not in proc.stdout + proc.stderr
        # The cluster exists: its kube-apiserver refuses a token signed with the wrong secret (401).
        proc = eks.gpuctl("status", env=dict(eks.env, **cases[0][0]))
        assert proc.returncode == 3, proc.stderr
        assert "rejected the credentials (HTTP 401)" in proc.stderr and "aws sts get-caller-identity" in proc.stderr
        assert wrong not in proc.stdout + proc.stderr
    missing = {k: v for k, v in eks.env.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    proc = eks.gpuctl(*CREATE, env=missing)
    assert proc.returncode == 3 and "no usable AWS credentials" in proc.stderr, proc.stderr
    proc = eks.gpuctl(*CREATE, "--profile", "nope")
    assert proc.returncode == 3 and "AWS profile 'nope' not found" in proc.stderr, proc.stderr
    no_region = [a for a in CREATE if a not in ("--region", "us-east-1")]
    proc = eks.gpuctl(*no_region)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --region: no AWS region given"), proc.stderr


def test_cluster_delete_removes_what_was_made(eks: Eks) -> None:
    from tests.support.sim import KwokCluster

    proc = eks.gpuctl("cluster", "delete", *REGION, "--name", "eks1", "--yes")
    assert proc.returncode == 0, proc.stderr
    assert "cluster 'eks1' deleted" in proc.stderr
    client = eks.emulator.client("eks")
    assert client.list_clusters()["clusters"] == []
    roles = [r["RoleName"] for r in eks.emulator.client("iam").list_roles()["Roles"]]
    assert not [r for r in roles if r.startswith("gpuctl-")]
    eks.dataplane.wait_idle()
    assert not KwokCluster("eks1").exists
    doc = yaml.safe_load(Path(eks.env["KUBECONFIG"]).read_text())
    assert "gpuctl-eks-eks1" not in [c["name"] for c in doc["contexts"]]
    again = eks.gpuctl("cluster", "delete", *REGION, "--name", "eks1", "--yes")
    assert again.returncode == 2 and "EKS cluster 'eks1' not found" in again.stderr


def test_no_secret_or_token_was_ever_printed(eks: Eks) -> None:
    printed = "\n".join(eks.outputs)
    assert SECRET_ACCESS_KEY not in printed and "k8s-aws-v1." not in printed
    assert ACCESS_KEY_ID not in printed
