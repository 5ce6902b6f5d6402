"""Where the NFD, GPU Operator, DRA driver and Kueue charts come from.

Default: the upstream Helm repositories (Kueue: its OCI registry) at pinned versions. Air-gapped sites
point at a local directory holding the charts, or at an OCI mirror. The sim provider uses the project's
own stand-in charts (templates/charts/), which take the same values keys; it has no Kueue chart, it runs
Kueue itself (providers/sim/kueue.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuctl.model.naming import check_text
from gpuctl.util.errors import UsageError, shown
from gpuctl.util.resources import data_dir

GPU_OPERATOR = "gpu-operator"
NFD = "node-feature-discovery"
KUEUE = "kueue"
DRA_DRIVER = "dra-driver-nvidia-gpu"

UPSTREAM = {
    GPU_OPERATOR: ("https://helm.ngc.nvidia.com/nvidia", "v26.7.0"),
    NFD: ("https://kubernetes-sigs.github.io/node-feature-discovery/charts", "0.19.0"),
    KUEUE: ("oci://registry.k8s.io/kueue/charts", "0.19.2"),  # Kueue publishes its chart as an OCI artifact only
    # kubernetes-sigs/dra-driver-nvidia-gpu docs/install.md at v0.4.1 (also on NGC as nvidia/dra-driver-nvidia-gpu)
    DRA_DRIVER: ("oci://registry.k8s.io/dra-driver-nvidia/charts", "0.4.1"),
}


@dataclass(frozen=True)
class ChartRef:
    ref: str  # chart name (with repo), a directory, or an oci:// reference
    repo: str | None = None
    version: str | None = None


def chart_ref(chart: str, source: str, field: str = "--charts") -> ChartRef:
    """Resolve `chart` from `source`: "upstream", "bundled", a directory, or an oci:// prefix."""
    check_text(source, field, maximum=4096)
    if source == "upstream":
        repo, version = UPSTREAM[chart]
        if repo.startswith("oci://"):
            return ChartRef(f"{repo}/{chart}", version=version)
        return ChartRef(chart, repo=repo, version=version)
    if source == "bundled":
        return ChartRef(str(data_dir("templates") / "charts" / chart))
    if source.startswith("oci://"):
        return ChartRef(f"{source.rstrip('/')}/{chart}", version=UPSTREAM[chart][1])
    directory = Path(source).expanduser() / chart
    try:
        found = (directory / "Chart.yaml").is_file()
    except OSError:  # a name too long for the file system, say
        found = False
    if not found:
        raise UsageError(field, f"no {chart} chart in {shown(source)} (expected {chart}/Chart.yaml there)",
                         "pass a directory holding gpu-operator/ and node-feature-discovery/ (and kueue/ for --kueue, "
                         f"{DRA_DRIVER}/ for --dra), "
                         "an oci:// mirror, 'upstream' or 'bundled'")
    return ChartRef(str(directory))


def published(ref: ChartRef) -> ChartRef:
    """`ref` as a reader elsewhere fetches it: itself where it names a repository or an OCI reference, else (a
    directory: gpuctl's bundled stand-ins, a local copy) the upstream chart of that name at the version gpuctl
    pins. A path on the machine that rendered it means nothing to a GitOps repository."""
    if ref.repo or ref.ref.startswith("oci://"):
        return ref
    return chart_ref(Path(ref.ref).name, "upstream")


def helm_install_command(release: str, namespace: str, ref: ChartRef, values_file: str) -> str:
    """The `helm upgrade --install` line that installs `ref` (published) as `release` with `values_file`."""
    chart = published(ref)
    source = f"{chart.ref} --repo {chart.repo}" if chart.repo else chart.ref
    version = f" --version {chart.version}" if chart.version else ""
    return (f"helm upgrade --install {release} {source}{version} --namespace {namespace} --create-namespace "
            f"-f {values_file}")
