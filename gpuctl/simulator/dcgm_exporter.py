"""The sim's DCGM exporter: what NVIDIA's dcgm-exporter (4.6.0-4.8.3, the image GPU Operator v26.7.0 runs on
every GPU node) serves, for every GPU and MIG GPU instance of every GPU node of a sim cluster, from one process
beside the cluster. The load comes from sim-only pod annotations (dcgm_series.UTILIZATION_ANNOTATION,
MEMORY_ANNOTATION); docs/research/dcgm-exporter.md has the upstream facts, dcgm_series.py the rules.

It runs as a detached process of this machine like the sim's Kueue and Karpenter (daemons.py): pid file and
command line under the cluster's dir, a free loopback port, ready once /metrics answers, stopped with the cluster
(procs.cluster_procs). Every second it lists the nodes, running pods and ResourceClaims through the cluster's
kubeconfig; each scrape serves the latest list. Exposition by prometheus_client (text format 0.0.4, as
dcgm-exporter's expfmt MetricFamilyToText), families sorted by name and series by labels, as render_metrics.go
Render sorts them.

Run: python -m gpuctl.simulator.dcgm_exporter --kubeconfig FILE --listen 127.0.0.1:PORT [--stamp STAMP]
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuctl.kube.errors import KubeNotFound
from gpuctl.kube.gpu_nodes import model_of
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.model.dra import API_VERSION as DRA_API_VERSION
from gpuctl.model.mig import MigLayout, layout_from_counts, parse_mig_parted_config
from gpuctl.simulator.daemons import Daemon, free_port, wait_ready
from gpuctl.simulator.dcgm_series import (
    FAMILIES,
    Assignment,
    Claim,
    Device,
    Sample,
    assign,
    claimed_slots,
    node_devices,
    number,
    pod_load,
    render_samples,
)
from gpuctl.simulator.dra import gpu_uuid, node_layout, pci_address
from gpuctl.simulator.kwok import KwokCluster
from gpuctl.simulator.nodes import DRIVER_VERSION
from gpuctl.simulator.operands import CLUSTER_POLICY, Policy, operator_namespace
from gpuctl.simulator.procs import (
    DCGM_EXPORTER_MODULE,
    code_stamp,
    flag,
    is_dcgm_exporter,
    read_argv,
)
from gpuctl.simulator.xid import FAULT_XID, last_xid, parse_faults
from gpuctl.util.errors import ClusterError, UsageError
from gpuctl.util.lazy_import import LazyImport

if TYPE_CHECKING:
    import prometheus_client
    from prometheus_client import metrics_core
else:  # only in the exporter's own process (main)
    prometheus_client = LazyImport("prometheus_client", "prometheus-client")
    metrics_core = LazyImport("prometheus_client.metrics_core", "prometheus-client")

log = logging.getLogger("gpuctl.sim.dcgm-exporter")

REFRESH_S = 1.0
READY_TIMEOUT_S = 60.0
GPU_REQUEST = re.compile(r"^nvidia\.com/(gpu|mig-.+)$")  # what the device plugin serves (kubernetes.go: the pod
# mapper keeps nvidia.com/gpu and nvidia.com/mig-* devices, iterateGPUDevices)


# -- the process --------------------------------------------------------------------------------------


def _claims(pod: dict[str, Any]) -> list[Claim]:
    """A running pod's containers that hold GPUs through the device plugin (an extended resource's request equals
    its limit); the pod as JSON. A container's extended resource that DRA serves (the scheduler's claim for it,
    named in the pod's status.extendedResourceClaimStatus.requestMappings) gets no device-plugin device: the
    kubelet skips it (Kubernetes v1.37.2 pkg/kubelet/cm/devicemanager/manager.go isDRAExtendedResource), so
    the exporter sees only the claim's device (claimed_slots)."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    if status.get("phase") != "Running" or not spec.get("nodeName"):
        return []
    by_dra = {(m.get("containerName"), m.get("resourceName"))
              for m in (status.get("extendedResourceClaimStatus") or {}).get("requestMappings") or []}
    util, memory = pod_load(pod)
    claims = []
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        for resource, quantity in sorted(wanted.items()):
            if (container["name"], resource) in by_dra:
                continue
            if GPU_REQUEST.match(resource) and (count := int(number(str(quantity)))) > 0:
                claims.append(Claim(meta["uid"], meta["namespace"], meta["name"], container["name"], resource, count,
                                    util, memory, meta.get("creationTimestamp") or ""))
    return claims


