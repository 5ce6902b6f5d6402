"""gpuctl's DeviceClass per MIG profile in DRA mode (model/dra.py mig_device_class, stack/dra_classes.py): names
the API server accepts, the extended resource names the device plugin's mixed strategy gives, and a converge
that writes only a difference and never touches a class gpuctl did not make."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpuctl.model.catalog import GPUS, MIG_PROFILES
from gpuctl.model.change import Change
from gpuctl.model.dra import device_class_mappings, mig_class, mig_device_class, mig_profiles_of
from gpuctl.model.mig import resource_name
from gpuctl.stack.dra_classes import SELECTOR, ensure_mig_classes, observe_mig_classes

# k8s.io/apimachinery pkg/util/validation: IsDNS1123Subdomain, and IsQualifiedName's name part (what
# IsExtendedResourceName checks of `requests.<name>`, k8s.io/kubernetes v1.37.2 pkg/apis/core/v1/helper).
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


@pytest.mark.parametrize("profile", MIG_PROFILES)
def test_every_catalog_profile_gets_a_valid_class(profile: str) -> None:
    cls = mig_device_class(profile)
    name = cls["metadata"]["name"]
    assert DNS_SUBDOMAIN.fullmatch(name) and len(name) <= 253
    extended = cls["spec"]["extendedResourceName"]
    assert extended == resource_name(profile)  # as the device plugin advertises it
    prefix, _, rest = f"requests.{extended}".partition("/")
    assert DNS_SUBDOMAIN.fullmatch(prefix) and QUALIFIED_NAME.fullmatch(rest) and len(rest) <= 63
    assert f"profile == '{profile}'" in cls["spec"]["selectors"][0]["cel"]["expression"]


def test_names_do_not_collide_and_me_is_spelled_as_the_device_plugin_does() -> None:
    assert len({mig_class(p) for p in MIG_PROFILES}) == len(MIG_PROFILES)
    assert mig_class("1g.10gb+me") == "mig-1g.10gb.me.gpuctl.dev"
    assert mig_class("3g.20gb") == "mig-3g.20gb.gpuctl.dev"
    assert mig_profiles_of([GPUS["a30"], GPUS["t4"]]) == ["1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"]


def test_kueue_charges_an_extended_mig_resource_as_its_own_name() -> None:
    """Without gpuctl's classes mapped (none made; past Kueue's 16), the Job's resource name is the quota key;
    mapped, the logical name is that same name (model/dra.py device_class_mappings). A DRA-mode ClusterQueue
    covers it with the team's quota of the profile."""
    from gpuctl.model.tenant import make_tenant
    from gpuctl.ops.tenancy.queues import quota_of

    driver_only = device_class_mappings()
    assert 0 < len(driver_only) <= 16
    assert all(not n.endswith(".gpuctl.dev") for m in driver_only for n in m["deviceClassNames"])
    team = make_tenant("team-a", 4, {"3g.20gb": 2}, None, False, "tenant")
    assert quota_of(team, dra=True)["nvidia.com/mig-3g.20gb"] == 2


class FakeKube:
    """DeviceClasses by name; records writes."""

    def __init__(self, classes: list[dict[str, Any]]) -> None:
        from gpuctl.kube.kube_object import KubeObject

        self.classes = {c["metadata"]["name"]: KubeObject(c) for c in classes}
        self.writes: list[tuple[str, str]] = []

    def list(self, api_version: str, kind: str, namespace: str | None = None, *, labels: str = "",
             what: str | None = None) -> list[Any]:
        assert labels == SELECTOR
        wanted = dict(kv.split("=") for kv in labels.split(","))
        return [c for c in self.classes.values()
                if all((c["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())]

    def get_or_none(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Any:
        return self.classes.get(name)

    def apply(self, obj: dict[str, Any], strict: bool = False) -> Any:
        from gpuctl.kube.kube_object import KubeObject

        self.writes.append(("apply", obj["metadata"]["name"]))
        self.classes[obj["metadata"]["name"]] = KubeObject(obj)
        return self.classes[obj["metadata"]["name"]]

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        self.writes.append(("delete", name))
        return self.classes.pop(name, None) is not None


def test_converge_creates_then_changes_nothing_then_follows_the_models() -> None:
    foreign = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
               "metadata": {"name": "mig-3g.20gb.gpuctl.dev"}, "spec": {}}
    kube: Any = FakeKube([foreign])
    a100 = [GPUS["a100-40gb"]]
    assert observe_mig_classes(kube, a100).action == Change.CREATED
    assert ensure_mig_classes(kube, a100) == Change.CREATED
    assert ("apply", "mig-3g.20gb.gpuctl.dev") not in kube.writes  # not gpuctl's: left as it is
    assert kube.classes["mig-3g.20gb.gpuctl.dev"]["spec"] == {}
    assert len(kube.writes) == len(mig_profiles_of(a100)) - 1
    kube.writes.clear()
    assert observe_mig_classes(kube, a100).action == Change.NO_CHANGE
    assert ensure_mig_classes(kube, a100) == Change.NO_CHANGE and kube.writes == []
    observed = observe_mig_classes(kube, [GPUS["t4"]])  # no MIG model left: gpuctl's classes go
    assert observed.action == Change.UPDATED and "delete mig-1g.10gb.gpuctl.dev" in observed.detail
    assert ensure_mig_classes(kube, [GPUS["t4"]]) == Change.UPDATED
    assert set(kube.classes) == {"mig-3g.20gb.gpuctl.dev"}


def test_a_class_the_api_server_does_not_serve_after_apply_fails_the_step() -> None:
    from gpuctl.util.errors import ClusterError

    class Lost(FakeKube):
        def apply(self, obj: dict[str, Any], strict: bool = False) -> Any:
            self.writes.append(("apply", obj["metadata"]["name"]))
            return obj

    lost: Any = Lost([])
    with pytest.raises(ClusterError, match="does not serve DeviceClass"):
        ensure_mig_classes(lost, [GPUS["a100-40gb"]])


def test_render_writes_the_classes_apply_makes(tmp_path: Any) -> None:
    import yaml

    from gpuctl.api import load_spec, to_platform
    from gpuctl.ops.render import manifests

    doc: dict[str, Any] = {"apiVersion": "gpuctl.dev/v1alpha1", "kind": "GpuCluster", "metadata": {"name": "c"},
                           "spec": {"provider": {"cloud": "sim"}, "dra": {"enabled": True},
                                    "nodeGroups": [{"name": "g", "gpu": "a100-40gb", "nodes": 1},
                                                   {"name": "t", "gpu": "t4", "nodes": 1}]}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc))
    classes = {b["metadata"]["name"]: b for b in manifests(to_platform(*load_spec(path))).values()
               if b["kind"] == "DeviceClass"}
    assert sorted(classes) == sorted(mig_class(p) for p in mig_profiles_of([GPUS["a100-40gb"]]))
    assert classes["mig-3g.20gb.gpuctl.dev"] == mig_device_class("3g.20gb")
    path.write_text(yaml.safe_dump({**doc, "spec": {**doc["spec"], "dra": {"enabled": False}}}))
    assert not [b for b in manifests(to_platform(*load_spec(path))).values() if b["kind"] == "DeviceClass"]
