"""The write-gpu-config and restart-device-plugin steps: gpuctl's ConfigMaps in the GPU Operator's namespace (the
stack record, the device plugin's sharing configs, mig-parted's layouts, the node groups' records), and a
restart of the device-plugin pods where a config in use changed (the plugin does not reload an edited one)."""

from __future__ import annotations

from gpuctl.kube.errors import requesting
from gpuctl.kube.kube import Kube
from gpuctl.kube.objects import ensure_config_map_keys, ensure_namespace, read_config_map_data
from gpuctl.model import labels as L
from gpuctl.model.change import Change, Observed, Step
from gpuctl.model.mig import mig_parted_config, parse_mig_parted_config
from gpuctl.model.sharing import plugin_configs
from gpuctl.model.spec import PlatformSpec
from gpuctl.ops.group_records import GROUPS_CONFIGMAP, records_data
from gpuctl.ops.platform.diffs import diff_text
from gpuctl.stack.values import DEVICE_PLUGIN_CONFIGMAP, MIG_CONFIGMAP, NAMESPACE, STACK_CONFIGMAP, stack_record


def gpu_config_steps(kube: Kube, spec: PlatformSpec, namespace: str) -> tuple[Step, Step]:
    """write-gpu-config, and restart-device-plugin (which runs later, after the GPU stack's releases): the
    restart follows the device-plugin configs in use that the write changes (plan: would change)."""
    would: set[str] = set()  # the device-plugin configs write-gpu-config would change (observed)
    did: set[str] = set()  # ... changed (acted)

    def observe_config() -> Observed:
        observed, keys = observe_gpu_config(kube, spec, namespace)
        would.clear()
        would.update(keys)
        return observed

    def write_config() -> Change:
        change, keys = write_gpu_config(kube, spec, namespace)
        did.update(keys)
        return change

    in_use = configs_in_use(spec)
    return (Step("write-gpu-config", observe_config, write_config),
            Step("restart-device-plugin", lambda: observe_restart(would & in_use),
                 lambda: restart_device_plugin(kube, did & in_use, namespace)))


def gpu_config_data(spec: PlatformSpec, existing_mig: dict[str, dict[str, int] | None]) -> dict[str, dict[str, str]]:
    """ConfigMap name -> data: the stack record, the device-plugin configs of every group's sharing (none
    at all without sharing), the mig-parted configs of their layouts beside all-disabled and the
    `existing_mig` ones, and the records of the node groups `spec` names."""
    every = spec.every_group
    data = {STACK_CONFIGMAP: {"stack.json": stack_record(spec.stack)},
            DEVICE_PLUGIN_CONFIGMAP: plugin_configs([g.sharing for g in every]),
            MIG_CONFIGMAP: {"config.yaml": mig_parted_config([g.mig for g in every if g.mig], existing_mig)},
            GROUPS_CONFIGMAP: records_data(spec.groups)}
    return {name: keys for name, keys in data.items() if keys}


def wanted_gpu_config(kube: Kube, spec: PlatformSpec, namespace: str) -> dict[str, dict[str, str]]:
    """gpu_config_data with the MIG layouts the cluster's mig-parted config holds now (they stay)."""
    text = (read_config_map_data(kube, namespace, MIG_CONFIGMAP) or {}).get("config.yaml")
    return gpu_config_data(spec, parse_mig_parted_config(text) if text else {})


def observe_gpu_config(kube: Kube, spec: PlatformSpec, namespace: str) -> tuple[Observed, set[str]]:
    """What write_gpu_config would change, and the device-plugin keys whose existing content it would
    change (as write_gpu_config returns them)."""
    diffs, changed = [], set()
    for name, data in wanted_gpu_config(kube, spec, namespace).items():
        current = read_config_map_data(kube, namespace, name) or {}
        for key, value in data.items():
            if current.get(key) != value:
                diffs.append(diff_text(current.get(key) or "", value, f"{name}/{key}"))
                if name == DEVICE_PLUGIN_CONFIGMAP and key in current:
                    changed.add(key)
    return Observed(Change.UPDATED if diffs else Change.NO_CHANGE, "", "\n".join(diffs)), changed


def write_gpu_config(kube: Kube, spec: PlatformSpec, namespace: str = NAMESPACE) -> tuple[Change, set[str]]:
    """Write gpu_config_data into the GPU Operator's `namespace` where it differs; also return the
    device-plugin keys whose content changed (their consumers must restart)."""
    outcomes = [ensure_namespace(kube, namespace)]
    changed: set[str] = set()
    for name, data in wanted_gpu_config(kube, spec, namespace).items():
        outcome, keys = ensure_config_map_keys(kube, namespace, name, data)
        outcomes.append(outcome)
        if name == DEVICE_PLUGIN_CONFIGMAP:
            changed = keys
    return (Change.NO_CHANGE if all(o is Change.NO_CHANGE for o in outcomes) else Change.UPDATED), changed


def configs_in_use(spec: PlatformSpec) -> set[str]:
    """The device-plugin config keys some node group (recorded ones too) points its nodes at."""
    return {g.sharing.config_key for g in spec.every_group if g.sharing.config_key}


def observe_restart(changed_in_use: set[str]) -> Observed:
    if not changed_in_use:
        return Observed(Change.NO_CHANGE)
    return Observed(Change.UPDATED, f"restarts the device-plugin pods: write-gpu-config changes "
                                    f"{', '.join(sorted(changed_in_use))}, in use")


def restart_device_plugin(kube: Kube, changed_in_use: set[str], namespace: str = NAMESPACE) -> Change:
    """The device plugin does not reload an edited config: restart its pods when one in use changed."""
    if not changed_in_use:
        return Change.NO_CHANGE
    with requesting("restarting the device-plugin pods"):
        kube.delete_all("v1", "Pod", namespace, labels=f"app={L.DEVICE_PLUGIN_APP}")
    return Change.UPDATED
