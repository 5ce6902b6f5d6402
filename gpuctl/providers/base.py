"""The small typed surface every provider (sim, openstack, eks) implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gpuctl.model.capabilities import Capabilities
from gpuctl.model.change import Change, Step
from gpuctl.model.spec import NodeGroupSpec, PlatformSpec
from gpuctl.util.errors import UsageError

if TYPE_CHECKING:
    from gpuctl.kube.kube import Kube


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    cloud: str
    status: str
    endpoint: str | None
    kubernetes_version: str


@dataclass(frozen=True)
class NodeGroupInfo:
    name: str
    cluster: str
    gpu: str
    nodes: int
    ready_nodes: int
    gpus_per_node: int
    # Who makes its nodes: `cloud` (a node group of the cloud, or the sim's), `karpenter` (a NodePool, nodes
    # launched for pending pods), or `cloud+karpenter`; its bounds (a NodePool's: 0..its limit); how many of
    # `nodes` Karpenter launched.
    scaling: str = "cloud"
    min_nodes: int | None = None
    max_nodes: int | None = None
    launched: int = 0


class Provider(Protocol):
    """Constructed with a CloudOptions; translates its SDK's exceptions to gpuctl errors at this boundary."""

    cloud: str
    capabilities: Capabilities  # what it offers, also declared without the class: providers.capabilities_of

    def check_node_group(self, spec: NodeGroupSpec) -> None:
        """Refuse (UsageError) a node group this cloud cannot build, without any API call."""
        ...

    def check_credentials(self) -> None:
        """Raise CredentialsError (exit 3) with the fix when credentials are missing or wrong."""
        ...

    def cluster_steps(self, spec: PlatformSpec, client: Kube) -> list[Step]:
        """Provider-specific steps run once the kubeconfig works, for the node groups of this run (with
        --karpenter: NodePools, and on the sim Karpenter itself). Built without a request: plan lists them
        before the cluster exists (with no client: none of them is observed or run then)."""
        ...

    def ensure_cluster(self, name: str) -> Change: ...

    def get_cluster(self, name: str) -> ClusterInfo | None: ...

    def list_clusters(self) -> list[ClusterInfo]: ...

    def delete_cluster(self, name: str) -> Change: ...

    def ensure_node_group(self, cluster: str, spec: NodeGroupSpec) -> Change: ...

    def scale_node_group(self, cluster: str, name: str, nodes: int, min_nodes: int | None = None,
                         max_nodes: int | None = None) -> Change:
        """Scale to `nodes`, with the autoscaler bounds given (a bound not given: kept, widened to hold `nodes`)."""
        ...

    def get_node_group(self, cluster: str, name: str) -> NodeGroupInfo | None: ...

    def list_node_groups(self, cluster: str) -> list[NodeGroupInfo]: ...

    def delete_node_group(self, cluster: str, name: str) -> Change: ...

    def context_name(self, cluster: str) -> str:
        """The kubeconfig context (and cluster and user) name gpuctl writes for the cluster."""
        ...

    def node_selector(self, nodegroup: str) -> str:
        """The label selector of a node group's nodes in the cluster."""
        ...

    def kubeconfig(self, cluster: str) -> dict[str, Any]:
        """A self-contained kubeconfig document for the cluster (credentials embedded)."""
        ...


class RunsKueue(Protocol):
    """A provider whose capabilities say runs_kueue: it runs Kueue's CRDs and controller itself (no chart)."""

    def ensure_kueue(self, cluster: str) -> Change: ...

    def kueue_maps(self, cluster: str, profiles: list[str]) -> bool: ...


class RunsMonitoring(Protocol):
    """A provider whose capabilities say monitoring: it runs a Prometheus scraping a DCGM exporter beside the
    cluster itself (the sim), for `gpuctl top` and `gpuctl advise` where no --prometheus is given."""

    def prometheus_url(self, cluster: str) -> str:
        """The base URL of the cluster's Prometheus, started first where it does not run."""
        ...


def scaled_bounds(current: tuple[int, int | None], nodes: int, min_nodes: int | None,
                  max_nodes: int | None) -> tuple[int, int | None]:
    """A scaled node group's autoscaler bounds: those given, else the current ones widened just enough to hold
    `nodes` (a minimum is lowered for a scale to 0); a UsageError naming the flag where they exclude `nodes`.
    A maximum of None: none (Magnum's)."""
    low = min(current[0], nodes) if min_nodes is None else min_nodes
    high = (None if current[1] is None else max(current[1], nodes)) if max_nodes is None else max_nodes
    if low > nodes:
        raise UsageError("--min-nodes", f"must be at most --nodes ({nodes}), got {low}",
                         f"pass --min-nodes {nodes} or less")
    if high is not None and high < max(nodes, 1):
        raise UsageError("--max-nodes", f"must be at least --nodes ({nodes}) and 1, got {high}",
                         f"pass --max-nodes {max(nodes, 1)} or more")
    return low, high
