"""Tenants in DRA mode: the quota's device keys, the ResourceClaimTemplates, Kueue's DRA flavor, queue and
Configuration (tests/integration/test_tenant_dra.py holds them against the real API server, scheduler and Kueue)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuctl.kube.kube_object import KubeObject
from gpuctl.model.catalog import MIG_PROFILES
from gpuctl.model.dra import (
    DEVICES_QUOTA,
    GPU_CLASS,
    device_class_mappings,
    mig_class,
    mig_device_class,
    requested_only,
    unmapped_profiles,
)
from gpuctl.model.mig import resource_name
from gpuctl.model.tenant import make_tenant
from gpuctl.ops.tenancy.queues import DRA_FLAVOR, dra_flavor, flavor_manifest, queue_manifests
from gpuctl.ops.tenancy.tenant_claims import claim_templates, models_of
from gpuctl.ops.tenancy.tenants import tenant_manifests
from gpuctl.stack.kueue import manager_config

GPU_DEVICES = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"
MIG_DEVICES = "mig.nvidia.com.deviceclass.resource.k8s.io/devices"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
# k8s.io/apimachinery validation: IsDNS1123Subdomain (object names), IsQualifiedName (Kueue's IsLabelKey)
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
QUALIFIED_NAME = re.compile(rf"({DNS_SUBDOMAIN.pattern}/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def node(name: str, labels: dict[str, str], taints: list[dict[str, str]] | None = None, gpus: int = 0) -> KubeObject:
    """A Node as the API server sends it (JSON). DRA mode: no device plugin, so no nvidia.com/gpu allocatable."""
    allocatable = {"cpu": "8", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return KubeObject({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                       "spec": {"taints": taints} if taints else {}, "status": {"allocatable": allocatable}})


NODES = [
    node("a100-0", {"gpuctl.dev/gpu": "a100-40gb"}, [GPU_TAINT]),
    node("a100-1", {"gpuctl.dev/gpu": "a100-40gb", "nvidia.com/mig.config": "custom-3g.20gb-2x2g.10gb"},
         [GPU_TAINT, {"key": "only", "value": "a100-1", "effect": "NoSchedule"}]),
    node("h100-0", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}, [GPU_TAINT]),  # GFD's label only
    node("t4-0", {"gpuctl.dev/gpu": "t4"}, [GPU_TAINT]),
    node("odd-0", {"nvidia.com/gpu.product": "NVIDIA-Unknown"}),  # no catalog model: no template
]


def selector(template: dict) -> str:
    [request] = template["spec"]["spec"]["devices"]["requests"]
    [sel] = request["exactly"]["selectors"]
    return str(sel["cel"]["expression"])


def test_quota_counts_claimed_devices_per_class_beside_the_device_plugin_keys() -> None:
    team = make_tenant("team-a", 4, {"3g.20gb": 2, "1g.5gb+me": 3}, None, False, "tenant", borrow=1)
    refused = {f"requests.{resource_name(p)}": "0" for p in MIG_PROFILES}  # every profile it is not given
    assert team.hard() == {**refused, "requests.nvidia.com/gpu": "5", "requests.nvidia.com/mig-1g.5gb.me": "4",
                           "requests.nvidia.com/mig-3g.20gb": "3"}  # outside DRA mode: as before
    # MIG per profile, by gpuctl's class of the profile (what the templates and an unmodified pod both claim
    # from, so one key caps both ways); the driver's mig.nvidia.com at 0, else a claim of the team's own on it
    # would be a second MIG quota beside the profiles'
    assert team.hard(dra=True) == {**team.hard(), GPU_DEVICES: "5", MIG_DEVICES: "0",
                                   "mig-3g.20gb.gpuctl.dev.deviceclass.resource.k8s.io/devices": "3",
                                   "mig-1g.5gb.me.gpuctl.dev.deviceclass.resource.k8s.io/devices": "4"}
    [quota] = [body for kind, body in tenant_manifests(team, dra=True) if kind == "quota"]
    assert quota["spec"]["hard"] == team.hard(dra=True)
    no_mig = make_tenant("team-b", 2, {}, None, False, "tenant")
    assert no_mig.hard(dra=True)[MIG_DEVICES] == "0"  # MIG claims refused, not unlimited
    assert not [k for k in no_mig.hard(dra=True) if k.endswith(".gpuctl.dev.deviceclass.resource.k8s.io/devices")]
    assert no_mig.hard(dra=True)["requests.nvidia.com/mig-3g.20gb"] == "0"  # caps claims of the class too



def test_a_table_shows_what_pods_request_each_claimed_devices_key_holding_its_resources_figure() -> None:
    # requested_only drops the devices' keys from a table: each must have the figure of the extended resource its
    # class names (the chart's gpu.nvidia.com names nvidia.com/gpu; gpuctl's classes, mig_device_class)
    team = make_tenant("team-a", 4, {"3g.20gb": 2, "1g.5gb+me": 3}, None, False, "tenant", borrow=1)
    hard = {k.removeprefix("requests."): int(v) for k, v in team.hard(dra=True).items()}
    named = {GPU_CLASS: "nvidia.com/gpu"} | {mig_class(p): mig_device_class(p)["spec"]["extendedResourceName"]
                                             for p in team.mig}
    twins = {k: named[k.removesuffix(DEVICES_QUOTA)] for k in hard if k.endswith(DEVICES_QUOTA) and k != MIG_DEVICES}
    assert len(twins) == 3
    assert {k: hard[k] for k in twins} == {k: hard[resource] for k, resource in twins.items()}
    shown = requested_only(hard)
    assert set(shown) == set(hard) - set(twins) - {MIG_DEVICES} and shown["nvidia.com/gpu"] == 5


def test_a_template_per_gpu_model_and_per_mig_profile_with_guessable_names() -> None:
    team = make_tenant("team-a", 4, {"3g.20gb": 1, "1g.10gb": 2, "1g.10gb+me": 1, "7g.180gb": 1}, None, False, "t")
    templates = {t["metadata"]["name"]: t for t in claim_templates(team, models_of(NODES))}
    # 7g.180gb is a B200 profile: no GPU here offers it
    assert list(templates) == ["gpu-a100-40gb", "gpu-h100-80gb", "gpu-t4", "mig-1g.10gb", "mig-1g.10gb.me",
                               "mig-3g.20gb"]
    for name, t in templates.items():
        assert DNS_SUBDOMAIN.fullmatch(name) and len(name) <= 253
        assert (t["apiVersion"], t["kind"]) == ("resource.k8s.io/v1", "ResourceClaimTemplate")
        assert t["metadata"]["namespace"] == "team-a"
        assert t["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuctl", "gpuctl.dev/tenant": "team-a"}
        [request] = t["spec"]["spec"]["devices"]["requests"]
        assert request["exactly"]["allocationMode"] == "ExactCount" and request["exactly"]["count"] == 1
        # MIG: gpuctl's class of the profile (model/dra.py mig_class), the one an unmodified pod's
        # nvidia.com/mig-<profile> is served by; the class selects the profile on any model (1g.10gb: the
        # A100-40GB's and the H100's), so the template has no selector of its own
        assert request["exactly"]["deviceClassName"] == ("gpu.nvidia.com" if name.startswith("gpu-") else
                                                         f"{name}.gpuctl.dev")
        assert ("selectors" in request["exactly"]) == name.startswith("gpu-")
    assert selector(templates["gpu-t4"]) == "device.attributes['gpu.nvidia.com'].productName == 'Tesla T4'"
    assert templates["mig-1g.10gb.me"]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] \
        == mig_device_class("1g.10gb+me")["metadata"]["name"]  # the class gpuctl makes: `+me` spelled `.me`
    assert claim_templates(team, []) == []  # no GPU node yet: nothing to claim


def test_dra_queue_covers_the_mapped_resources_on_one_flavor_without_node_labels() -> None:
    team = make_tenant("team-a", 4, {"3g.20gb": 2, "2g.10gb": 1}, None, False, "tenant", borrow=2, lend=3,
                       cohort="pool")
    flavor, queue, local, default = queue_manifests(team, NODES, dra=True)
    assert flavor == {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                      "metadata": {"name": DRA_FLAVOR, "labels": {"app.kubernetes.io/managed-by": "gpuctl"}},
                      # the taint every GPU node carries; odd-0 carries none, so none is common to all
                      "spec": {}}
    assert flavor_manifest(dra_flavor(NODES[:4]))["spec"] == {
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]}
    [group] = queue["spec"]["resourceGroups"]
    # GPUs stay nvidia.com/gpu: Kueue's name for gpu.nvidia.com's devices, however a job asks for them; a MIG
    # profile's extended resource, served by gpuctl's class of the profile, is its own name, as without DRA
    assert group == {"coveredResources": [MIG_DEVICES, "nvidia.com/gpu", "nvidia.com/mig-2g.10gb",
                                          "nvidia.com/mig-3g.20gb"], "flavors": [{"name": DRA_FLAVOR, "resources": [
        # the driver's mig.nvidia.com: none, as in the ResourceQuota (MIG is claimed by profile)
        {"name": MIG_DEVICES, "nominalQuota": "0", "borrowingLimit": "2", "lendingLimit": "0"},
        {"name": "nvidia.com/gpu", "nominalQuota": "4", "borrowingLimit": "2", "lendingLimit": "3"},
        {"name": "nvidia.com/mig-2g.10gb", "nominalQuota": "1", "borrowingLimit": "2", "lendingLimit": "1"},
        {"name": "nvidia.com/mig-3g.20gb", "nominalQuota": "2", "borrowingLimit": "2", "lendingLimit": "2"}]}]}
    assert (queue["metadata"]["name"], queue["spec"]["cohortName"], local["spec"]["clusterQueue"],
            default["spec"]["clusterQueue"]) == ("team-a", "pool", "team-a", "team-a")
    # outside DRA mode nothing changes: the device plugin's resources, a flavor per model
    plugin = [node("a100-dp", {"gpuctl.dev/gpu": "a100-40gb"}, [GPU_TAINT], gpus=4)]
    flavor, queue, _, _ = queue_manifests(team, plugin)
    assert flavor["metadata"]["name"] == "gpuctl-a100-40gb"
    assert flavor["spec"]["nodeLabels"] == {"gpuctl.dev/gpu": "a100-40gb"}
    assert [g["coveredResources"] for g in queue["spec"]["resourceGroups"]] == [["nvidia.com/gpu"]]


def test_kueue_maps_each_device_class_to_the_resource_the_queues_cover() -> None:
    resources = manager_config()["resources"]
    assert resources["quotaCheckStrategy"] == "IgnoreUndeclared"
    assert resources["deviceClassMappings"] == device_class_mappings() == [
        {"name": "nvidia.com/gpu", "deviceClassNames": ["gpu.nvidia.com"]},
        {"name": MIG_DEVICES, "deviceClassNames": ["mig.nvidia.com"]}]
    # gpuctl's class of each of the cluster's MIG profiles, to the profile's resource: the one name Kueue
    # charges a template's claim of it and a Job's nvidia.com/mig-<profile>
    mapped = manager_config(["3g.20gb", "1g.5gb+me"])["resources"]["deviceClassMappings"]
    assert mapped[2:] == [{"name": "nvidia.com/mig-1g.5gb.me", "deviceClassNames": ["mig-1g.5gb.me.gpuctl.dev"]},
                          {"name": "nvidia.com/mig-3g.20gb", "deviceClassNames": ["mig-3g.20gb.gpuctl.dev"]}]
    for mapping in mapped:  # kueue v0.19.2 pkg/config/validation.go: IsLabelKey
        assert QUALIFIED_NAME.fullmatch(mapping["name"]) and len(mapping["name"]) <= 253
        assert all(QUALIFIED_NAME.fullmatch(n) and len(n.split("/")[-1]) <= 63 for n in mapping["deviceClassNames"])
    # Kueue takes at most 16 mappings: the catalog's 32 profiles leave 18 out, said by unmapped_profiles
    every = device_class_mappings(MIG_PROFILES)
    assert len(every) == 16 and len(unmapped_profiles(MIG_PROFILES)) == len(MIG_PROFILES) - 14
    assert not unmapped_profiles(["3g.20gb", "1g.5gb+me"])


def test_the_sim_restarts_a_kueue_manager_whose_config_is_not_what_gpuctl_renders_now(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kueue reads deviceClassMappings only at start: a manager started by an older gpuctl must not be kept."""
    import yaml

    from gpuctl.simulator import kueue

    monkeypatch.setenv("GPUCTL_STATE_DIR", str(tmp_path))
    profiles = ["3g.20gb"]
    monkeypatch.setattr(kueue, "class_profiles", lambda cluster: profiles)  # gpuctl's classes on the cluster
    path = kueue._config_path("c")
    path.parent.mkdir(parents=True)
    assert not kueue._config_is_current("c")  # none yet
    path.write_text(kueue.render_kueue_config(tmp_path / "certs", 40001, 40002, profiles))
    assert kueue._config_is_current("c")
    config = yaml.safe_load(path.read_text())
    assert config["resources"]["deviceClassMappings"] == device_class_mappings(profiles)
    profiles.append("2g.10gb")  # a class made since the manager started: not mapped by it
    assert not kueue._config_is_current("c")
    profiles.pop()
    del config["resources"]["deviceClassMappings"]  # as gpuctl wrote it before DRA
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    assert not kueue._config_is_current("c")