class Exporter:
    """What the exporter serves: a refresh lists the cluster, a scrape reads the latest samples."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kube = Kube.connect(kubeconfig)
        self.assignment: Assignment = {}
        self.samples: list[Sample] = []
        self.lock = threading.Lock()

    def _mig_configs(self) -> dict[str, dict[str, int] | None]:
        """The mig-parted configs the MIG manager applies: the ClusterPolicy's migManager.config ConfigMap in the
        operator's namespace, as the simulated operator reads it (operator.py _reconcile_operator)."""
        try:
            items = self.kube.list(*CLUSTER_POLICY)
        except KubeNotFound:
            return {}
        if not items:
            return {}
        first = sorted(items, key=lambda i: i["metadata"]["creationTimestamp"])[0]
        name, _ = Policy(first.name, first.uid, first.spec).mig_config
        found = self.kube.get_or_none("v1", "ConfigMap", name, operator_namespace(self.kube)) if name else None
        try:
            data = (found.get("data") if found else None) or {}
            return parse_mig_parted_config(data.get("config.yaml", "") or "{}")
        except ValueError:
            return {}

    def _layout(self, labels: dict[str, str], configs: dict[str, dict[str, int] | None] | None,
                model: Any) -> tuple[MigLayout | None, dict[str, dict[str, int] | None] | None]:
        """The MIG layout applied to a node's GPUs: its nvidia.com/mig.config once the MIG manager answered
        success, read from the operator's mig-parted ConfigMap, else from the name gpuctl gave it."""
        name = labels.get(L.MIG_CONFIG)
        if model.mig is None or not name or labels.get(L.MIG_STATE) != "success":
            return None, configs
        if configs is None:
            configs = self._mig_configs()
        if name in configs:
            return layout_from_counts(name, configs[name]), configs
        try:
            return node_layout(labels, model), configs
        except ValueError as exc:
            log.warning("%s", exc)
            return None, configs

    def refresh(self) -> None:
        # lists as JSON: a big cluster's pods, every second
        nodes = self.kube.list("v1", "Node", what="listing nodes")
        pods = self.kube.list("v1", "Pod", fields="status.phase=Running", what="listing running pods")
        devices: list[Device] = []
        configs: dict[str, dict[str, int] | None] | None = None
        for node in sorted(nodes, key=lambda n: n.name):
            name, labels = node.name, node.labels
            model = model_of(labels)
            count = labels.get(L.GPUS_PER_NODE) or labels.get(L.GPU_COUNT) or "0"
            if model is None or not count.isdigit() or int(count) == 0:
                continue
            layout, configs = self._layout(labels, configs, model)
            try:
                found = node_devices(name, model, int(count), labels, layout, gpu_uuid, pci_address)
            except (UsageError, KeyError) as exc:  # a layout the GPU cannot hold: the MIG manager would fail it
                log.warning("node %s: MIG config %s: %s", name, labels.get(L.MIG_CONFIG), exc)
                found = node_devices(name, model, int(count), labels, None, gpu_uuid, pci_address)
            faults, _ = parse_faults(node.annotations.get(FAULT_XID))
            devices += [dataclasses.replace(d, xid=last_xid(faults, d.index, d.instance_id if d.profile else None))
                        if faults else d for d in found]
        claims: dict[str, list[Claim]] = {}
        for pod in pods:
            claims.setdefault(pod["spec"].get("nodeName") or "", []).extend(_claims(pod))
        assignment: Assignment = {}
        for node_name in {d.node for d in devices}:
            assignment |= assign([d for d in devices if d.node == node_name], claims.get(node_name, []),
                                 self.assignment)
        all_claims = [c for node_name in sorted({d.node for d in devices}) for c in claims.get(node_name, [])]
        by_uid = {p["metadata"]["uid"]: p for p in pods if p["spec"].get("nodeName")}
        dra_claims, dra_assignment = claimed_slots(self._resource_claims(), by_uid, devices)
        samples = render_samples(devices, all_claims + dra_claims, assignment | dra_assignment, DRIVER_VERSION)
        with self.lock:
            self.assignment, self.samples = assignment, samples

    def _resource_claims(self) -> list[KubeObject]:
        """Every ResourceClaim, as JSON; none where the cluster serves no resource.k8s.io/v1."""
        try:
            return self.kube.list(DRA_API_VERSION, "ResourceClaim", what="listing ResourceClaims")
        except KubeNotFound:
            return []

    def collect(self) -> Iterator[Any]:
        """prometheus_client's Collector protocol: one gauge family per FAMILIES entry that has series."""
        with self.lock:
            samples = list(self.samples)
        families = {f.name: metrics_core.Metric(f.name, f.help, "gauge") for f in FAMILIES}
        for sample in sorted(samples, key=lambda s: sorted(s.labels.items())):
            families[sample.family].add_sample(sample.family, sample.labels, sample.value)
        yield from (families[name] for name in sorted(families) if families[name].samples)


