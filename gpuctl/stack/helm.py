"""Helm through pyhelm3 and the real `helm` binary; the one place that runs an event loop."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuctl.errors import ClusterError
from gpuctl.output import info
from gpuctl.providers.base import Change
from gpuctl.stack.charts import ChartRef
from gpuctl.stack.crds import apply_crds
from gpuctl.tools.installer import ensure_tools

TIMEOUT = "5m"


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    chart: ChartRef
    values: dict[str, Any]


@dataclass(frozen=True)
class HelmTarget:
    kubeconfig: Path | None
    context: str | None


def _client(target: HelmTarget):  # noqa: ANN202 - pyhelm3.Client, imported lazily
    import logging

    from pyhelm3 import Client

    # pyhelm3 logs every non-zero helm exit, expected ones too ("release: not found"); errors are ours to report.
    logging.getLogger("pyhelm3").setLevel(logging.CRITICAL)

    [helm] = ensure_tools(["helm"], info)
    return Client(executable=str(helm.path), kubeconfig=target.kubeconfig, kubecontext=target.context,
                  default_timeout=TIMEOUT)


def _reason(exc: Exception) -> str:
    text = (getattr(exc, "stderr", b"") or b"").decode(errors="replace").strip() or str(exc)
    lines = [line.removeprefix("Error: ") for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


async def _ensure(target: HelmTarget, release: Release) -> Change:
    from pyhelm3.errors import Error as HelmError

    client = _client(target)
    try:
        chart = await client.get_chart(release.chart.ref, repo=release.chart.repo, version=release.chart.version)
        current = await client.get_proceedable_revision(release.name, namespace=release.namespace)
        if not await client.should_install_or_upgrade_release(current, chart, release.values):
            return Change.NO_CHANGE
        crds = list(await chart.crds()) if current is not None else []
    except HelmError as exc:
        raise ClusterError(f"helm: cannot read chart or release {release.name}: {_reason(exc)}",
                           "check --charts and the cluster connection") from None
    if crds:
        apply_crds(target.kubeconfig, target.context, crds)
    try:
        # atomic: a failed install or upgrade is rolled back (or uninstalled) by helm itself.
        await client.install_or_upgrade_release(release.name, chart, release.values, namespace=release.namespace,
                                                create_namespace=True, atomic=True, wait=True, timeout=TIMEOUT)
    except HelmError as exc:
        verb = "upgrade" if current else "install"
        raise ClusterError(f"helm {verb} of {release.name} failed and was rolled back: {_reason(exc)}",
                           f"inspect with 'helm history {release.name} -n {release.namespace}'") from None
    return Change.CREATED if current is None else Change.UPDATED


def ensure_release(target: HelmTarget, release: Release) -> Change:
    """Install or upgrade only when the chart version or values differ from the deployed revision."""
    return asyncio.run(_ensure(target, release))



async def _plan(target: HelmTarget, release: Release) -> tuple[Change, str]:
    from pyhelm3.errors import Error as HelmError
    from pyhelm3.errors import ReleaseNotFoundError

    client = _client(target)
    try:
        chart = await client.get_chart(release.chart.ref, repo=release.chart.repo, version=release.chart.version)
        try:
            current = await client.get_current_revision(release.name, namespace=release.namespace)
        except ReleaseNotFoundError:
            return Change.CREATED, f"install {chart.metadata.name} {chart.metadata.version}"
        deployed = await current.chart_metadata()
        values = await current.values()
    except HelmError as exc:
        raise ClusterError(f"helm: cannot read chart or release {release.name}: {_reason(exc)}",
                           "check --charts and the cluster connection") from None
    if (deployed.name, deployed.version) != (chart.metadata.name, chart.metadata.version):
        return Change.UPDATED, f"chart {deployed.name} {deployed.version} -> {chart.metadata.version}"
    if values != release.values:
        return Change.UPDATED, "values:\n" + yaml_diff(values, release.values)
    return Change.NO_CHANGE, ""


def plan_release(target: HelmTarget, release: Release) -> tuple[Change, str]:
    """What ensure_release would do, and why; reads only."""
    return asyncio.run(_plan(target, release))


def yaml_diff(before: Any, after: Any) -> str:
    import difflib

    import yaml

    old = yaml.safe_dump(before, sort_keys=True).splitlines()
    new = yaml.safe_dump(after, sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(old, new, "deployed", "wanted", lineterm="", n=1))
