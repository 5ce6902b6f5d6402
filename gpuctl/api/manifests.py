"""What `apply` would write, rendered offline (no cluster, no cloud): apply's own renderers (gpuctl.ops.render)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuctl.ops.render import render as render_spec

if TYPE_CHECKING:
    from pathlib import Path

    from gpuctl.model.spec import PlatformSpec


def render(spec: PlatformSpec, out: Path | None, field: str = "--out",
           helm_values: str | None = None) -> list[Path] | str:
    """Every object `apply` writes for `spec`, from apply's own renderers: the manifests as one stream (only
    manifests: `kubectl apply -f -` takes it), or written with the Helm values files under `out`; with
    `helm_values`, that one release's values file instead."""
    return render_spec(spec, out, field, helm_values)