def main() -> None:
    parser = argparse.ArgumentParser(description="gpuctl's simulated DCGM exporter for one sim cluster")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--listen", required=True, help="HOST:PORT to serve /metrics on")
    parser.add_argument("--stamp", default="", help="the gpuctl code it runs (procs.code_stamp)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    exporter = Exporter(args.kubeconfig)
    while True:  # serve only once there is something true to serve: ready means listed
        try:
            exporter.refresh()
            break
        except Exception:
            log.exception("listing the cluster failed; retrying")
            time.sleep(REFRESH_S)
    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    host, _, port = args.listen.rpartition(":")
    prometheus_client.start_http_server(int(port), addr=host, registry=registry)
    log.info("serving http://%s/metrics", args.listen)
    took = 0.0
    while True:
        # a big cluster's lists cost seconds: the refresh waits twice as long as it took (a third of a core)
        time.sleep(max(REFRESH_S, 2 * took))
        started = time.monotonic()
        try:
            exporter.refresh()
        except Exception:
            log.exception("listing the cluster failed; serving the last list")
        took = time.monotonic() - started


# -- run it beside a sim cluster ------------------------------------------------------------------------


def log_path(cluster: str) -> Path:
    return KwokCluster(cluster).dir / "logs" / "dcgm-exporter.log"


def _daemon(cluster: str) -> Daemon:
    kubeconfig = KwokCluster(cluster).kubeconfig_path
    return Daemon(KwokCluster(cluster).dir / "monitoring" / "dcgm-exporter.pid", log_path(cluster),
                  lambda argv: is_dcgm_exporter(argv, kubeconfig))


def get_dcgm_exporter_pid(cluster: str) -> int | None:
    return _daemon(cluster).pid()


def dcgm_exporter_address(cluster: str) -> str | None:
    """HOST:PORT of the cluster's running exporter; None when it does not run."""
    pid = get_dcgm_exporter_pid(cluster)
    return flag(read_argv(pid) or (), "--listen") if pid is not None else None


def ensure_dcgm_exporter(cluster: str, timeout: float = READY_TIMEOUT_S) -> str:
    """The sim's DCGM exporter of a sim cluster, started unless one of the current code runs; its HOST:PORT once
    /metrics answers. Takes the cluster's lock."""
    kwok = KwokCluster(cluster)
    stamp = code_stamp(DCGM_EXPORTER_MODULE)
    with kwok.lock():
        if not kwok.complete:
            raise ClusterError(f"no sim cluster {cluster!r}",
                               f"create it: gpuctl cluster create --cloud sim --name {cluster}")
        daemon = _daemon(cluster)
        # the same code under the same interpreter, however it was spelled (.venv/bin/python or python3)
        current = daemon.keep(lambda p: flag(p.argv, "--stamp") == stamp
                              and Path(p.argv[0]).resolve() == Path(sys.executable).resolve())
        if current is None:
            argv = [sys.executable, "-m", DCGM_EXPORTER_MODULE, "--kubeconfig", str(kwok.kubeconfig_path),
                    "--listen", f"127.0.0.1:{free_port()}", "--stamp", stamp]
            daemon.start(argv, {k: v for k, v in os.environ.items() if k != "KUBECONFIG"})  # --kubeconfig names it
    address = dcgm_exporter_address(cluster)
    if address is None:
        raise ClusterError(f"the DCGM exporter of sim cluster {cluster!r} exited at once",
                           f"its log is {log_path(cluster)}")
    if current is None:  # (a running one was ready once: a big cluster's /metrics costs a second to read)
        wait_ready(f"http://{address}/metrics", lambda: get_dcgm_exporter_pid(cluster) is not None,
                   f"the DCGM exporter of sim cluster {cluster!r}", log_path(cluster), timeout)
    return address


def stop_dcgm_exporter(cluster: str) -> None:
    """Stop the cluster's exporter, whether or not its pid file names it (found through /proc)."""
    _daemon(cluster).stop()


if __name__ == "__main__":
    main()
