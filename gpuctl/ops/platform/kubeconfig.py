"""The write-kubeconfig step: the cluster's context merged into the kubeconfig file (its observe compares the
file, never credentials the cloud would hand out anew)."""

from __future__ import annotations

from pathlib import Path

from gpuctl.kube.kubeconfig import default_path, named, read_kubeconfig, write_kubeconfig
from gpuctl.model.change import Change, Observed, Step
from gpuctl.ops.platform.run import Run
from gpuctl.providers.base import Provider


def kubeconfig_step(provider: Provider, name: str, run: Run) -> Step:
    return Step("write-kubeconfig",
                lambda: observe_kubeconfig(run.kubeconfig, run.context or provider.context_name(name)),
                lambda: _write_kubeconfig(provider, name, run))


def observe_kubeconfig(path: Path | None, context: str) -> Observed:
    """Whether write_kubeconfig would add the context or make it current. Credentials that the cloud would
    hand out anew are not compared: asking for them can be a write."""
    target = path or default_path()
    doc = read_kubeconfig(target) if target.exists() else {}
    if not any(c.get("name") == context for c in doc.get("contexts") or []):
        return Observed(Change.UPDATED, f"adds context {context} to {target}")
    if doc.get("current-context") != context:
        return Observed(Change.UPDATED, f"makes {context} the current context of {target}")
    return Observed(Change.NO_CHANGE)


def _write_kubeconfig(provider: Provider, name: str, run: Run) -> Change:
    """Merge the cluster's context (named run.context, else the provider's name) into run.kubeconfig."""
    entry = named(provider.kubeconfig(name), run.context)
    run.written, changed = write_kubeconfig(entry, run.kubeconfig)
    run.written_context = entry["current-context"]
    return Change.UPDATED if changed else Change.NO_CHANGE
