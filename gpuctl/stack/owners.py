"""One owner per component: never a second GPU Operator, device plugin or NFD.

existing.py finds what the cluster already runs, before gpuctl's first write; `check_single_owners`
decides what gpuctl does with it:
- gpuctl's own releases (`gpu-operator` and `node-feature-discovery` in namespace gpu-operator):
  converged as always;
- another GPU Operator with a ClusterPolicy (e.g. Magnum's Cluster API release `nvidia-gpu-operator`):
  gpuctl installs no operator and configures sharing and MIG through that ClusterPolicy;
- another NFD: used as it is, gpuctl installs no second one;
- a device plugin no GPU Operator runs (eksctl's DaemonSet, a plugin on the node's host), a GPU
  Operator without a ClusterPolicy, or two GPU Operators: refused with exit 2 and the fix, before
  anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuctl.model.stack_spec import StackSpec
from gpuctl.stack.existing import (
    NOT_DEVICE_PLUGINS,
    OURS,
    RELEASE_ANNOTATION,
    ExistingStack,
    Operator,
    Workload,
    is_device_plugin,
    tolerates,
)
from gpuctl.stack.values import NAMESPACE
from gpuctl.util.errors import ExitCode, GpuctlError

__all__ = ["NOT_DEVICE_PLUGINS", "OURS", "RELEASE_ANNOTATION", "ExistingStackError", "StackPlan",
           "check_single_owners", "is_device_plugin"]

EKSCTL_PLUGIN = ("kube-system", "nvidia-device-plugin-daemonset")  # eksctl's GPU node groups


class ExistingStackError(GpuctlError):
    """The cluster runs a GPU stack gpuctl cannot configure; the user changes the cluster (exit 2)."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class StackPlan:
    """What gpuctl does with the stack it found: None fields mean gpuctl's own releases."""

    operator: Operator | None = None  # another's GPU Operator, configured through its ClusterPolicy
    nfd: Workload | None = None  # another's NFD, used as it is

    @property
    def namespace(self) -> str:
        """Where gpuctl's ConfigMaps go: the namespace the GPU Operator runs its operands in."""
        return self.operator.namespace if self.operator else NAMESPACE

    def operator_note(self) -> str:
        assert self.operator is not None
        return (f"GPU Operator: {self.operator.describe()} (not gpuctl's; sharing configured through its "
                f"ClusterPolicy {self.operator.policy})")

    def nfd_note(self) -> str:
        assert self.nfd is not None
        return f"NFD: {self.nfd.describe()} (not gpuctl's; used as it is, no second NFD installed)"


def _plugin_error(plugin: Workload) -> ExistingStackError:
    if (plugin.namespace, plugin.name) == EKSCTL_PLUGIN and plugin.release is None:
        return ExistingStackError(
            f"eksctl's NVIDIA device plugin runs on this cluster (DaemonSet {plugin.where}); the GPU Operator "
            "would add a second one",
            "recreate the node group with 'eksctl create nodegroup ... --install-nvidia-plugin=false', or remove "
            f"the plugin: 'kubectl -n {plugin.namespace} delete daemonset {plugin.name}', then rerun")
    remove = (f"'helm uninstall {plugin.release} -n {plugin.release_namespace}'" if plugin.release else
              f"'kubectl -n {plugin.namespace} delete daemonset {plugin.name}'")
    return ExistingStackError(f"a device plugin is already deployed ({plugin.describe()}); the GPU Operator "
                              "would add a second one",
                              f"remove it ({remove}), then rerun: the GPU Operator owns the device plugin")


def check_single_owners(existing: ExistingStack, stack: StackSpec) -> StackPlan:
    """What gpuctl installs and configures beside `existing`, or ExistingStackError (exit 2)."""
    foreign_plugins = [p for p in existing.plugins if not p.operated and not p.ours]
    if foreign_plugins:
        raise _plugin_error(foreign_plugins[0])
    if existing.host_plugin_nodes:
        nodes = existing.host_plugin_nodes
        named = ", ".join(nodes[:3]) + (f" and {len(nodes) - 3} more" if len(nodes) > 3 else "")
        raise ExistingStackError(
            f"node {named} advertises GPUs from a device plugin on the host (no device-plugin DaemonSet can run "
            "there, as on Bottlerocket NVIDIA or EKS Auto Mode); the GPU Operator would add a second one",
            "use GPU nodes without a host device plugin (e.g. a node group with --ami-type AL2023_x86_64_NVIDIA), "
            "or share GPUs with Bottlerocket's own settings (settings.kubelet-device-plugins.nvidia.*) instead")
    foreign = existing.foreign_operators
    ours = [o for o in existing.operators if o.ours]
    if len(foreign) > 1 or (foreign and ours):
        found = "; ".join(o.describe() for o in existing.operators)
        raise ExistingStackError(f"more than one GPU Operator is installed ({found})",
                                 "uninstall all but one, then rerun")
    operator = foreign[0] if foreign else None
    if operator is not None and operator.policy is None:
        raise ExistingStackError(
            f"GPU Operator {operator.describe()} has no ClusterPolicy, so gpuctl cannot configure sharing through it",
            "let the release create its ClusterPolicy (clusterPolicy.deployCR=true) or uninstall it, then rerun")
    if operator is not None:
        for taint in stack.taints:
            if not tolerates(operator.tolerations, taint.as_dict()):
                raise ExistingStackError(
                    f"GPU Operator {operator.describe()} does not tolerate the taint {taint} that gpuctl puts on the "
                    "GPU nodes: its device plugin would not run there",
                    f"add a toleration for {taint} to the release's daemonsets.tolerations, or choose a taint it "
                    "tolerates (--taint)")
    foreign_nfd = [n for n in existing.nfds if not n.ours]
    our_standalone = [n for n in existing.nfds if (n.release, n.release_namespace) == ("node-feature-discovery",
                                                                                         NAMESPACE)]
    if stack.nfd == "operator" and operator is not None:
        raise ExistingStackError(f"--nfd operator: GPU Operator {operator.describe()} is not gpuctl's, so gpuctl "
                                 "cannot turn its NFD on", "use --nfd standalone (the default)")
    if stack.nfd == "operator" and (foreign_nfd or our_standalone):
        nfd = (foreign_nfd or our_standalone)[0]
        raise ExistingStackError(f"--nfd operator: NFD already runs ({nfd.describe()}) and the GPU Operator would "
                                 "deploy a second one",
                                 "keep --nfd standalone" + (", or uninstall the node-feature-discovery release first"
                                                            if our_standalone else ""))
    return StackPlan(operator, foreign_nfd[0] if foreign_nfd else None)