def test_a_tenant_made_before_converges_to_the_per_profile_classes() -> None:
    """A tenant gpuctl made with the MIG keys and templates of mig.nvidia.com: its quota is applied again (the
    old key at 0, the profile's key added: tenants.holds compares `hard` exactly) and its MIG template, whose
    spec is immutable, is deleted and made again (tenant_claims.ensure_claim_templates: spec not contained)."""
    from gpuctl.kube.objects import contains
    from gpuctl.ops.tenancy.tenants import holds

    team = make_tenant("team-a", 1, {"3g.20gb": 2}, None, False, "tenant")
    [quota] = [body for kind, body in tenant_manifests(team, dra=True) if kind == "quota"]
    before = {**team.hard(), GPU_DEVICES: "1", MIG_DEVICES: "2"}  # as gpuctl wrote it before
    assert not holds({**quota, "spec": {"hard": before}}, quota)
    assert holds(quota, quota)
    [template] = [t for t in claim_templates(team, models_of(NODES)) if t["metadata"]["name"] == "mig-3g.20gb"]
    old_spec = {"spec": {"devices": {"requests": [{"name": "mig", "exactly": {
        "deviceClassName": "mig.nvidia.com", "allocationMode": "ExactCount", "count": 1, "selectors": [{"cel": {
            "expression": "device.attributes['gpu.nvidia.com'].profile == '3g.20gb'"}}]}}]}}}
    assert not contains(old_spec, template["spec"])
