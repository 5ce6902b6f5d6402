"""The simulated GPU Operator of a sim cluster: what the operator, the device plugin, GPU Feature
Discovery, the MIG manager, the DRA driver's kubelet plugin and the CUDA runtime do on real GPU nodes,
played against kwok's fake nodes.

It runs as long as the sim cluster runs (started and stopped with it), and meanwhile restarts the
control-plane components that exit, as the kubelet restarts a control plane's static pods (supervisor.py).
Its GPU Operator part is idle until a ClusterPolicy exists: like the real operator it takes its inputs
from the ClusterPolicy the chart renders (gpuctl's bundled stand-in chart, or NVIDIA's own through
--charts DIR, or NVIDIA's chart installed by someone else under any release name). Faithful to upstream
where it matters to gpuctl:
- the release name does not matter; operands and their ConfigMaps live in the operator's own
  namespace (OPERATOR_NAMESPACE, the namespace of its Deployment);
- the operator's node labels and DaemonSets, with their names, labels and node selectors (operands.py);
- the device plugin loads each node's config with the real plugin's code (device_plugin.py); a
  config it refuses leaves the node without GPUs and the plugin pod crash-looping;
- allocatable nvidia.com/gpu = GPUs x replicas, labels nvidia.com/gpu.replicas, .sharing-strategy,
  nvidia.com/mps.capable and product "-SHARED" (GPU Feature Discovery);
- an edited config is NOT reloaded until the node's device-plugin pod restarts (upstream defect);
- nvidia.com/mig.config moves nvidia.com/mig.config.state pending -> success | failed, as mig-parted's own
  apply of the config decides on go-nvml's mock of the node's GPU, and the MIG resources advertised are the
  MIG devices that apply made (mig_manager.py); as the real MIG manager does when it starts, a label whose
  state is not the answer to it (cleared, or left pending by an operator that died) is answered too,
  `success` at once where the config is the one applied; with the node annotation
  sim.gpuctl.dev/fault-mig-wedge its next run wedges, `pending` with the operands paused, until the label changes
  (gpu-operator #2833; mig_manager.py);
- with the device plugin off in the ClusterPolicy (DRA mode), no nvidia.com/gpu or nvidia.com/mig-* on the node;
- a CUDA vectoradd sample pod passes when the node's driver supports its CUDA version; it gets its GPU
  from the device plugin (resources.limits, with a ClusterPolicy) or from a ResourceClaim the scheduler
  allocated on its node (with or without one).
The DRA driver's kubelet plugin needs no ClusterPolicy (the driver's chart installs without the GPU
Operator): on every node where a pod of its DaemonSet runs, the node's ResourceSlice is published, and
withdrawn when the pod goes (sim/dra.py sync_plugin_slices); with the driver's NVML health check on, an XID
fault taints the failing device in it (sim/dra_health.py).

Run: python -m gpuctl.simulator.operator --kubeconfig FILE --logs DIR [--stamp STAMP]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from gpuctl.kube.errors import KubeConflict, KubeNotFound
from gpuctl.kube.gpu_nodes import model_of
from gpuctl.kube.informer import Informer
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.kube.nodes import WORKERS
from gpuctl.model import labels as L
from gpuctl.model.catalog import GpuModel
from gpuctl.model.dra import API_VERSION as DRA_API_VERSION
from gpuctl.model.dra import DRIVER
from gpuctl.model.mig import layout_from_counts, place, resource_name
from gpuctl.model.sharing import CONFIG_LABEL, NO_SHARING, Sharing
from gpuctl.simulator.dcgm_series import instance_id
from gpuctl.simulator.device_plugin import PluginLoad, load_plugin_config
from gpuctl.simulator.dra import sync_plugin_slices
from gpuctl.simulator.dra_health import sync_device_taints
from gpuctl.simulator.kubelet_devices import PLUGIN_SELECTOR, sync_device_health
from gpuctl.simulator.mig_manager import (
    FAULT_MIG_WEDGE,
    MIG_WEDGED,
    MigApplied,
    apply_mig_config,
    mig_resources,
    wedge_labels,
)
from gpuctl.simulator.nodes import CUDA_VERSION, DEVICES_PENDING
from gpuctl.simulator.operands import (
    CLUSTER_POLICY,
    HASH_ANNOTATION,
    OPERANDS,
    Policy,
    is_gpu_node,
    node_labels,
    operator_namespace,
    render_daemon_set,
)
from gpuctl.simulator.supervisor import Supervisor
from gpuctl.simulator.xid import FAULT_XID, XID_DECISIONS, SimDevice, mark_unhealthy, parse_faults
from gpuctl.stack.values import NAMESPACE
from gpuctl.tools.installer import find_tool
from gpuctl.util.errors import UsageError

log = logging.getLogger("gpuctl.sim.operator")
Key = TypeVar("Key")
Answer = TypeVar("Answer")

POLL_S = 1.0
RUNNING = "status.phase=Running"  # the pods the parts of a pass look at (plugins, CUDA samples)
LOADED = "sim.gpuctl.dev/device-plugin-loaded"  # what this node's plugin pod loaded, and when
MIG_APPLIED = "sim.gpuctl.dev/mig-applied"
MIG_FAILED = "sim.gpuctl.dev/mig-failed"  # the config its MIG manager last failed to apply: not tried again
EXIT_CODE = "sim.gpuctl.dev/exit-code"  # read by gpuctl's kwok Stages (templates/sim/stages.yaml)
CRASH = "sim.gpuctl.dev/crash"  # a plugin pod that exited with this error; its Stage makes it not ready
# A fault a test turns on for a node (a NodePool's template annotations carry it to the nodes Karpenter launches):
# the first device-plugin pod on the node serves 0 GPUs until it is restarted, as NVIDIA/k8s-device-plugin #1645
# (open since v0.18.2) reports for nodes whose config label comes from a NodePool template: the config-manager
# races the plugin's start, which then registers nvidia.com/gpu=0 and keeps it; a restarted pod registers right.
CONFIG_RACE = "sim.gpuctl.dev/fault-plugin-config-race"
CUDA_SAMPLE = re.compile(r"^nvcr\.io/nvidia/k8s/cuda-sample:vectoradd-cuda(\d+)\.(\d+)")
GPU_REQUEST = re.compile(r"^nvidia\.com/(gpu|mig-.+)$")
DEVICE_PLUGIN = next(o for o in OPERANDS if o.name == L.DEVICE_PLUGIN_APP)
KWOK_LOGS = ("kwok.x-k8s.io/v1alpha1", "Logs")  # a container's log, as kwok serves it (apiVersion, kind)


class SimOperator:
    def __init__(self, kubeconfig: Path, logs: Path) -> None:
        self.kube = Kube.connect(kubeconfig)
        # every node and every Running pod, kept by a watch: each part of a pass reads them from memory, where
        # a LIST per part and pass cost most of the kube-apiserver's and this process's time at 1,000 nodes
        self.nodes = Informer(self.kube, "v1", "Node").start()
        self.running_pods = Informer(self.kube, "v1", "Pod", fields=RUNNING).start()
        self.logs = logs
        self.upstreamcheck = find_tool("upstreamcheck")
        self.namespace = NAMESPACE
        self.mig_seen: set[str] = set()  # nodes whose MIG config this process has looked at
        # mig-parted's answers by (config.yaml, config, GPU model, GPUs): one apply per change, not per pass
        self.mig_answers: dict[tuple[str, str, str, int], MigApplied] = {}
        # the device plugin's load of a config by (ConfigMap data, node's config key, default, MIG strategy,
        # compute capability, MIG enabled): the answer of the plugin's own code depends on nothing else
        self.plugin_answers: dict[tuple[str, str, str, str, tuple[int, int], bool], PluginLoad] = {}
        self.answers_lock = threading.Lock()  # the nodes of a pass are reconciled WORKERS at a time
        self.pool = ThreadPoolExecutor(max_workers=WORKERS)

    def operator_namespace(self) -> str:
        """The real operator's OPERATOR_NAMESPACE: the namespace of its own Deployment (the chart's
        templates/operator.yaml sets it from metadata.namespace), whatever the release is called.
        It runs its operands there and reads the ConfigMaps its ClusterPolicy names from there."""
        return operator_namespace(self.kube)

    def policy(self) -> Policy | None:
        try:
            items = self.kube.list(*CLUSTER_POLICY)
        except KubeNotFound:
            return None  # no ClusterPolicy CRD: the GPU Operator is not installed
        if not items:
            return None
        first = sorted(items, key=lambda i: i["metadata"]["creationTimestamp"])[0]
        return Policy(first["metadata"]["name"], first["metadata"]["uid"], first.get("spec") or {})

    def _config_map(self, name: str) -> dict[str, str] | None:
        found = self.kube.get_or_none("v1", "ConfigMap", name, self.namespace)
        return None if found is None else found.get("data") or {}

    def reconcile(self) -> None:
        """One pass: the GPU Operator's part (with a ClusterPolicy), the DRA driver's kubelet plugins (with
        or without one), the CUDA runtime. A part that fails is logged and does not hold up the others.
        The kubelets' device managers go first, with or without a ClusterPolicy: a node whose device plugin went
        (or that Karpenter launched with GPUs no plugin registered) stops offering them (kubelet_devices.py)."""
        nodes, running = self.nodes.items, self.running_pods.items  # (each part reads what the last one wrote)
        self._guarded("kubelet-device-manager", lambda: sync_device_health(self.kube, nodes(), running(), LOADED))
        policy = self._guarded("gpu-operator", self._reconcile_operator)
        self._guarded("dra-device-health", lambda: sync_device_taints(self.kube, nodes(), running()))
        self._guarded("dra-kubelet-plugin", lambda: sync_plugin_slices(self.kube, nodes(), running()))
        self._guarded("cuda-samples", lambda: self._run_cuda_samples(device_plugin=policy is not None))

    @staticmethod
    def _guarded(part: str, run: Callable[[], Any]) -> Any:
        try:
            return run()
        except Exception:
            log.exception("reconcile failed: %s", part)
            return None

    def _reconcile_operator(self) -> Policy | None:
        policy = self.policy()
        if policy is None:
            return None
        self.namespace = self.operator_namespace()
        nodes = [n for n in self.nodes.items() if is_gpu_node(n.labels)]
        if nodes:  # the operator creates no DaemonSet in a cluster without GPU nodes
            self._ensure_daemon_sets(policy)
        plugin_name, _ = policy.plugin_config
        plugin_configs = self._config_map(plugin_name) if plugin_name else None
        mig_name, _ = policy.mig_config
        # without a custom ConfigMap the real MIG manager generates configs from the hardware; the sim has none
        mig_text = (self._config_map(mig_name) or {}).get("config.yaml", "") if mig_name else ""
        plugin_pods = {p.spec["nodeName"]: p for p in self.running_pods.items()
                       if p.namespace == self.namespace and p.matches(PLUGIN_SELECTOR) and p.spec.get("nodeName")}

        def reconcile_node(node: KubeObject) -> None:
            try:
                self._reconcile_node(node, policy, plugin_name, plugin_configs, mig_text, plugin_pods.get(node.name))
            except KubeConflict:
                log.info("node %s changed since it was read; next pass", node.name)

        # Each node's own agents (its GFD, device plugin, kubelet, MIG manager) write to it independently of the
        # others' on real nodes: one node after another, a pass over 1,000 nodes took 20-70 s of round trips.
        list(self.pool.map(reconcile_node, nodes))
        return policy

    def _ensure_daemon_sets(self, policy: Policy) -> None:
        existing = {d.name: d for d in self.kube.list("apps/v1", "DaemonSet", self.namespace)}
        for operand in OPERANDS:
            current = existing.get(operand.name)
            if not policy.enabled(operand):
                owners = current.at("metadata", "ownerReferences", default=[]) if current is not None else []
                if any(r.get("uid") == policy.uid for r in owners):
                    self.kube.delete("apps/v1", "DaemonSet", operand.name, self.namespace)
                continue
            body = render_daemon_set(operand, policy, self.namespace)
            if current is None or current.annotations.get(HASH_ANNOTATION) != \
                    body["metadata"]["annotations"][HASH_ANNOTATION]:
                self.kube.apply(body, field_manager="gpu-operator")

    def _load(self, node: KubeObject, model: GpuModel, policy: Policy, plugin_name: str,
              plugin_configs: dict[str, str] | None, mig_enabled: bool) -> PluginLoad:
        labels = node.labels
        if plugin_name and plugin_configs is None:
            return PluginLoad(error=f'configmap "{plugin_name}" not found')  # the pod cannot mount it
        if (upstreamcheck := self.upstreamcheck) is None:
            return PluginLoad(error="upstreamcheck is not installed: run 'gpuctl sim install'")
        _, default = policy.plugin_config
        # one load per distinct input, not per node: a 1,000-node group's nodes load the same config
        key = (json.dumps(plugin_configs, sort_keys=True), labels.get(CONFIG_LABEL, ""), default,
               policy.mig_strategy, model.compute_capability, mig_enabled)
        return self._remembered(self.plugin_answers, key, lambda: load_plugin_config(
            upstreamcheck, plugin_configs, key[1], default, policy.mig_strategy, model.compute_capability,
            mig_enabled))

    def _reconcile_node(self, node: KubeObject, policy: Policy, plugin_name: str,
                        plugin_configs: dict[str, str] | None, mig_text: str, plugin_pod: KubeObject | None) -> None:
        labels = node.labels
        annotations = node.annotations
        model = model_of(labels)
        if model is None:
            return
        gpus = int(labels.get(L.GPU_COUNT, "1"))
        want_labels: dict[str, str | None] = dict(node_labels(policy, labels, model.mig is not None))
        want_annotations: dict[str, str | None] = {}
        applied = annotations.get(MIG_APPLIED)

        def mig_apply(name: str) -> MigApplied:
            return self._mig_apply(model, mig_text, name, gpus)

        mig_enabled = bool(model.mig is not None and applied and mig_apply(applied).ok
                           and mig_apply(applied).mig_enabled)

        # Device plugin: load the node's config when its pod (re)starts, the label or the MIG strategy
        # changes, or (a crash loop) while the last load failed.
        key = labels.get(CONFIG_LABEL, "")
        state = json.dumps([key, policy.mig_strategy, policy.plugin_config, mig_enabled])
        inputs = hashlib.sha256(state.encode()).hexdigest()[:12]
        loaded = json.loads(annotations.get(LOADED, "null"))
        if plugin_pod is None and loaded is not None and policy.enabled(DEVICE_PLUGIN):
            plugin_pod = self._running_plugin_pod(node.name)
        pod_uid = plugin_pod.uid if plugin_pod is not None else None
        if plugin_pod is not None and (loaded is None or loaded["pod"] != pod_uid or loaded["inputs"] != inputs
                                       or loaded.get("error")):
            result = self._load(node, model, policy, plugin_name, plugin_configs, mig_enabled)
            if loaded and loaded.get("error") and loaded["pod"] == pod_uid and result.error is None:
                self.kube.delete("v1", "Pod", plugin_pod.name, self.namespace)  # the crash loop restarts it
                result = PluginLoad(error=loaded["error"])  # until then it still has the old outcome
            elif result.error is not None and plugin_pod.annotations.get(CRASH) != result.error:
                self.kube.patch("v1", "Pod", plugin_pod.name, {"metadata": {"annotations": {CRASH: result.error}}},
                                self.namespace)
            first_pod = loaded is None
            loaded = {"pod": pod_uid, "inputs": inputs, "strategy": result.sharing.strategy,
                      "replicas": result.sharing.replicas, "error": result.error}
            if first_pod and annotations.get(CONFIG_RACE) == "true":
                loaded["raced"] = True
            if json.dumps(loaded, sort_keys=True) != annotations.get(LOADED):
                want_annotations[LOADED] = json.dumps(loaded, sort_keys=True)
        serving = loaded is not None and pod_uid is not None and loaded["pod"] == pod_uid and not loaded.get("error")
        sharing = Sharing(loaded["strategy"], loaded["replicas"]) if serving else NO_SHARING

        # MIG manager: pending first, then success or failed against the GPU's real geometry.
        raced = serving and bool(loaded and loaded.get("raced"))
        resources: dict[str, int] = {L.GPU_RESOURCE: gpus * sharing.replicas if serving and not raced else 0}
        product = model.product
        mig_wanted = labels.get(L.MIG_CONFIG) or want_labels.get(L.MIG_CONFIG)
        mig_state = labels.get(L.MIG_STATE)
        mig_gpus: tuple[dict[str, int] | None, ...] | None = None  # the MIG devices the plugin lists, GPU by GPU
        first_look = node.name not in self.mig_seen
        self.mig_seen.add(node.name)
        wedged = annotations.get(MIG_WEDGED)
        if wedged is not None and (first_look or wedged != mig_wanted or mig_state != "pending"):
            want_annotations[MIG_WEDGED] = wedged = None  # its label changed (or it restarted): it runs again
        if wedged is None and FAULT_MIG_WEDGE in annotations and model.mig is not None and mig_wanted:
            # gpu-operator #2833: this run wedges, pending with the operands paused (mig_manager.py)
            want_labels.update(wedge_labels(labels))
            want_annotations[MIG_WEDGED] = wedged = mig_wanted
        if wedged is not None:
            pass  # its run returned an error; it waits for a change of its label (main.go Get)
        elif mig_wanted and mig_wanted != applied:
            if mig_state == "failed" and annotations.get(MIG_FAILED) == mig_wanted and not first_look:
                pass  # its answer to this label; the manager runs again only when the label changes (main.go Get)
            elif mig_state != "pending":
                want_labels[L.MIG_STATE] = "pending"
            else:
                ok = mig_apply(mig_wanted).ok
                want_labels[L.MIG_STATE] = "success" if ok else "failed"
                want_annotations[MIG_FAILED] = None if ok else mig_wanted
                if ok:
                    want_annotations[MIG_APPLIED] = applied = mig_wanted
        elif mig_wanted and (mig_state not in ("success", "failed") or (first_look and mig_state != "success")):
            # The label names the config already applied, but the state is not the answer to it: cleared by a
            # relabel (gpuctl clears it with every change: mig_apply.label_mig_config) while no MIG manager ran,
            # or left pending by one that died. The real MIG manager applies the label's value whenever it
            # starts, and on every change it sees (mig-parted v0.14.4 cmd/nvidia-mig-manager/main.go: start()
            # loops on migConfig.Get(), which ContinuouslySyncMigConfigChanges' informer Sets from the node's
            # label when it first lists it, then from each change); a config that is already applied is
            # answered `success` without `pending` (pkg/mig/reconfigure/reconfigure.go Run:
            # validateMigConfig, then isConfigAlreadyApplied -> setState(success)).
            want_labels[L.MIG_STATE] = "success" if mig_apply(mig_wanted).ok else "failed"
        if serving and applied and model.mig is not None and mig_wanted == applied and mig_apply(applied).ok:
            made = mig_apply(applied)  # the MIG devices mig-parted made: what the device plugin finds
            try:
                resources = mig_resources(made, policy.mig_strategy)
            except UsageError:
                want_labels[L.MIG_STATE] = "failed"
            else:
                if made.mig_enabled:
                    sharing = NO_SHARING
                    mig_gpus = made.gpus
                    if policy.mig_strategy == "single" and made.profiles:
                        product = f"{model.product}-MIG-{made.profiles[0]}"
                else:
                    resources = {L.GPU_RESOURCE: gpus * sharing.replicas}
            want_labels[L.MIG_STRATEGY] = policy.mig_strategy
        if not policy.enabled(DEVICE_PLUGIN):
            # DRA mode: no device plugin ever registers here, so the kubelet lists no such resource. A node
            # that lists one, even at 0 (the kubelet leaves 0 where a plugin had registered: Kubernetes
            # v1.36.3 pkg/kubelet/nodestatus/setters.go:273-283), is still served by DRA for nvidia.com/gpu
            # requests: the scheduler leaves a resource to DRA unless allocatable is above 0
            # (pkg/scheduler/framework/plugins/noderesources/fit.go:270-292 shouldDelegateResourceToDRA,
            # dynamicresources/extendeddynamicresources.go:240-249). The sim removes the keys anyway, so that
            # a node in DRA mode looks like one whose device plugin never ran.
            resources = {}
        elif not serving:
            # No plugin serves here: the kubelet lists only the resources a plugin has registered, and zeroes those
            # (setters.go above; kubelet_devices.py), so a resource it never listed stays unlisted, not written as 0.
            listed = {*(node.status.get("capacity") or {}), *(node.status.get("allocatable") or {})}
            resources = {k: n for k, n in resources.items() if k in listed}
        unhealthy: dict[str, int] = {}
        if serving and loaded is not None and plugin_pod is not None and (FAULT_XID in annotations
                                                                          or loaded.get("unhealthy")):
            unhealthy = self._health_check(node, model, gpus, sharing.replicas, mig_gpus, policy.mig_strategy,
                                           plugin_pod, loaded, want_annotations)
        elif XID_DECISIONS in annotations and FAULT_XID not in annotations:
            want_annotations[XID_DECISIONS] = None
        if sharing.replicas > 1:
            product += "-SHARED"
        want_labels.update({
            L.GPU_PRODUCT: product,
            "nvidia.com/gpu.replicas": str(sharing.replicas),
            "nvidia.com/gpu.sharing-strategy": sharing.strategy,
            L.MPS_CAPABLE: str(sharing.strategy == "mps").lower(),
        })
        version = self._patch_node(node, want_labels, want_annotations, resources, unhealthy)
        mig_state = want_labels.get(L.MIG_STATE) or labels.get(L.MIG_STATE)
        settled = model.mig is None or not mig_wanted or mig_state in ("success", "failed")
        taints = node.spec.get("taints") or []
        if (not policy.enabled(DEVICE_PLUGIN) or (serving and settled)) and \
                any(t.get("key") == DEVICES_PENDING.key for t in taints):
            # the device plugin serves the node as configured: it is what a real node would be now (nodes.py)
            self.kube.patch("v1", "Node", node.name, {
                "metadata": {"resourceVersion": version},
                "spec": {"taints": [t for t in taints if t.get("key") != DEVICES_PENDING.key]}})

    def _health_check(self, node: KubeObject, model: GpuModel, gpus: int, replicas: int,
                      mig_gpus: tuple[dict[str, int] | None, ...] | None, strategy: str, plugin_pod: KubeObject,
                      loaded: dict[str, Any], want_annotations: dict[str, str | None]) -> dict[str, int]:
        """The device plugin's health check (xid.py, k8s-device-plugin internal/rm/health.go) on the node's XID
        faults: the devices it marks Unhealthy stay so for as long as its pod runs (they are kept in LOADED, which
        a new pod starts afresh), and the kubelet leaves them out of allocatable: per resource, how many."""
        devices: list[SimDevice] = []
        for index in range(gpus):
            counts = mig_gpus[index] if mig_gpus is not None and index < len(mig_gpus) else None
            if counts is None or model.mig is None:
                devices.append(SimDevice(index, L.GPU_RESOURCE))
                continue
            for p in place(layout_from_counts(f"gpu-{index}", counts).profiles, model):
                devices.append(SimDevice(index, L.GPU_RESOURCE if strategy == "single" else resource_name(p.profile),
                                         instance_id(model.mig.memory_slots, p.start, p.width)))
        faults, bad = parse_faults(node.annotations.get(FAULT_XID))
        env = {str(e.get("name")): str(e.get("value") or "") for c in plugin_pod.spec.get("containers") or []
               if c.get("name") == L.DEVICE_PLUGIN_APP for e in c.get("env") or []}
        marked, decisions = mark_unhealthy(faults, devices, env)
        decisions |= {entry: "ignored: not <gpu index>[/<gpu instance id>]:<xid>" for entry in bad}
        for fault, decision in sorted(decisions.items()):
            if json.loads(node.annotations.get(XID_DECISIONS) or "{}").get(fault) != decision:
                log.info("device plugin on %s: XID fault %s: %s", node.name, fault, decision)
        kept = sorted(set(loaded.get("unhealthy") or []) | marked)  # no way back from Unhealthy (server.go)
        if kept != (loaded.get("unhealthy") or []):
            loaded["unhealthy"] = kept
            want_annotations[LOADED] = json.dumps(loaded, sort_keys=True)
        text = json.dumps(decisions, sort_keys=True) if decisions else None
        if text != node.annotations.get(XID_DECISIONS):
            want_annotations[XID_DECISIONS] = text
        unhealthy: dict[str, int] = {}
        for device in devices:
            if device.key in kept:
                unhealthy[device.resource] = unhealthy.get(device.resource, 0) + \
                    (replicas if device.instance is None else 1)
        return unhealthy

    def _running_plugin_pod(self, node: str) -> KubeObject | None:
        """The device-plugin pod Running on `node` now. The pass's pod list was read before its slow config
        loads: a node served before and without a pod in that list may have its DaemonSet's replacement pod
        running by now, and zeroing its GPUs from the stale list would land after the rollout completed (a
        kubelet reports the new plugin's devices, not the gap it no longer has)."""
        pods = self.kube.list("v1", "Pod", self.namespace, labels=f"app={L.DEVICE_PLUGIN_APP}",
                              fields=f"spec.nodeName={node}")
        return next((p for p in pods if p.status.get("phase") == "Running" and not p.deleting), None)

    def _mig_apply(self, model: GpuModel, text: str, name: str, gpus: int) -> MigApplied:
        """mig-parted's apply of config `name` on this node's GPUs, asked once per distinct input."""
        def apply() -> MigApplied:
            answer = apply_mig_config(self.upstreamcheck, text, name, model, gpus)
            if answer.error is not None:
                log.info("MIG config %s on %s x %d: %s", name, model.name, gpus, answer.error)
            return answer

        return self._remembered(self.mig_answers, (text, name, model.name, gpus), apply)

    def _remembered(self, answers: dict[Key, Answer], key: Key, ask: Callable[[], Answer]) -> Answer:
        """`answers[key]`, asked once (under the lock: a pass reconciles WORKERS nodes at a time); at most 256
        answers are kept."""
        with self.answers_lock:
            if key not in answers:
                if len(answers) > 256:
                    answers.clear()
                answers[key] = ask()
            return answers[key]

    def _patch_node(self, node: KubeObject, labels: dict[str, str | None], annotations: dict[str, str | None],
                    resources: dict[str, int], unhealthy: dict[str, int] | None = None) -> str:
        """Write what differs; the node's resourceVersion after the writes. `unhealthy` devices are in capacity
        and not in allocatable, as the kubelet counts them (Kubernetes pkg/kubelet/cm/devicemanager/manager.go
        GetCapacity: capacity = every device a plugin lists, allocatable = its Healthy ones)."""
        # Every write is conditional on the node as read (resourceVersion): what was decided from a node
        # that has changed since (gpuctl relabelled it meanwhile) must not land, as the real operator's do not
        # (gpu-operator v25 controllers/state_manager.go labelGPUNodes: Client.Update of the node it listed,
        # which the API server refuses with a Conflict when the node is stale; the reconcile is retried).
        current_labels = node.labels
        version = node.resource_version
        meta: dict[str, Any] = {}
        if label_diff := {k: v for k, v in labels.items() if current_labels.get(k) != v}:
            meta["labels"] = label_diff
        if annotations:
            meta["annotations"] = annotations
        if meta:
            meta["resourceVersion"] = version
            version = self.kube.patch("v1", "Node", node.name, {"metadata": meta}).resource_version
        allocatable = node.status.get("allocatable") or {}
        capacity = node.status.get("capacity") or {}
        want = {k: str(v) for k, v in resources.items()}
        want_free = {k: str(max(0, v - (unhealthy or {}).get(k, 0))) for k, v in resources.items()}
        listed = {*allocatable, *capacity}
        stale = {k: None for k in listed if GPU_REQUEST.match(k) and k not in want}
        if stale or any(allocatable.get(k) != want_free[k] or capacity.get(k) != v for k, v in want.items()):
            version = self.kube.patch("v1", "Node", node.name, {
                "metadata": {"resourceVersion": version},
                "status": {"capacity": {**want, **stale}, "allocatable": {**want_free, **stale}}},
                subresource="status").resource_version
        return str(version)

    # -- the CUDA runtime ------------------------------------------------------------------

    def _run_cuda_samples(self, device_plugin: bool) -> None:
        """Finish the CUDA sample pods that got a GPU: from a ResourceClaim allocated on their node (the DRA
        driver prepared it), or, with the GPU Operator (`device_plugin`), from nvidia.com/gpu limits."""
        for pod in self.running_pods.items():
            node = pod.spec.get("nodeName")
            if EXIT_CODE in pod.annotations or not node:
                continue
            container = pod.spec["containers"][0]
            match = CUDA_SAMPLE.match(container.get("image") or "")
            if match is None:
                continue  # not a CUDA sample: it keeps running, as it would on a real GPU
            claims = pod_claim_names(pod, container["name"])
            if claims:
                got_gpu = any(self._allocated_on(str(pod.namespace), c, node) for c in claims)
            else:
                limits = (container.get("resources") or {}).get("limits") or {}
                got_gpu = device_plugin and any(GPU_REQUEST.match(k) for k in limits)
            if not got_gpu:
                continue  # no GPU: a CUDA sample would keep failing; the sim leaves it running
            needed = (int(match[1]), int(match[2]))
            if needed <= CUDA_VERSION:
                lines, code = PASSED_LOG, 0
            else:
                lines, code = [f"Failed to allocate device vector A (error code CUDA driver version is insufficient "
                               f"for CUDA runtime version: needs {needed[0]}.{needed[1]}, driver supports "
                               f"{CUDA_VERSION[0]}.{CUDA_VERSION[1]})!"], 1
            self._finish(pod, container["name"], lines, code)

    def _allocated_on(self, namespace: str, claim: str, node: str) -> bool:
        """True when ResourceClaim `claim` holds a device of the GPU driver on `node` (pool = node name)."""
        found = self.kube.get_or_none(DRA_API_VERSION, "ResourceClaim", claim, namespace)
        results = found.at("status", "allocation", "devices", "results", default=[]) if found is not None else []
        return any(r.get("driver") == DRIVER and r.get("pool") == node for r in results)

    def _finish(self, pod: KubeObject, container: str, lines: list[str], code: int) -> None:
        """Write the container log, serve it through a kwok Logs object, and report the exit code."""
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.logs.mkdir(parents=True, exist_ok=True)
        logfile = self.logs / f"{pod.namespace}_{pod.name}_{pod.uid}.log"
        logfile.write_text("".join(f"{now} stdout F {line}\n" for line in lines))
        body = {"apiVersion": KWOK_LOGS[0], "kind": KWOK_LOGS[1],
                "metadata": {"name": pod.name, "namespace": pod.namespace},
                "spec": {"logs": [{"containers": [container], "logsFile": str(logfile)}]}}
        try:
            self.kube.create(body)
        except KubeConflict:  # a Logs object left from a pod of the same name
            self.kube.patch(*KWOK_LOGS, pod.name, body, pod.namespace)
        # The outcome itself is kwok's to give: its Stage completes the pod from this annotation.
        self.kube.patch("v1", "Pod", pod.name, {"metadata": {"annotations": {EXIT_CODE: str(code)}}}, pod.namespace)


def pod_claim_names(pod: KubeObject, container: str) -> list[str]:
    """The ResourceClaims that give `container` of `pod` its devices: those of the pod's spec.resourceClaims
    the container lists in resources.claims (by name, or the claim made from a template as
    status.resourceClaimStatuses names it), and the claim the scheduler made for extended resources the DRA
    driver serves (status.extendedResourceClaimStatus, KEP-5004)."""
    spec = next(c for c in pod.spec.get("containers") or [] if c.get("name") == container)
    wanted = {c.get("name") for c in (spec.get("resources") or {}).get("claims") or []}
    made = {s.get("name"): s.get("resourceClaimName") for s in pod.status.get("resourceClaimStatuses") or []}
    names = [c.get("resourceClaimName") or made.get(c.get("name"))
             for c in pod.spec.get("resourceClaims") or [] if c.get("name") in wanted]
    extended = pod.status.get("extendedResourceClaimStatus")
    if extended and any(r.get("containerName") == container for r in extended.get("requestMappings") or []):
        names.append(extended.get("resourceClaimName"))
    return [n for n in names if n]


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
    parser.add_argument("--stamp", default="", help="the gpuctl code it runs (kwok.operator_stamp); gpuctl reads it "
                        "from the command line and restarts an operator of other code")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    supervisor = Supervisor.for_kubeconfig(args.kubeconfig, Kube.connect(args.kubeconfig))
    if supervisor is None:
        log.warning("%s is not a sim cluster's kubeconfig: its control plane is not supervised", args.kubeconfig)
    else:
        supervisor.start()
    operator = SimOperator(args.kubeconfig, args.logs)
    while True:
        started = time.monotonic()
        try:
            operator.reconcile()
        except Exception:
            log.exception("reconcile failed")
        time.sleep(max(0.0, POLL_S - (time.monotonic() - started)))


if __name__ == "__main__":
    main()
