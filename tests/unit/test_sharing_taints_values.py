import json
from dataclasses import replace

import pytest
import yaml

from gpuctl.api import load_document
from gpuctl.cli.documents import cluster_document
from gpuctl.kube.nodes import node_patch
from gpuctl.model import labels as L
from gpuctl.model.catalog import get_gpu
from gpuctl.model.charts import chart_ref
from gpuctl.model.sharing import (
    NO_SHARING,
    Sharing,
    check_sharing_fits,
    max_replicas,
    parse_plugin_config,
    plugin_configs,
    render_plugin_config,
)
from gpuctl.model.stack_spec import GroupSharing, StackSpec, choose_mig_strategy
from gpuctl.model.taints import DEFAULT_GPU_TAINTS, Taint, parse_taint
from gpuctl.stack.values import operator_values, stack_from_record, stack_record
from gpuctl.util.errors import UsageError


def test_slices_mean_time_slicing_with_a_slice_n_key() -> None:
    sharing = Sharing("time-slicing", 4)
    assert sharing == Sharing("time-slicing", 4) and sharing.config_key == "slice-4"
    doc = yaml.safe_load(render_plugin_config(sharing))
    assert doc == {"version": "v1",  # no flags: under the operator MIG_STRATEGY overrides them
                   "sharing": {"timeSlicing": {"renameByDefault": False, "failRequestsGreaterThanOne": False,
                                               "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
    assert parse_plugin_config(render_plugin_config(sharing)) == sharing


def test_plugin_configs_have_a_default_and_are_empty_without_sharing() -> None:
    assert plugin_configs([NO_SHARING, NO_SHARING]) == {}  # never an operator pointed at a ConfigMap with no keys
    configs = plugin_configs([NO_SHARING, Sharing("time-slicing", 4), Sharing("mps", 2)])
    assert sorted(configs) == ["default", "mps-2", "slice-4"]
    assert yaml.safe_load(configs["default"]) == {"version": "v1"}


@pytest.mark.parametrize("gpu,limit", [("t4", 48), ("a100-40gb", 48)])
def test_mps_replicas_are_bounded_like_the_mps_daemon(gpu: str, limit: int) -> None:
    model = get_gpu(gpu)
    check_sharing_fits(Sharing("mps", limit), model, "--slices")
    check_sharing_fits(Sharing("time-slicing", limit + 1), model, "--slices")  # the bound is MPS's
    with pytest.raises(UsageError, match=f"--slices: mps on {gpu} takes at most {limit} replicas"):
        check_sharing_fits(Sharing("mps", limit + 1), model, "--slices")
    older = replace(model, compute_capability=(7, 0))
    assert max_replicas("mps", older) == 16


def test_mig_strategy_follows_the_node_groups() -> None:
    mixed_layout = ("3g.20gb", "2g.10gb", "2g.10gb")
    assert choose_mig_strategy(None, [GroupSharing("a", "time-slicing")], "--mig-strategy") == "mixed"
    assert choose_mig_strategy(None, [GroupSharing("a", "mps")], "--mig-strategy") == "single"
    assert choose_mig_strategy(None, [GroupSharing("a", "mps"), GroupSharing("m", "none", ("1g.5gb",) * 7)],
                               "f") == "single"
    with pytest.raises(UsageError, match="--mig-strategy: node group 'a' uses MPS"):
        choose_mig_strategy("mixed", [GroupSharing("a", "mps")], "--mig-strategy")
    with pytest.raises(UsageError, match="node group 'a' uses MPS.*node group 'm'"):
        choose_mig_strategy(None, [GroupSharing("a", "mps"), GroupSharing("m", "none", mixed_layout)], "f")
    with pytest.raises(UsageError, match="node group 'm' has several MIG profiles"):
        choose_mig_strategy("single", [GroupSharing("m", "none", mixed_layout)], "f")
    with pytest.raises(UsageError, match="unknown strategy"):
        choose_mig_strategy("none", [], "f")


def test_mps_config_round_trips() -> None:
    mps = Sharing("mps", 3)
    assert mps.config_key == "mps-3"
    assert "mps" in yaml.safe_load(render_plugin_config(mps))["sharing"]
    assert parse_plugin_config(render_plugin_config(mps)) == mps
    assert NO_SHARING.config_key is None


def test_taints_parse_like_kubectl() -> None:
    assert parse_taint("nvidia.com/gpu=true:NoSchedule") == DEFAULT_GPU_TAINTS[0]
    assert parse_taint("node-role.kubernetes.io/gpu=true:NoSchedule").key == "node-role.kubernetes.io/gpu"
    assert parse_taint("dedicated:NoExecute") == Taint("dedicated", "", "NoExecute")
    assert Taint("dedicated", "", "NoExecute").toleration() == {"key": "dedicated", "operator": "Exists",
                                                                 "effect": "NoExecute"}
    for bad in ("nvidia.com/gpu=true", "nvidia.com/gpu=true:Sometimes", "bad key=x:NoSchedule", "k=v v:NoSchedule"):
        with pytest.raises(UsageError):
            parse_taint(bad)


def node(labels: dict, taints: list[Taint]) -> dict:
    return {"metadata": {"name": "n", "labels": labels}, "spec": {"taints": [t.as_dict() for t in taints]}}


def test_node_patch_writes_only_differences_and_keeps_other_taints() -> None:
    other = Taint("example.com/maintenance", "yes", "NoExecute")
    current = node({"a": "1"}, [other])
    patch = node_patch(current, {"a": "1", "b": "2", "c": None}, DEFAULT_GPU_TAINTS)
    assert patch == {"metadata": {"labels": {"b": "2"}},
                     "spec": {"taints": [{"key": "example.com/maintenance", "value": "yes", "effect": "NoExecute"},
                                         {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]}}
    converged = node({"a": "1", "b": "2"}, [other, DEFAULT_GPU_TAINTS[0]])
    assert node_patch(converged, {"a": "1", "b": "2", "c": None}, DEFAULT_GPU_TAINTS) is None
    # Same key and effect, another value: replaced, not duplicated.
    stale = node({}, [Taint("nvidia.com/gpu", "false", "NoSchedule")])
    patch = node_patch(stale, {}, DEFAULT_GPU_TAINTS)
    assert patch is not None
    assert patch["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]


def test_a_groups_node_loses_what_the_group_no_longer_sets_and_keeps_the_rest() -> None:
    """configure-nodes records what it set (L.APPLIED); a later set without a label or taint takes it off, as
    kubectl apply does with its last-applied configuration; another's taint or label stays."""
    other = Taint("example.com/maintenance", "yes", "NoExecute")
    dedicated = Taint("dedicated", "train", "NoSchedule")
    first = node({"owner": "them"}, [other])
    patch = node_patch(first, {"workload": "train"}, (*DEFAULT_GPU_TAINTS, dedicated), record=True)
    assert patch is not None
    applied = patch["metadata"]["annotations"][L.APPLIED]
    assert json.loads(applied) == {"labels": ["workload"], "taints": ["dedicated:NoSchedule", "nvidia.com/gpu:NoSchedule"]}
    now = node({"owner": "them", "workload": "train"}, [other, *DEFAULT_GPU_TAINTS, dedicated])
    now["metadata"]["annotations"] = {L.APPLIED: applied}
    assert node_patch(now, {"workload": "train"}, (*DEFAULT_GPU_TAINTS, dedicated), record=True) is None
    patch = node_patch(now, {}, DEFAULT_GPU_TAINTS, record=True)
    assert patch is not None
    assert patch["metadata"]["labels"] == {"workload": None}  # "owner" was never gpuctl's
    assert patch["spec"]["taints"] == [{"key": "example.com/maintenance", "value": "yes", "effect": "NoExecute"},
                                       {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    # without the record (another caller's labels, or a node gpuctl never configured) nothing else is taken off
    assert node_patch(now, {}, DEFAULT_GPU_TAINTS) is None
    now["metadata"]["annotations"] = {L.APPLIED: "not json"}
    assert "spec" not in (node_patch(now, {}, DEFAULT_GPU_TAINTS, record=True) or {})


def test_operator_values_carry_sharing_mig_and_tolerations() -> None:
    spec = StackSpec(charts="bundled", nfd="standalone", driver=False, toolkit=False, mig_strategy="mixed",
                     taints=DEFAULT_GPU_TAINTS, shares_gpus=True)
    values = operator_values(spec)
    assert values["nfd"] == {"enabled": False}  # one owner: the standalone release
    assert values["driver"] == {"enabled": False} and values["toolkit"]["enabled"] is False
    assert values["devicePlugin"]["config"] == {"name": "gpuctl-device-plugin-config", "default": "default"}
    # NVIDIA's hardening against GPUs reached without a request (gpu-facts.md "Tenant isolation")
    assert {e["name"]: e["value"] for e in values["toolkit"]["env"]} == {
        "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED": "false",
        "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS": "true"}
    assert values["devicePlugin"]["env"] == [{"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"}]
    assert values["mig"] == {"strategy": "mixed"}
    assert values["migManager"]["config"] == {"name": "gpuctl-mig-parted-config", "default": "all-disabled"}
    assert values["dcgmExporter"] == {"enabled": True}
    assert values["daemonsets"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true",
                                                    "effect": "NoSchedule"}]
    assert "node-feature-discovery" not in values
    assert stack_from_record(stack_record(spec)) == spec
    # the one NFD-owner rule (specfile.validate), reached from the flag: the error names --nfd
    raw, flags = cluster_document("demo", "sim", {"name": "gpu", "gpu": "t4", "nodes": 1}, {}, {"nfd": "both"}, False)
    with pytest.raises(UsageError, match="--nfd"):
        load_document(raw, flags)


def test_operator_values_without_sharing_name_no_plugin_config() -> None:
    spec = StackSpec(charts="bundled", taints=DEFAULT_GPU_TAINTS)
    assert "config" not in operator_values(spec)["devicePlugin"]  # config-manager exits on a ConfigMap with no keys


def test_operator_nfd_worker_tolerates_the_gpu_taints() -> None:
    taints = (*DEFAULT_GPU_TAINTS, Taint("dedicated", "gpu", "NoSchedule"))
    values = operator_values(StackSpec(charts="bundled", nfd="operator", taints=taints))
    assert values["nfd"] == {"enabled": True}
    assert values["node-feature-discovery"]["worker"]["tolerations"] == [t.toleration() for t in taints]


def test_stack_records_of_older_releases_still_read() -> None:
    old = '{"charts": "bundled", "driver": false, "mig_strategy": "mixed", "nfd": "standalone", "taints": [], ' \
          '"toolkit": false}'
    assert stack_from_record(old).shares_gpus is False


def test_chart_sources() -> None:
    upstream = chart_ref("gpu-operator", "upstream")
    assert (upstream.ref, upstream.repo, upstream.version) == ("gpu-operator", "https://helm.ngc.nvidia.com/nvidia",
                                                               "v26.7.0")
    assert chart_ref("node-feature-discovery", "oci://mirror.example/charts/").ref == \
        "oci://mirror.example/charts/node-feature-discovery"
    assert chart_ref("gpu-operator", "bundled").ref.endswith("templates/charts/gpu-operator")
    with pytest.raises(UsageError, match="--charts"):
        chart_ref("gpu-operator", "/nonexistent")
