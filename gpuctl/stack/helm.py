"""Helm through pyhelm3 and the real `helm` binary; the one place that runs an event loop.

`render` builds `Release`s from here, so the event loop and pyhelm3 load (LazyImport) only when helm runs."""

from __future__ import annotations

import difflib
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpuctl.model.change import Change
from gpuctl.model.charts import ChartRef
from gpuctl.stack.crds import apply_crds
from gpuctl.tools.installer import ensure_tools
from gpuctl.util.errors import ClusterError, GpuctlError, RequestTimeout
from gpuctl.util.lazy_import import LazyImport
from gpuctl.util.output import info
from gpuctl.util.timeouts import ENV, HELM_CHART_S, HELM_MARGIN_S, HELM_QUERY_S, scaled

if TYPE_CHECKING:
    import asyncio

    import pyhelm3
    import pyhelm3.errors as helm_errors
else:
    asyncio = LazyImport("asyncio")
    pyhelm3 = LazyImport("pyhelm3")
    helm_errors = LazyImport("pyhelm3.errors", "pyhelm3")

TIMEOUT = "5m"  # helm's own deadline for its waits (--wait, --rollback-on-failure)
INSTALL_DEADLINE_S = 5 * 60 + HELM_MARGIN_S  # TIMEOUT, then time for the rollback
# What helm (client-go) says when the API server took the connection and never answered.
_HELM: str | None = None  # the helm binary in use, to find its processes on a deadline
_NO_ANSWER = ("tls handshake timeout", "i/o timeout", "client.timeout exceeded", "timeout awaiting response headers")


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


def _client(target: HelmTarget) -> pyhelm3.Client:
    # pyhelm3 logs every non-zero helm exit, expected ones too ("release: not found"); errors are ours to report.
    logging.getLogger("pyhelm3").setLevel(logging.CRITICAL)

    global _HELM
    [helm] = ensure_tools(["helm"], info)
    _HELM = str(helm.path)
    return pyhelm3.Client(executable=str(helm.path), kubeconfig=target.kubeconfig, kubecontext=target.context,
                  default_timeout=TIMEOUT)


def _server(target: HelmTarget) -> str:
    """The API server URL of the target's context, for messages ("the kube-apiserver" when unknown)."""
    files = [str(target.kubeconfig)] if target.kubeconfig else \
        [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p] or [os.path.expanduser("~/.kube/config")]
    docs = []
    for file in files:
        try:
            docs.append(yaml.safe_load(Path(file).read_text()) or {})
        except (OSError, yaml.YAMLError):
            continue
    current = target.context or next((d["current-context"] for d in docs if d.get("current-context")), None)
    contexts = {c.get("name"): c.get("context") or {} for d in reversed(docs) for c in d.get("contexts") or []}
    clusters = {c.get("name"): c.get("cluster") or {} for d in reversed(docs) for c in d.get("clusters") or []}
    server = clusters.get(contexts.get(current, {}).get("cluster"), {}).get("server")
    return f"the kube-apiserver at {server}" if server else "the kube-apiserver"


def _hint() -> str:
    return f"check that the API server is up and reachable (request deadline: {ENV})"


