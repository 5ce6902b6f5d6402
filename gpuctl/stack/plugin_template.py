"""Whether the GPU Operator's device-plugin DaemonSet carries its ClusterPolicy yet.

A Helm upgrade (or gpuctl's server-side apply to another's ClusterPolicy) changes the ClusterPolicy; the
operator then rewrites the DaemonSet, and only then does the DaemonSet controller roll its pods. Until the
operator has done so, the DaemonSet is the old one, fully rolled out, and its pods about to be replaced: a
wait that looks at the rollout alone passes on the state before the change. How the operator does it
(NVIDIA/gpu-operator v26.7.0):
- controllers/clusterpolicy_controller.go: the ClusterPolicy is reconciled on a change of its generation
  (TypedGenerationChangedPredicate); its status has no observedGeneration (internal/conditions/
  clusterpolicy.go sets Ready/Error without one), so the ClusterPolicy cannot say it was seen;
- controllers/object_controls.go DaemonSet(): the DaemonSet is rendered from the asset and the ClusterPolicy
  (TransformDevicePlugin) and Updated when its hash (annotation nvidia.com/last-applied-hash,
  isDaemonsetSpecChanged) differs; the DaemonSet controller then rolls its pods (isDaemonSetReady waits for
  observedGeneration, updated and available pods: the rollout gpuctl.ops.validate.Rollout judges);
- TransformDevicePlugin writes, into the pod template: the main container's image from devicePlugin
  repository/image/version (api/nvidia/v1 imagePath: repository/image:version, @ for a sha256 digest), each
  devicePlugin.env entry on the main container (setContainerEnv), MIG_STRATEGY from mig.strategy when set
  (applyMIGConfiguration), and with devicePlugin.config.name CONFIG_FILE on the main container and
  DEFAULT_CONFIG=config.default on the config-manager containers (handleDevicePluginConfig,
  transformConfigManagerInitContainer/SidecarContainer), which it removes without one;
- applyCommonDaemonsetConfig, for every operand: the pod template's tolerations replaced by
  daemonsets.tolerations where that list is not empty (gpuctl's values list the node groups' GPU taints there,
  so a group's new taint is such a change).
So the template is read for those fields: what of the ClusterPolicy it does not carry yet (pure, on the
objects as the API returns them). Tolerations are read for containment, each of the ClusterPolicy's in the
template, since a platform may add its own (the sim's operand pods tolerate its startup taint besides); a
toleration the run dropped is named by the caller, and must be gone from the template once the ClusterPolicy
lists others without it (the operator then replaces the list). Without that, the DaemonSet before the rewrite
passes for the new one, and its pods restart under the wait's feet, their nodes advertising no GPU meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAIN_CONTAINER = "nvidia-device-plugin"  # assets/state-device-plugin/0500_daemonset.yaml


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e.get("value") or "") for e in container.get("env") or [] if "name" in e}


def image_path(plugin: dict[str, Any]) -> str | None:
    """The image the operator gives the device plugin from ClusterPolicy spec.devicePlugin; None when the
    ClusterPolicy names none (the operator takes DEVICE_PLUGIN_IMAGE from its own environment)."""
    repository, image, version = (str(plugin.get(k) or "") for k in ("repository", "image", "version"))
    if not repository and not version:
        return image or None
    if not (repository and image and version):
        return None  # the operator refuses it (imagePath); the rollout check names what follows
    return f"{repository}/{image}{'@' if version.startswith('sha256:') else ':'}{version}"


def _toleration(entry: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A toleration as a comparable value: its fields that are set (the API leaves unset ones out)."""
    return tuple(sorted((k, str(v)) for k, v in entry.items() if v not in (None, "")))


def _describe(entry: Mapping[str, Any]) -> str:
    value = f"={entry['value']}" if entry.get("value") else ""
    return f"{entry.get('key') or '*'}{value}:{entry.get('effect') or '*'}"


def policy_not_carried(policy_spec: dict[str, Any], daemon_set: dict[str, Any],
                       dropped: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """What of ClusterPolicy `policy_spec` the device-plugin `daemon_set`'s pod template does not carry
    yet, one short phrase each ("MIG_STRATEGY=single, not mixed"); [] when it carries all of it. `dropped`:
    tolerations the ClusterPolicy listed before this change and should list no more."""
    pod = ((daemon_set.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = pod.get("containers") or []
    if not containers:
        return []
    main = next((c for c in containers if c.get("name") == MAIN_CONTAINER), containers[0])
    env = _env(main)
    everywhere = [_env(c) for c in [*containers, *(pod.get("initContainers") or [])]]
    plugin = policy_spec.get("devicePlugin") or {}
    wrong: list[str] = []

    def want(name: str, value: str, have: str | None) -> None:
        if have != value:
            wrong.append(f"{name}={value}, not {have if have is not None else '(unset)'}")

    image = image_path(plugin)
    if image is not None and main.get("image") != image:
        wrong.append(f"image {image}, not {main.get('image')}")
    wanted: dict[str, str] = {}
    if strategy := (policy_spec.get("mig") or {}).get("strategy"):
        wanted["MIG_STRATEGY"] = str(strategy)
    for entry in plugin.get("env") or []:  # set after MIG_STRATEGY: an entry of the same name wins
        if entry.get("name"):
            wanted[entry["name"]] = str(entry.get("value") or "")
    for name, value in wanted.items():
        want(name, value, env.get(name))
    config = plugin.get("config") or {}
    defaults = {e["DEFAULT_CONFIG"] for e in everywhere if "DEFAULT_CONFIG" in e}
    if config.get("name"):
        if "CONFIG_FILE" not in env:
            wrong.append(f"plugin config from ConfigMap {config['name']}, not none")
        default = str(config.get("default") or "")
        if defaults != {default}:
            wrong.append(f"DEFAULT_CONFIG={default}, not {', '.join(sorted(defaults)) or '(unset)'}")
    elif "CONFIG_FILE" in env:
        wrong.append("no plugin config, not one from a ConfigMap")
    carried = {_toleration(t) for t in pod.get("tolerations") or []}
    listed = (policy_spec.get("daemonsets") or {}).get("tolerations") or []
    wrong += [f"toleration {_describe(t)}, not there" for t in listed if _toleration(t) not in carried]
    if listed:  # else the operator keeps its asset's tolerations, which may name a dropped one too
        gone = {_toleration(t) for t in dropped} - {_toleration(t) for t in listed}
        wrong += [f"no toleration {_describe(t)}, still there" for t in dropped
                  if _toleration(t) in gone & carried]
    return wrong
