"""The `sim` provider: a real kube-apiserver + etcd with kwok's fake GPU nodes, on loopback."""

from gpuctl.model.capabilities import Capabilities

# The project's stand-in charts (nothing to pull, no real GPUs to drive); Kueue, a Prometheus scraping simulated
# DCGM exporters and, with --karpenter, Karpenter's kwok provider run beside the control plane.
CAPABILITIES = Capabilities(default_charts="bundled", ships_driver=True, runs_kueue=True, karpenter=True,
                            monitoring=True)
