"""Kueue as a Helm release (kubernetes-sigs/kueue chart v0.19.2, namespace kueue-system), for clusters
whose tenants queue for GPUs (`--kueue`, spec `kueue.enabled`). The sim runs Kueue's controller itself
instead (providers/sim/kueue.py), with the same settings.

The chart takes the manager's whole Configuration as one string (values
`managerConfig.controllerManagerConfigYaml`); gpuctl's is the chart's default (charts/kueue/values.yaml
at v0.19.2) with one addition: quota is checked only for the resources a ClusterQueue covers
(`resources.quotaCheckStrategy: IgnoreUndeclared`; the default BlockUndeclared never admits a job that
requests anything a queue does not cover): gpuctl's queues cover GPUs, so a job's CPU and memory requests
stay the scheduler's business.

Also for DRA (NVIDIA's DRA driver, gpuctl/kube/dra.py), `resources.deviceClassMappings` maps the driver's
DeviceClasses gpu.nvidia.com and mig.nvidia.com to the resources gpuctl's queues give quota on
(queues.py: nvidia.com/gpu and mig.nvidia.com.deviceclass.resource.k8s.io/devices), counted in devices, and
gpuctl's class of each MIG profile of the cluster's GPU models (stack/dra_classes.py) to the profile's
`nvidia.com/mig-<profile>`, which tenants' MIG templates claim from (model/dra.py device_class_mappings). The
chart restarts the manager when its Configuration changes (v0.19.2 charts/kueue/templates/manager/manager.yaml:
the config-checksum annotation), as a spec with another GPU model changes the mappings.
Kueue v0.19.2 reads them at start-up (cmd/kueue/main.go: only with its KueueDRAIntegration feature, beta
and on by default since v0.18, pkg/features/kube_features.go); a workload whose ResourceClaimTemplate names
an unmapped class is never admitted (pkg/dra/claims.go GetResourceRequestsForResourceClaimTemplates).
Mapping a class that does not exist costs nothing, so the mapping is always there: a cluster may get the
driver after Kueue. gpuctl turns on no Kueue feature gate: the ResourceClaimTemplate path
(KueueDRAIntegration) and the extended resource path (KueueDRAIntegrationExtendedResource, beta and on by
default since v0.19) are what v0.19.2 ships.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from gpuctl.model.charts import KUEUE, chart_ref
from gpuctl.model.dra import device_class_mappings, mig_profiles_of
from gpuctl.model.spec import PlatformSpec
from gpuctl.stack.helm import Release

NAMESPACE = "kueue-system"
RELEASE = "kueue"
FRAMEWORKS = ("batch/job", "kubeflow.org/mpijob", "ray.io/rayjob", "ray.io/rayservice", "ray.io/raycluster",
              "jobset.x-k8s.io/jobset", "workload.codeflare.dev/appwrapper", "trainer.kubeflow.org/trainjob", "pod",
              "deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset")


def manager_config(profiles: Iterable[str] = ()) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) as gpuctl runs it; `profiles`: the MIG profiles
    of gpuctl's DeviceClasses (DRA: mig_profiles_of the cluster's models), each mapped to its resource."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {"groupKindConcurrency": {"Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 10,
                                                "LocalQueue.kueue.x-k8s.io": 5, "ClusterQueue.kueue.x-k8s.io": 5,
                                                "ResourceFlavor.kueue.x-k8s.io": 1}},
        "clientConnection": {"qps": 300, "burst": 500},
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "resources": {"quotaCheckStrategy": "IgnoreUndeclared", "deviceClassMappings": device_class_mappings(profiles)},
    }


def mig_class_profiles(spec: PlatformSpec) -> list[str]:
    """The MIG profiles of gpuctl's DeviceClasses for `spec` (the step apply-mig-device-classes), which Kueue maps:
    none without the DRA driver."""
    return mig_profiles_of(g.spec.gpu for g in spec.every_group) if spec.stack.dra_driver else []


def kueue_release(charts: str, field: str = "--charts", profiles: Iterable[str] = ()) -> Release:
    config = yaml.safe_dump(manager_config(profiles), sort_keys=False)
    values = {"managerConfig": {"controllerManagerConfigYaml": config}}
    return Release(RELEASE, NAMESPACE, chart_ref(KUEUE, charts, field), values)
