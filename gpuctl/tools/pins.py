"""Pinned versions of the external programs the sim provider and the GPU stack need."""

from __future__ import annotations

import platform
from dataclasses import dataclass

# Kubernetes 1.37 (go.mod: go 1.26.0); DRAExtendedResource and DRADeviceTaints/DRADeviceTaintRules GA there.
KUBERNETES_VERSION = "v1.37.2"
# Helm 4, the newest on the Go module proxy (module helm.sh/helm/v4). Releases made with the earlier pin v3.21.4
# upgrade in place, still client-side applied (docs/clusters.md, "Helm 4"; tests/integration/test_helm_majors.py).
HELM_VERSION = "v4.3.1"
KWOK_VERSION = "v0.8.0"
# etcd as Kubernetes v1.37.2 is tested with: its build/dependencies.yaml and hack/lib/etcd.sh name 3.7.0.
ETCD_VERSION = "v3.7.0"
KUEUE_VERSION = "v0.19.2"
# controller-gen generates Kueue's and Karpenter's CRDs from their Go API types: the version kueue v0.19.2's
# hack/tools/go.mod pins (its Makefile, hack/make/deps.mk, installs exactly that one), as does karpenter
# v1.15.0's go.tools.mod.
CONTROLLER_TOOLS_VERSION = "v0.20.1"
# Karpenter's kwok cloud provider: the newest on the Go module proxy. Its go.mod says go 1.26.9, so the
# build fetches that toolchain when the local Go is older (gobuild.needed_toolchain).
KARPENTER_VERSION = "v1.15.0"
# gpuctl's own checker, built from gpuctl/tools/upstreamcheck; must equal `Version` in its main.go.
UPSTREAMCHECK_VERSION = "v2"
# Prometheus for the sim's monitoring (simulator/prometheus.py): the newest 3.x the Go module proxy serves. Its Go
# module github.com/prometheus/prometheus numbers release v3.X.Y as v0.3XX.Y (VERSION file 3.16.0 in v0.316.0).
PROMETHEUS_VERSION = "v3.16.0"
PROMETHEUS_MODULE_VERSION = "v0.316.0"


@dataclass(frozen=True)
class Tool:
    name: str
    version: str
    version_args: tuple[str, ...]  # prints a line containing the version
    recipe: str  # which Go build produces it: see gpuctl/tools/gobuild.py
    url: str | None  # official release download; None: no release, always built from source
    member: str | None = None  # path inside the .tar.gz at `url`; None for a bare binary
    checksum_url: str | None = None  # sha256 published beside the download
    # What the recipe leaves in its out dir beside the binary, kept next to it in the cache (see
    # installer.cached_path); a tool with extras never comes from PATH, which cannot supply them, and a cached
    # binary missing one (cached by a gpuctl that made fewer) is built again.
    extras: tuple[str, ...] = ()


def _platform() -> tuple[str, str]:
    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
    return platform.system().lower(), arch


def _kube_tool(name: str, version_args: tuple[str, ...]) -> Tool:
    os_name, arch = _platform()
    url = f"https://dl.k8s.io/release/{KUBERNETES_VERSION}/bin/{os_name}/{arch}/{name}"
    return Tool(name, KUBERNETES_VERSION, version_args, "kubernetes", url, checksum_url=url + ".sha256")


def helm_tool(version: str) -> Tool:
    """Helm at `version`, either major: get.helm.sh names v3's and v4's tarballs alike; the build recipe
    picks the major's Go module (gobuild.helm_module). Tests use it for a release other than the pin."""
    os_name, arch = _platform()
    helm = f"https://get.helm.sh/helm-{version}-{os_name}-{arch}.tar.gz"
    return Tool("helm", version, ("version", "--short"), "helm", helm,
                member=f"{os_name}-{arch}/helm", checksum_url=helm + ".sha256sum")


def _tools() -> dict[str, Tool]:
    os_name, arch = _platform()
    kwok = f"https://github.com/kubernetes-sigs/kwok/releases/download/{KWOK_VERSION}"
    etcd_dir = f"etcd-{ETCD_VERSION}-{os_name}-{arch}"
    etcd = f"https://github.com/etcd-io/etcd/releases/download/{ETCD_VERSION}"
    prometheus = f"https://github.com/prometheus/prometheus/releases/download/{PROMETHEUS_VERSION}"
    prometheus_dir = f"prometheus-{PROMETHEUS_VERSION.lstrip('v')}.{os_name}-{arch}"
    tools = [
        helm_tool(HELM_VERSION),
        Tool("kwok", KWOK_VERSION, ("--version",), "kwok", f"{kwok}/kwok-{os_name}-{arch}"),
        Tool("kwokctl", KWOK_VERSION, ("--version",), "kwok", f"{kwok}/kwokctl-{os_name}-{arch}"),
        Tool("etcd", ETCD_VERSION, ("--version",), "etcd", f"{etcd}/{etcd_dir}.tar.gz",
             member=f"{etcd_dir}/etcd", checksum_url=f"{etcd}/SHA256SUMS"),
        _kube_tool("kube-apiserver", ("--version",)),
        _kube_tool("kube-controller-manager", ("--version",)),
        _kube_tool("kube-scheduler", ("--version",)),
        _kube_tool("kubectl", ("version", "--client")),
        Tool("upstreamcheck", UPSTREAMCHECK_VERSION, ("--version",), "upstreamcheck", None),
        # Kueue's controller manager (--version is gpuctl's build patch), its CRDs and its webhook manifests
        # (kueue-webhooks/manifests.yaml), generated from its source by controller-gen: gpuctl/tools/gobuild.py,
        # _build_kueue.
        Tool("kueue", KUEUE_VERSION, ("--version",), "kueue", None, extras=("kueue-crds", "kueue-webhooks")),
        # Karpenter's kwok provider (--version is gpuctl's build patch) and its CRDs from controller-gen:
        # gpuctl/tools/gobuild.py, _build_karpenter.
        Tool("karpenter-kwok", KARPENTER_VERSION, ("--version",), "karpenter", None, extras=("karpenter-crds",)),
        # Prometheus's server, `prometheus --version` printing "prometheus, version 3.16.0 (...)": the release
        # tarball, else cmd/prometheus built from the module proxy (gpuctl/tools/gobuild.py, _build_prometheus).
        Tool("prometheus", PROMETHEUS_VERSION, ("--version",), "prometheus", f"{prometheus}/{prometheus_dir}.tar.gz",
             member=f"{prometheus_dir}/prometheus", checksum_url=f"{prometheus}/sha256sums.txt"),
    ]
    return {t.name: t for t in tools}


TOOLS: dict[str, Tool] = _tools()
CHECK_TOOLS: tuple[str, ...] = ("upstreamcheck",)  # check gpuctl's outputs against upstream Go code
# Built only when something asks for them (kueue: simulator/kueue.py; prometheus: simulator/prometheus.py).
ON_DEMAND_TOOLS: tuple[str, ...] = ("kueue", "karpenter-kwok", "prometheus")
# The sim cluster needs every other one (its device plugin uses upstreamcheck).
SIM_TOOLS: tuple[str, ...] = tuple(name for name in TOOLS if name not in ON_DEMAND_TOOLS)
