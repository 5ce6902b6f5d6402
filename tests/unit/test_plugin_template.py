"""gpuctl.stack.plugin_template: whether the device-plugin DaemonSet carries its ClusterPolicy yet, read from
the pod template as NVIDIA/gpu-operator v26.7.0 writes it (assets/state-device-plugin/0500_daemonset.yaml
transformed by controllers/object_controls.go TransformDevicePlugin), and as the sim's operator does."""

from __future__ import annotations

import copy
from typing import Any

from gpuctl.simulator.operands import OPERANDS, Policy, render_daemon_set
from gpuctl.stack.plugin_template import image_path, policy_not_carried

HARDENING = [{"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"}]
SHARED: dict[str, Any] = {"mig": {"strategy": "mixed"},
          "devicePlugin": {"repository": "nvcr.io/nvidia", "image": "k8s-device-plugin", "version": "v0.20.0",
                           "env": HARDENING, "config": {"name": "gpuctl-device-plugin-config", "default": "none"}}}
PLUGIN = next(o for o in OPERANDS if o.name == "nvidia-device-plugin-daemonset")


def upstream_daemon_set(spec: dict[str, Any]) -> dict[str, Any]:
    """The device-plugin DaemonSet the real operator makes of `spec`: the asset's main container
    nvidia-device-plugin with the image, env and MIG_STRATEGY, the config-manager init and sidecar
    containers with DEFAULT_CONFIG (removed without a config)."""
    plugin = spec["devicePlugin"]
    env = [{"name": "PASS_DEVICE_SPECS", "value": "true"}, {"name": "DEVICE_LIST_STRATEGY", "value": "envvar"},
           {"name": "MIG_STRATEGY", "value": spec["mig"]["strategy"]}]
    containers: list[dict[str, Any]] = [{"name": "nvidia-device-plugin", "image": image_path(plugin), "env": env}]
    init: list[dict[str, Any]] = [{"name": "toolkit-validation", "image": "validator"}]
    if (plugin.get("config") or {}).get("name"):
        env.append({"name": "CONFIG_FILE", "value": "/config/config.yaml"})
        manager = [{"name": "ONESHOT", "value": "false"}, {"name": "DEFAULT_CONFIG",
                                                           "value": plugin["config"]["default"]}]
        containers.append({"name": "config-manager", "image": image_path(plugin), "env": manager})
        init.append({"name": "config-manager-init", "image": image_path(plugin), "env": copy.deepcopy(manager)})
    for entry in plugin.get("env") or []:  # setContainerEnv: replaces a value the asset has
        env[:] = [e for e in env if e["name"] != entry["name"]] + [entry]
    # applyCommonDaemonsetConfig: daemonsets.tolerations, where given, replace the asset's
    tolerations = (spec.get("daemonsets") or {}).get("tolerations") or [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return {"metadata": {"name": "nvidia-device-plugin-daemonset"},
            "spec": {"template": {"spec": {"initContainers": init, "containers": containers,
                                           "tolerations": copy.deepcopy(tolerations)}}}}


def changed(spec: dict[str, Any], **sections: Any) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    for key, value in sections.items():
        out[key] = value
    return out


def test_a_daemon_set_rendered_from_the_cluster_policy_carries_it() -> None:
    assert policy_not_carried(SHARED, upstream_daemon_set(SHARED)) == []
    unshared = changed(SHARED, devicePlugin={k: v for k, v in SHARED["devicePlugin"].items() if k != "config"})
    assert policy_not_carried(unshared, upstream_daemon_set(unshared)) == []


def test_the_sims_operator_renders_what_the_check_reads() -> None:
    for spec in (SHARED, changed(SHARED, mig={"strategy": "single"}), {"devicePlugin": {"env": HARDENING}}):
        assert policy_not_carried(spec, render_daemon_set(PLUGIN, Policy("cluster-policy", "uid", spec))) == [], spec


def test_the_daemon_set_before_the_operator_rewrote_it_is_named_for_what_it_lacks() -> None:
    before = upstream_daemon_set(SHARED)
    assert policy_not_carried(changed(SHARED, mig={"strategy": "single"}), before) == \
        ["MIG_STRATEGY=single, not mixed"]
    other_default = changed(SHARED, devicePlugin={**SHARED["devicePlugin"],
                                                  "config": {"name": "gpuctl-device-plugin-config", "default": "x"}})
    assert policy_not_carried(other_default, before) == ["DEFAULT_CONFIG=x, not none"]
    upgraded = changed(SHARED, devicePlugin={**SHARED["devicePlugin"], "version": "v0.21.0"})
    assert policy_not_carried(upgraded, before) == \
        ["image nvcr.io/nvidia/k8s-device-plugin:v0.21.0, not nvcr.io/nvidia/k8s-device-plugin:v0.20.0"]
    env = [*HARDENING, {"name": "PASS_DEVICE_SPECS", "value": "false"}]  # a value the asset has, changed
    assert policy_not_carried(changed(SHARED, devicePlugin={**SHARED["devicePlugin"], "env": env}), before) == \
        ["PASS_DEVICE_SPECS=false, not true"]


def test_a_toleration_the_cluster_policy_adds_is_awaited_in_the_template() -> None:
    """A node group's new taint reaches the ClusterPolicy's daemonsets.tolerations; until the operator rewrote the
    DaemonSet its template lacks it (the sim's template also tolerates its startup taint: containment)."""
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    old = {"key": "dedicated", "operator": "Equal", "value": "old", "effect": "NoSchedule"}
    tainted = changed(SHARED, daemonsets={"tolerations": [gpu, old]})
    assert policy_not_carried(tainted, upstream_daemon_set(SHARED)) == ["toleration dedicated=old:NoSchedule, not there"]
    assert policy_not_carried(tainted, upstream_daemon_set(tainted)) == []
    assert policy_not_carried(tainted, render_daemon_set(PLUGIN, Policy("cluster-policy", "uid", tainted))) == []


def test_a_toleration_the_run_dropped_is_awaited_out_of_the_template() -> None:
    """A taint no group has any more leaves the ClusterPolicy's list; the operator then replaces the template's list,
    so the old DaemonSet, which still tolerates it, is not the new one, whatever else the sim's template tolerates."""
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    old = {"key": "dedicated", "operator": "Equal", "value": "old", "effect": "NoSchedule"}
    tainted, untainted = (changed(SHARED, daemonsets={"tolerations": t}) for t in ([gpu, old], [gpu]))
    assert policy_not_carried(untainted, upstream_daemon_set(tainted)) == []  # what nothing said was dropped
    assert policy_not_carried(untainted, upstream_daemon_set(tainted), [old]) == \
        ["no toleration dedicated=old:NoSchedule, still there"]
    assert policy_not_carried(untainted, upstream_daemon_set(untainted), [old]) == []
    assert policy_not_carried(untainted, render_daemon_set(PLUGIN, Policy("cluster-policy", "uid", untainted)),
                              [old]) == []
    assert policy_not_carried(tainted, upstream_daemon_set(tainted), [old]) == []  # another group has it still
    # no list: the operator keeps its asset's tolerations, whatever they are
    assert policy_not_carried(changed(SHARED, daemonsets={}), upstream_daemon_set(tainted), [old]) == []


def test_a_mig_strategy_given_as_plugin_env_wins_as_in_the_operator() -> None:
    spec = changed(SHARED, devicePlugin={**SHARED["devicePlugin"],
                                         "env": [*HARDENING, {"name": "MIG_STRATEGY", "value": "none"}]})
    assert policy_not_carried(spec, upstream_daemon_set(spec)) == []
    assert policy_not_carried(spec, upstream_daemon_set(SHARED)) == ["MIG_STRATEGY=none, not mixed"]


def test_sharing_turned_on_or_off_is_seen_in_the_config_manager() -> None:
    unshared = changed(SHARED, devicePlugin={k: v for k, v in SHARED["devicePlugin"].items() if k != "config"})
    assert policy_not_carried(unshared, upstream_daemon_set(SHARED)) == ["no plugin config, not one from a ConfigMap"]
    assert policy_not_carried(SHARED, upstream_daemon_set(unshared)) == \
        ["plugin config from ConfigMap gpuctl-device-plugin-config, not none", "DEFAULT_CONFIG=none, not (unset)"]


def test_image_path_as_the_operator_builds_it() -> None:
    assert image_path({"repository": "r", "image": "i", "version": "v1"}) == "r/i:v1"
    assert image_path({"repository": "r", "image": "i", "version": "sha256:ab"}) == "r/i@sha256:ab"
    assert image_path({"image": "r/i@sha256:ab"}) == "r/i@sha256:ab"  # kbld's whole path in `image`
    assert image_path({}) is None  # the operator's DEVICE_PLUGIN_IMAGE: nothing to compare
    assert policy_not_carried({"devicePlugin": {}}, {"spec": {"template": {"spec": {"containers": []}}}}) == []
