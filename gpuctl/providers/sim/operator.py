"""The simulated GPU Operator of a sim cluster: what the device plugin, GPU Feature Discovery,
the MIG manager and the CUDA runtime do on real GPU nodes, played against kwok's fake nodes.

It runs as long as the sim cluster runs (started and stopped with it) and is idle until the
GPU Operator chart is installed, which leaves its values in the gpu-operator-sim-settings ConfigMap.
Faithful to upstream where it matters to gpuctl:
- allocatable nvidia.com/gpu = GPUs x replicas of the node's device-plugin config, and the
  labels nvidia.com/gpu.replicas, .sharing-strategy and product "-SHARED";
- an edited config is NOT reloaded until the node's device-plugin pod restarts (upstream defect);
- nvidia.com/mig.config moves nvidia.com/mig.config.state pending -> success | failed;
- a CUDA vectoradd sample pod passes when the node's driver supports its CUDA version.

Run: python -m gpuctl.providers.sim.operator --kubeconfig FILE --logs DIR
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuctl import labels as L
from gpuctl.catalog import GpuModel
from gpuctl.gpu_nodes import model_of
from gpuctl.errors import UsageError
from gpuctl.kube.client import api_client, core, is_not_found
from gpuctl.kube.objects import MERGE_PATCH
from gpuctl.mig import advertised_resources, layout_from_counts, parse_mig_parted_config, place
from gpuctl.providers.sim.nodes import CUDA_VERSION
from gpuctl.sharing import CONFIG_LABEL, NO_SHARING, Sharing, parse_plugin_config
from gpuctl.stack.values import NAMESPACE

log = logging.getLogger("gpuctl.sim.operator")

POLL_S = 1.0
SETTINGS_CONFIGMAP = "gpu-operator-sim-settings"
PLUGIN_APP = "nvidia-device-plugin-daemonset"
LOADED = "sim.gpuctl.dev/device-plugin-loaded"  # what this node's plugin pod loaded, and when
MIG_APPLIED = "sim.gpuctl.dev/mig-applied"
EXIT_CODE = "sim.gpuctl.dev/exit-code"  # read by gpuctl's kwok Stage (templates/sim/stages.yaml)
MIG_STATE = "nvidia.com/mig.config.state"
MIG_CONFIG = "nvidia.com/mig.config"
CUDA_SAMPLE = re.compile(r"^nvcr\.io/nvidia/k8s/cuda-sample:vectoradd-cuda(\d+)\.(\d+)")
GPU_REQUEST = re.compile(r"^nvidia\.com/(gpu|mig-.+)$")


@dataclass(frozen=True)
class Settings:
    plugin_configmap: str
    plugin_default: str
    mig_configmap: str
    mig_strategy: str


class SimOperator:
    def __init__(self, kubeconfig: Path, logs: Path) -> None:
        self.v1 = core(api_client(kubeconfig))
        from kubernetes.client import CustomObjectsApi

        self.custom = CustomObjectsApi(self.v1.api_client)
        self.logs = logs

    def settings(self) -> Settings | None:
        try:
            data = self.v1.read_namespaced_config_map(SETTINGS_CONFIGMAP, NAMESPACE).data or {}
        except Exception as exc:  # noqa: BLE001
            if is_not_found(exc):
                return None
            raise
        values = json.loads(data["values.json"])
        return Settings(values["devicePlugin"]["config"]["name"], values["devicePlugin"]["config"]["default"],
                        values["migManager"]["config"]["name"], values["mig"]["strategy"])

    def _config_map(self, name: str) -> dict[str, str]:
        try:
            return self.v1.read_namespaced_config_map(name, NAMESPACE).data or {}
        except Exception as exc:  # noqa: BLE001
            if is_not_found(exc):
                return {}
            raise

    def reconcile(self) -> None:
        settings = self.settings()
        if settings is None:
            return  # the GPU Operator is not installed
        plugin_configs = self._config_map(settings.plugin_configmap)
        try:
            mig_configs = parse_mig_parted_config(self._config_map(settings.mig_configmap).get("config.yaml", ""))
        except ValueError:
            mig_configs = {}
        plugin_pods = {p.spec.node_name: p.metadata.uid for p in self.v1.list_namespaced_pod(
            NAMESPACE, label_selector=f"app={PLUGIN_APP}").items if p.spec.node_name and p.status.phase == "Running"}
        for node in self.v1.list_node(label_selector=f"{L.NFD_NVIDIA_PCI}=true").items:
            self._reconcile_node(node, settings, plugin_configs, mig_configs, plugin_pods.get(node.metadata.name))
        self._run_cuda_samples()

    def _reconcile_node(self, node: Any, settings: Settings, plugin_configs: dict[str, str],
                        mig_configs: dict[str, dict[str, int] | None], plugin_pod: str | None) -> None:
        labels = node.metadata.labels or {}
        annotations = node.metadata.annotations or {}
        model = model_of(labels)
        if model is None:
            return
        gpus = int(labels.get(L.GPU_COUNT, "1"))
        want_labels: dict[str, str | None] = {"nvidia.com/gpu.present": "true"}
        want_annotations: dict[str, str | None] = {}

        # Device plugin: load the node's config when its plugin pod (re)starts or the label changes.
        key = labels.get(CONFIG_LABEL) or settings.plugin_default or ""
        loaded = json.loads(annotations.get(LOADED, "null"))
        if plugin_pod is not None and (loaded is None or loaded["key"] != key or loaded["pod"] != plugin_pod):
            try:
                sharing = parse_plugin_config(plugin_configs[key]) if key else NO_SHARING
            except (KeyError, ValueError):
                sharing = NO_SHARING  # upstream logs an error and serves the GPUs unshared
            loaded = {"key": key, "pod": plugin_pod, "strategy": sharing.strategy, "replicas": sharing.replicas}
            want_annotations[LOADED] = json.dumps(loaded, sort_keys=True)
        sharing = Sharing(loaded["strategy"], loaded["replicas"]) if loaded else NO_SHARING

        # MIG manager: pending first, then success or failed against the GPU's real geometry.
        resources: dict[str, int] = {L.GPU_RESOURCE: gpus * sharing.replicas}
        product = model.product
        mig_wanted = labels.get(MIG_CONFIG)
        applied = annotations.get(MIG_APPLIED)
        if mig_wanted and mig_wanted != applied:
            if labels.get(MIG_STATE) != "pending":
                want_labels[MIG_STATE] = "pending"
            else:
                ok = self._mig_fits(model, mig_configs, mig_wanted)
                want_labels[MIG_STATE] = "success" if ok else "failed"
                if ok:
                    want_annotations[MIG_APPLIED] = applied = mig_wanted
        if applied and model.mig is not None and mig_wanted == applied and applied in mig_configs:
            layout = layout_from_counts(applied, mig_configs[applied])
            try:
                resources = advertised_resources(layout, gpus, settings.mig_strategy)
            except UsageError:
                want_labels[MIG_STATE] = "failed"
            else:
                sharing = NO_SHARING
                if layout.enabled and settings.mig_strategy == "single" and layout.profiles:
                    product = f"{model.product}-MIG-{layout.profiles[0]}"
            want_labels["nvidia.com/mig.strategy"] = settings.mig_strategy
        if sharing.replicas > 1:
            product += "-SHARED"
        want_labels.update({
            L.GPU_PRODUCT: product,
            "nvidia.com/gpu.replicas": str(sharing.replicas),
            "nvidia.com/gpu.sharing-strategy": sharing.strategy,
        })
        self._patch_node(node, want_labels, want_annotations, resources)

    def _mig_fits(self, model: GpuModel, mig_configs: dict[str, dict[str, int] | None], name: str) -> bool:
        if model.mig is None or name not in mig_configs:
            return False
        try:
            place(layout_from_counts(name, mig_configs[name]).profiles, model)
        except UsageError:
            return False
        return True

    def _patch_node(self, node: Any, labels: dict[str, str | None], annotations: dict[str, str | None],
                    resources: dict[str, int]) -> None:
        current_labels = node.metadata.labels or {}
        meta: dict[str, Any] = {}
        if label_diff := {k: v for k, v in labels.items() if current_labels.get(k) != v}:
            meta["labels"] = label_diff
        if annotations:
            meta["annotations"] = annotations
        if meta:
            self.v1.patch_node(node.metadata.name, {"metadata": meta}, _content_type=MERGE_PATCH)
        allocatable = node.status.allocatable or {}
        want = {k: str(v) for k, v in resources.items()}
        stale = {k: None for k in allocatable if GPU_REQUEST.match(k) and k not in want}
        if stale or any(allocatable.get(k) != v for k, v in want.items()):
            status = {**want, **stale}
            self.v1.patch_node_status(node.metadata.name, {"status": {"capacity": status, "allocatable": status}},
                                      _content_type=MERGE_PATCH)

    # -- the CUDA runtime ------------------------------------------------------------------

    def _run_cuda_samples(self) -> None:
        for pod in self.v1.list_pod_for_all_namespaces(field_selector="status.phase=Running").items:
            if EXIT_CODE in (pod.metadata.annotations or {}) or not pod.spec.node_name:
                continue
            container = pod.spec.containers[0]
            match = CUDA_SAMPLE.match(container.image or "")
            limits = (container.resources.limits if container.resources else None) or {}
            requested = [k for k in limits if GPU_REQUEST.match(k)]
            if match is None or not requested:
                continue  # not a CUDA sample: it keeps running, as it would on a real GPU
            needed = (int(match[1]), int(match[2]))
            if needed <= CUDA_VERSION:
                lines, code = PASSED_LOG, 0
            else:
                lines, code = [f"Failed to allocate device vector A (error code CUDA driver version is insufficient "
                               f"for CUDA runtime version: needs {needed[0]}.{needed[1]}, driver supports "
                               f"{CUDA_VERSION[0]}.{CUDA_VERSION[1]})!"], 1
            self._finish(pod, container.name, lines, code)

    def _finish(self, pod: Any, container: str, lines: list[str], code: int) -> None:
        """Write the container log, serve it through a kwok Logs object, and report the exit code."""
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.logs.mkdir(parents=True, exist_ok=True)
        logfile = self.logs / f"{pod.metadata.namespace}_{pod.metadata.name}_{pod.metadata.uid}.log"
        logfile.write_text("".join(f"{now} stdout F {line}\n" for line in lines))
        body = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
                "metadata": {"name": pod.metadata.name, "namespace": pod.metadata.namespace},
                "spec": {"logs": [{"containers": [container], "logsFile": str(logfile)}]}}
        try:
            self.custom.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", pod.metadata.namespace,
                                                        "logs", body)
        except Exception as exc:  # noqa: BLE001 - a Logs object left from a pod of the same name
            if getattr(exc, "status", None) != 409:
                raise
            self.custom.patch_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", pod.metadata.namespace,
                                                       "logs", pod.metadata.name, body, _content_type=MERGE_PATCH)
        # The outcome itself is kwok's to give: its Stage completes the pod from this annotation.
        self.v1.patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace,
                                     {"metadata": {"annotations": {EXIT_CODE: str(code)}}}, _content_type=MERGE_PATCH)


PASSED_LOG = [
    "[Vector addition of 50000 elements]",
    "Copy input data from the host memory to the CUDA device",
    "CUDA kernel launch with 196 blocks of 256 threads",
    "Copy output data from the CUDA device to the host memory",
    "Test PASSED",
    "Done",
]


def main() -> None:
    parser = argparse.ArgumentParser(description="gpuctl's simulated GPU Operator for one sim cluster")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--logs", type=Path, required=True, help="where simulated container logs are written")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    operator = SimOperator(args.kubeconfig, args.logs)
    while True:
        started = time.monotonic()
        try:
            operator.reconcile()
        except Exception:  # noqa: BLE001 - keep simulating; the API server may be restarting
            log.exception("reconcile failed")
        time.sleep(max(0.0, POLL_S - (time.monotonic() - started)))


if __name__ == "__main__":
    main()