async def _bounded(target: HelmTarget, awaitable: Any, seconds: float, doing: str, server: bool = True) -> Any:
    """`awaitable` (one or more helm runs) with a deadline: a frozen API server must not hang helm forever.

    On the deadline the helm process is killed (pyhelm3 runs it under `sh -c` and, cancelled, would
    only stop the shell and then wait for helm) and the error names the server (exit 7)."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if task in done:
        return task.result()
    _kill_helm()  # its shell reaps it and exits, which ends the task with a helm error
    await asyncio.wait({task}, timeout=5)
    if not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=5)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved: its failure is the deadline's doing
    whom = _server(target) if server else "the chart source"
    raise RequestTimeout(f"helm: {doing}: no answer from {whom} within {seconds:.0f}s", _hint(), server=whom)


def _kill_helm() -> None:
    """SIGKILL the helm processes this process started (children of its `sh -c` children)."""
    if _HELM is None:
        return
    helm = os.path.realpath(_HELM)
    for pid in _descendants(os.getpid()):
        try:
            exe = os.path.realpath(f"/proc/{pid}/exe")
        except OSError:
            continue
        if exe == helm:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def _timed_out(target: HelmTarget, exc: Exception, doing: str) -> GpuctlError | None:
    """A helm failure that is the API server not answering, as a RequestTimeout naming it."""
    text = (getattr(exc, "stderr", b"") or b"").decode(errors="replace").lower()
    if not any(marker in text for marker in _NO_ANSWER):
        return None
    whom = _server(target)
    return RequestTimeout(f"helm: {doing}: {whom} did not answer ({_reason(exc)})", _hint(), server=whom)


def _reason(exc: Exception) -> str:
    text = (getattr(exc, "stderr", b"") or b"").decode(errors="replace").strip() or str(exc)
    lines = [line.removeprefix("Error: ") for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


async def _ensure(target: HelmTarget, release: Release) -> Change:
    client = _client(target)
    doing = f"reading release {release.name}"
    try:
        chart = await _bounded(target, client.get_chart(release.chart.ref, repo=release.chart.repo,
                                                        version=release.chart.version),
                               scaled(HELM_CHART_S), f"reading chart {release.chart.ref}", server=False)
        current = await _bounded(target, client.get_proceedable_revision(release.name, namespace=release.namespace),
                                 scaled(HELM_QUERY_S), doing)
        if not await _bounded(target, client.should_install_or_upgrade_release(current, chart, release.values),
                              scaled(HELM_QUERY_S), doing):
            return Change.NO_CHANGE
        crds = list(await _bounded(target, chart.crds(), scaled(HELM_CHART_S), f"reading chart {release.chart.ref}",
                                   server=False)) if current is not None else []
    except helm_errors.Error as exc:
        if (timed_out := _timed_out(target, exc, doing)) is not None:
            raise timed_out from None
        raise ClusterError(f"helm: cannot read chart or release {release.name}: {_reason(exc)}",
                           "check --charts and the cluster connection") from None
    if crds:
        apply_crds(target.kubeconfig, target.context, crds)
    try:
        # A failed install or upgrade is rolled back (or uninstalled) by helm itself: Helm 4's
        # --rollback-on-failure, Helm 3's --atomic (Helm 4 keeps --atomic only as a deprecated alias,
        # helm.sh/helm/v4@v4.3.1 pkg/cmd/upgrade.go L297-299; pyhelm3 warns when asked for it there).
        # wait: pyhelm3 passes `--wait --wait-for-jobs`; Helm 4's bare --wait is its "watcher" strategy, every
        # resource of the release Current by kstatus (pkg/cmd/flags.go AddWaitFlag, pkg/kube/statuswait.go),
        # where a Helm 4 upgrade without --wait waits for hooks only. Apply method: Helm 4's default
        # --server-side=auto upgrades a release as it was last applied, so one Helm 3 made stays client-side
        # (pkg/action/upgrade.go getUpgradeServerSideValue); a new install is server-side.
        await _bounded(target, client.install_or_upgrade_release(
            release.name, chart, release.values, namespace=release.namespace, create_namespace=True,
            **_rollback_on_failure(client), wait=True, timeout=TIMEOUT), INSTALL_DEADLINE_S,
            f"installing {release.name}")
    except helm_errors.Error as exc:
        verb = "upgrade" if current else "install"
        if (timed_out := _timed_out(target, exc, f"{verb} of {release.name}")) is not None:
            raise timed_out from None
        raise ClusterError(f"helm {verb} of {release.name} failed and was rolled back: {_reason(exc)}",
                           f"inspect with 'helm history {release.name} -n {release.namespace}'") from None
    return Change.CREATED if current is None else Change.UPDATED


def _rollback_on_failure(client: pyhelm3.Client) -> dict[str, bool]:
    """pyhelm3's argument for helm's roll-back-on-failure under the major it found (`helm version`)."""
    return {"rollback_on_failure": True} if client.version.major >= 4 else {"atomic": True}


def ensure_release(target: HelmTarget, release: Release) -> Change:
    """Install or upgrade only when the chart version or values differ from the deployed revision."""
    return asyncio.run(_ensure(target, release))



async def _plan(target: HelmTarget, release: Release) -> tuple[Change, str]:
    client = _client(target)
    doing = f"reading release {release.name}"
    try:
        chart = await _bounded(target, client.get_chart(release.chart.ref, repo=release.chart.repo,
                                                        version=release.chart.version),
                               scaled(HELM_CHART_S), f"reading chart {release.chart.ref}", server=False)
        try:
            current = await _bounded(target, client.get_current_revision(release.name, namespace=release.namespace),
                                     scaled(HELM_QUERY_S), doing)
        except helm_errors.ReleaseNotFoundError:
            return Change.CREATED, f"install {chart.metadata.name} {chart.metadata.version}"
        deployed = await _bounded(target, current.chart_metadata(), scaled(HELM_QUERY_S), doing)
        values = await _bounded(target, current.values(), scaled(HELM_QUERY_S), doing)
    except helm_errors.Error as exc:
        if (timed_out := _timed_out(target, exc, doing)) is not None:
            raise timed_out from None
        raise ClusterError(f"helm: cannot read chart or release {release.name}: {_reason(exc)}",
                           "check --charts and the cluster connection") from None
    if (deployed.name, deployed.version) != (chart.metadata.name, chart.metadata.version):
        return Change.UPDATED, f"chart {deployed.name} {deployed.version} -> {chart.metadata.version}"
    if values != release.values:
        return Change.UPDATED, "values:\n" + yaml_diff(values, release.values)
    return Change.NO_CHANGE, ""


async def _remove(target: HelmTarget, name: str, namespace: str) -> None:
    client = _client(target)
    doing = f"uninstalling {name}"
    try:  # --wait: until the release's resources are gone (a missing release is no error to pyhelm3)
        await _bounded(target, client.uninstall_release(name, namespace=namespace, wait=True, timeout=TIMEOUT),
                       INSTALL_DEADLINE_S, doing)
    except helm_errors.Error as exc:
        if (timed_out := _timed_out(target, exc, doing)) is not None:
            raise timed_out from None
        raise ClusterError(f"helm uninstall of {name} failed: {_reason(exc)}",
                           f"inspect with 'helm status {name} -n {namespace}'") from None


def remove_release(target: HelmTarget, name: str, namespace: str) -> None:
    """`helm uninstall` of a release gpuctl made, returning once its resources are gone."""
    asyncio.run(_remove(target, name, namespace))


def plan_release(target: HelmTarget, release: Release) -> tuple[Change, str]:
    """What ensure_release would do, and why; reads only."""
    return asyncio.run(_plan(target, release))


def yaml_diff(before: Any, after: Any) -> str:
    old = yaml.safe_dump(before, sort_keys=True).splitlines()
    new = yaml.safe_dump(after, sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(old, new, "deployed", "wanted", lineterm="", n=1))
