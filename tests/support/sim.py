"""The sim, for the tests: its clusters and their daemons (kwok, the operator, Kueue, Prometheus, DCGM exporter,
Karpenter), the DRA kubelet plugin's slices, and the sim provider itself."""

from __future__ import annotations

from gpuctl.providers.sim.provider import SimProvider
from gpuctl.simulator import dra
from gpuctl.simulator.dcgm_exporter import dcgm_exporter_address, get_dcgm_exporter_pid
from gpuctl.simulator.karpenter import get_karpenter_pid, instance_types
from gpuctl.simulator.kueue import daemon, ensure_kueue, get_kueue_pid, kueue_crds_dir, start_kueue, stop_kueue
from gpuctl.simulator.kwok import COMPONENTS, KwokCluster, cluster_names, workdir
from gpuctl.simulator.nodes import SYSTEM_NODE
from gpuctl.simulator.operator import CONFIG_RACE, LOADED, SimOperator
from gpuctl.simulator.procs import cluster_procs, operator_stamp
from gpuctl.simulator.prometheus import ensure_monitoring, get_prometheus_pid, monitoring_url
from gpuctl.simulator.supervisor import SUPERVISED, component_pid

__all__ = ["COMPONENTS", "CONFIG_RACE", "LOADED", "SUPERVISED", "SYSTEM_NODE", "KwokCluster", "SimOperator",
           "SimProvider", "cluster_names", "cluster_procs", "component_pid", "daemon", "dcgm_exporter_address",
           "dra", "ensure_kueue", "ensure_monitoring", "get_dcgm_exporter_pid", "get_karpenter_pid",
           "get_kueue_pid", "get_prometheus_pid", "instance_types", "kueue_crds_dir", "monitoring_url",
           "operator_stamp", "start_kueue", "stop_kueue", "workdir"]
