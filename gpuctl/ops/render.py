"""`gpuctl render`: every Kubernetes object `apply` writes for a spec, and the values of its Helm releases, for GitOps.

Each object comes from the function apply writes it with (one renderer per object): the GPU Operator's namespace
and gpuctl's ConfigMaps (kube.objects, ops.converge), the Karpenter node class, NodePools and NodeOverlays
(providers.karpenter_objects), the GPU fence and GPU tolerations policies (tenancy.fence, tenancy.tolerations),
each tenant's Namespace, ResourceQuota, RoleBinding, ResourceClaimTemplates (DRA) and Kueue flavors and queues
(tenancy.tenants, tenant_claims, queues). What apply derives from the cluster is derived here from the spec's
own node groups: the Kueue flavors and the DRA templates from the nodes those groups make, the tolerations
policy from their taints. Nodes are the cloud's (taints and labels go through each node group), and the
ClusterPolicy of an operator gpuctl did not install depends on that cluster: neither is rendered.

stdout carries manifests only (`gpuctl render -f spec | kubectl apply -f -`); Helm values go to files under
--out, or to stdout one release at a time with --helm-values RELEASE (`... | helm upgrade --install ... -f -`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpuctl.kube.objects import config_map_manifest, namespace_manifest
from gpuctl.model.charts import helm_install_command, published
from gpuctl.model.dra import mig_device_class, mig_profiles_of
from gpuctl.model.spec import PlatformSpec
from gpuctl.ops.metrics.dashboard import FILE as DASHBOARD_FILE
from gpuctl.ops.metrics.dashboard import dashboard_text
from gpuctl.ops.platform.gpu_config import gpu_config_data
from gpuctl.ops.tenancy.fence import fence_manifests
from gpuctl.ops.tenancy.queues import group_shape, queue_manifests
from gpuctl.ops.tenancy.tenant_claims import claim_templates
from gpuctl.ops.tenancy.tenants import tenant_manifests
from gpuctl.ops.tenancy.tolerations import policy_manifests
from gpuctl.providers import (
    capabilities_of,
    karpenter_objects,  # their renderers load only for a spec with Karpenter
)
from gpuctl.stack.dra_driver import dra_release
from gpuctl.stack.kueue import kueue_release, mig_class_profiles
from gpuctl.stack.releases import nfd_release, operator_release
from gpuctl.stack.values import NAMESPACE
from gpuctl.util.errors import ToolError, UsageError
from gpuctl.util.output import info
from gpuctl.util.paths import check_target

if TYPE_CHECKING:
    from gpuctl.stack.helm import Release

VALUES_FLAG = "--helm-values"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (configs inside ConfigMaps) as readable literal blocks."""


_Dumper.add_representer(str, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))


def _dump(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False)


def manifests(spec: PlatformSpec) -> dict[str, dict[str, Any]]:
    """File name -> Kubernetes object, in the order `kubectl apply -f` must create them (a namespace before its
    objects, a policy before its binding, flavors before the queues that name them)."""
    files: dict[str, dict[str, Any]] = {f"00-namespace-{NAMESPACE}.yaml": namespace_manifest(NAMESPACE)}
    for name, data in gpu_config_data(spec, {}).items():
        files[f"10-configmap-{name}.yaml"] = config_map_manifest(NAMESPACE, name, data)

    for obj in karpenter_objects(spec):
        files[f"12-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"] = obj
    if spec.tenants:  # in force before a namespace is a tenant's
        policies = [(15, d) for d in fence_manifests()] + [(16, d) for d in policy_manifests(spec.every_group)]
        for order, doc in policies:
            files[f"{order}-{doc['kind'].lower()}-{doc['metadata']['name']}.yaml"] = doc
    dra = spec.stack.dra_driver  # a tenant's quota and templates: wherever the driver serves some group
    models = list({g.spec.gpu.name: g.spec.gpu for g in spec.every_group}.values())
    for device_class in [mig_device_class(p) for p in mig_profiles_of(models)] if spec.stack.dra_driver else []:
        files[f"14-deviceclass-{device_class['metadata']['name']}.yaml"] = device_class
    shapes = [group_shape(g, spec.stack.mig_strategy) for g in spec.every_group]
    for tenant in spec.tenants:
        for kind, body in tenant_manifests(tenant, dra):
            order = {"namespace": 20, "quota": 21, "binding": 22}[kind]
            files[f"{order}-{kind}-{tenant.name}.yaml"] = body
        for template in claim_templates(tenant, models) if dra else []:
            files[f"23-resourceclaimtemplate-{tenant.name}-{template['metadata']['name']}.yaml"] = template
        for doc in queue_manifests(tenant, shapes, dra) if spec.kueue else []:
            meta = doc["metadata"]
            order = {"ResourceFlavor": 18, "ClusterQueue": 24, "LocalQueue": 25}[doc["kind"]]
            where = f"{meta['namespace']}-" if "namespace" in meta else ""
            files[f"{order}-{doc['kind'].lower()}-{where}{meta['name']}.yaml"] = doc  # a shared flavor: once
    return dict(sorted(files.items(), key=lambda item: int(item[0].split("-", 1)[0])))


