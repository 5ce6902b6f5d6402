"""`gpuctl render`: every Kubernetes manifest and Helm values file of a spec, for GitOps.

The same functions build these objects for `apply`, so what is rendered is what apply writes.
Nodes are the cloud's (taints and labels go through each node group), so they are not rendered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpuctl.kube.objects import MANAGED
from gpuctl.model.spec import PlatformSpec
from gpuctl.ops.converge import gpu_config_data
from gpuctl.ops.dashboard import FILE as DASHBOARD_FILE
from gpuctl.ops.dashboard import dashboard_text
from gpuctl.ops.tenancy.fence import fence_manifests
from gpuctl.ops.tenancy.tenant_claims import claim_templates
from gpuctl.ops.tenancy.tenants import tenant_manifests
from gpuctl.ops.tenancy.tolerations import policy_manifests
from gpuctl.stack.dra_driver import dra_release
from gpuctl.stack.releases import nfd_release, operator_release
from gpuctl.stack.values import NAMESPACE
from gpuctl.util.errors import ToolError
from gpuctl.util.output import info


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (configs inside ConfigMaps) as readable literal blocks."""


_Dumper.add_representer(str, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))


def _dump(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False)


def manifests(spec: PlatformSpec) -> dict[str, dict[str, Any]]:
    """File name -> Kubernetes object, in apply order."""
    files: dict[str, dict[str, Any]] = {
        f"00-namespace-{NAMESPACE}.yaml": {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": NAMESPACE, "labels": MANAGED}}}
    for name, data in gpu_config_data(spec, {}).items():
        files[f"10-configmap-{name}.yaml"] = {"apiVersion": "v1", "kind": "ConfigMap",
                                              "metadata": {"name": name, "namespace": NAMESPACE, "labels": MANAGED},
                                              "data": data}
    models = list({g.spec.gpu.name: g.spec.gpu for g in spec.groups}.values())
    if spec.tenants:  # in force before a namespace is a tenant's
        policies = [(15, d) for d in fence_manifests()] + [(16, d) for d in policy_manifests(spec.every_group)]
        for order, doc in policies:
            files[f"{order}-{doc['kind'].lower()}-{doc['metadata']['name']}.yaml"] = doc
    for tenant in spec.tenants:
        for kind, body in tenant_manifests(tenant, spec.stack.dra):
            order = {"namespace": 20, "quota": 21, "binding": 22}[kind]
            files[f"{order}-{kind}-{tenant.name}.yaml"] = body
        for template in claim_templates(tenant, models) if spec.stack.dra else []:
            files[f"23-resourceclaimtemplate-{tenant.name}-{template['metadata']['name']}.yaml"] = template
    return files


def helm_values(spec: PlatformSpec) -> dict[str, dict[str, Any]]:
    """File name -> values, one per Helm release, with the chart it is for in a comment."""
    releases = [operator_release(spec.stack)]
    if spec.stack.nfd == "standalone":
        releases.insert(0, nfd_release(spec.stack))
    if spec.stack.dra:
        releases.append(dra_release(spec.stack))
    return {f"values-{r.name}.yaml": {"release": r, "values": r.values} for r in releases}


def _values_text(entry: dict[str, Any]) -> str:
    release = entry["release"]
    chart = release.chart
    source = f"{chart.ref}" + (f" from {chart.repo}" if chart.repo else "") + (f" version {chart.version}"
                                                                             if chart.version else "")
    header = (f"# Helm values for release {release.name} in namespace {release.namespace}\n"
              f"# chart: {source}\n")
    return header + _dump(entry["values"])


def render(spec: PlatformSpec, out: Path | None, field: str = "--out") -> list[Path] | str:
    """Write manifests/, helm/ and grafana/ (the dashboard of gpuctl.ops.dashboard) under `out`, or return
    the manifests and values as one YAML stream (`kubectl apply -f -` takes it: no dashboard there). Every
    file is rendered, and every path it goes to judged (paths.check_target, errors naming `field`), before
    the first is written."""
    objects = manifests(spec)
    values = helm_values(spec)
    if out is None:
        stream = "".join(f"---\n# {name}\n{_dump(obj)}" for name, obj in objects.items())
        return stream + "".join(f"---\n# {name}\n{_values_text(v)}" for name, v in values.items())
    from gpuctl.util.paths import check_target

    files = {out / "manifests" / name: _dump(obj) for name, obj in objects.items()}
    files.update({out / "helm" / name: _values_text(entry) for name, entry in values.items()})
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