def helm_releases(spec: PlatformSpec) -> dict[str, Release]:
    """Release name -> the Helm release apply installs for the spec (NFD where standalone, the GPU Operator, the DRA
    driver in DRA mode, Kueue where the cloud does not run it itself), in install order."""
    releases = [nfd_release(spec.stack)] if spec.stack.nfd == "standalone" else []
    releases.append(operator_release(spec.stack))
    if spec.stack.dra_driver:  # DRA mode, or node groups DRA serves (a group's dra: true)
        releases.append(dra_release(spec.stack))
    if capabilities_of(spec.cloud).kueue_chart(spec.kueue):
        releases.append(kueue_release(spec.stack.charts, profiles=mig_class_profiles(spec)))
    return {r.name: r for r in releases}


def values_file(release: str) -> str:
    return f"{release}.values.yaml"


def values_text(release: Release, charts: str) -> str:
    """The release's values, headed by the chart, version and repository a reader fetches it from and the helm
    command that installs it (`charts`: the spec's source, named where apply installs a local copy)."""
    chart = published(release.chart)
    where = f"repo {chart.repo}" if chart.repo else "OCI"
    install = helm_install_command(release.name, release.namespace, release.chart, values_file(release.name))
    header = [f"# Helm values of release {release.name} in namespace {release.namespace}, rendered by gpuctl",
              f"# chart: {chart.ref}  version: {chart.version}  ({where})", f"# install: {install}"]
    if chart != release.chart:  # the spec's charts name no repository: say what apply installs instead
        copy = "gpuctl's bundled stand-in" if charts == "bundled" else "a local copy"
        source = "bundled" if charts == "bundled" else "a directory"
        header.append(f"# apply installs {copy} of this chart (spec charts: {source}); it takes the same values")
    return "\n".join(header) + "\n" + _dump(release.values)


def manifest_stream(spec: PlatformSpec) -> str:
    """The manifests as one YAML stream, each document headed by the file `--out` writes it to."""
    return "".join(f"---\n# Source: manifests/{name}\n{_dump(obj)}" for name, obj in manifests(spec).items())


def render(spec: PlatformSpec, out: Path | None, field: str = "--out",
           helm_values: str | None = None) -> list[Path] | str:
    """Write manifests/, helm/<release>.values.yaml and grafana/ (the dashboard of gpuctl.ops.metrics.dashboard) under
    `out`; else return the manifests as one stream (`kubectl apply -f -` takes it), or with `helm_values` the
    values of that one release. Every file is rendered, and every path it goes to judged (paths.check_target,
    errors naming `field`), before the first is written."""
    releases = helm_releases(spec)
    if helm_values is not None:
        if out is not None:
            raise UsageError(VALUES_FLAG, "prints to stdout, and --out writes every values file",
                             "drop one of them")
        if helm_values not in releases:
            raise UsageError(VALUES_FLAG, f"no Helm release {helm_values!r} in this spec",
                             f"use one of: {', '.join(releases)}")
        return values_text(releases[helm_values], spec.stack.charts)
    if out is None:
        return manifest_stream(spec)

    files = {out / "manifests" / name: _dump(obj) for name, obj in manifests(spec).items()}
    files.update({out / "helm" / values_file(name): values_text(r, spec.stack.charts) for name, r in releases.items()})
    try:
        files[out / "grafana" / DASHBOARD_FILE] = dashboard_text(spec)
    except ToolError as exc:  # Python 3.10: no Grafana SDK; the manifests are what apply needs
        info(f"warning: {exc.one_line()}: grafana/{DASHBOARD_FILE} not written")
    check_target(out, field, directory=True)
    for path in files:
        check_target(path, field)
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return list(files)
