"""doctor --fix's MIG repairs: finish a wedged MIG change, roll back or re-apply a failed one, once, each step said
before it is done.

What the MIG manager does, and so what is undone here (NVIDIA/mig-parted v0.15.0, the MIG manager the pinned GPU
Operator v26.7.0 runs; pkg/mig/reconfigure/reconfigure.go and cmd/nvidia-mig-manager/main.go):
- Run sets nvidia.com/mig.config.state=pending, then shutdownKubernetesGPUClients sets the deploy labels of the
  device plugin, GPU Feature Discovery, dcgm-exporter, DCGM and NVSM (and nvidia.com/gpu.deploy.client where a node
  has it) to `paused-for-mig-change`, except one that is `false` (maybeSetPaused); once the change is applied, or
  on a failure that reaches setState, it sets each back to `true`, or `false` where it was (maybeSetTrue). A
  failure in waitForPodsToBeDeleted (a GPU pod that does not stop within 5 minutes) or restartValidatorPod returns
  without setState: the node stays `pending` with its operands paused (NVIDIA/gpu-operator #2833). v0.15.1 ends
  every failure in `failed` with the labels restored (NVIDIA/mig-parted #484).
- The manager runs a change when the node's nvidia.com/mig.config label changes value (main.go:
  ContinuouslySyncMigConfigChanges' UpdateFunc sets it only where old and new differ, and
  SyncableMigConfig.Get blocks until the value differs from the last one it ran) or when it starts. Clearing the
  state, or setting the label to the value it has, makes it do nothing; so a re-apply removes the label (and the
  state, as gpuctl.ops.platform.mig.label_mig_config clears it) and sets it again, two patches the manager's
  informer sees as two changes.

The plan is pure (plan_mig_repair, over the node as JSON and its group's record); repair_mig acts on it and waits
through gpuctl.ops.platform.mig.wait_for_mig_state. A change that fails again is said, with the MIG manager's log
command, and left: never retried in the same run."""

from __future__ import annotations

from dataclasses import dataclass

from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.model.mig import config_name
from gpuctl.model.spec import GroupPlan
from gpuctl.ops.platform.mig import wait_for_mig_state
from gpuctl.util.errors import ClusterError, WaitTimeout
from gpuctl.util.output import info
from gpuctl.util.words import pairs

MIG_MANAGER_SELECTOR = "app=nvidia-mig-manager"
FINISH, ROLLBACK, REAPPLY = "finish", "rollback", "reapply"


@dataclass(frozen=True)
class MigRepair:
    """What --fix does on one node: restore the paused deploy labels to their values before the pause, then point
    the node at `config` (FINISH: the wedged change, the node's own label; ROLLBACK: its group's recorded config,
    which the failed label is not; REAPPLY: that recorded config again, which the failed label is) and wait."""

    node: str
    how: str
    config: str
    restore: tuple[tuple[str, str], ...] = ()

    def action(self) -> tuple[str, ...]:
        """As a Finding's action: ("repair-mig", node, how, config, "label=value", ...)."""
        return ("repair-mig", self.node, self.how, self.config, *(f"{k}={v}" for k, v in self.restore))

    @classmethod
    def of_action(cls, action: tuple[str, ...]) -> MigRepair:
        _, node, how, config, *restore = action
        return cls(node, how, config, tuple((k, v) for k, _, v in (r.partition("=") for r in restore)))


def plan_mig_repair(node: KubeObject, plan: GroupPlan | None) -> MigRepair | None:
    """The repair of a node whose MIG change wedged (`pending` with deploy labels paused) or failed; None where
    --fix has none: another state, or a failed change on a node whose group records no MIG layout (nothing known
    good to go back to). A paused label goes back to its value in the group's record where the record sets it,
    else to `true`, what the MIG manager itself restores (maybeSetTrue)."""
    labels = node.labels
    state, current = labels.get(L.MIG_STATE), labels.get(L.MIG_CONFIG)
    paused = sorted(k for k, v in labels.items() if k.startswith(L.DEPLOY_PREFIX) and v == L.PAUSED_FOR_MIG)
    recorded_labels = plan.labels if plan is not None else {}
    restore = tuple((k, recorded_labels[k] if recorded_labels.get(k) not in (None, "", L.PAUSED_FOR_MIG) else "true")
                    for k in paused)
    if state == "pending" and paused and current:
        return MigRepair(node.name, FINISH, current, restore)
    if state == "failed" and plan is not None and plan.mig is not None:
        recorded = config_name(plan.mig)
        return MigRepair(node.name, REAPPLY if current == recorded else ROLLBACK, recorded, restore)
    return None


def describe(repair: MigRepair, current: str | None) -> str:
    """What the repair does, in the finding's repair column."""
    if repair.how == FINISH:
        what = f"finishes the change to {repair.config}"
    elif repair.how == ROLLBACK:
        what = f"rolls back from {current} to {repair.config}, its node group's recorded layout"
    else:
        what = f"re-applies {repair.config}, its node group's recorded layout, once"
    values: dict[str, list[str]] = {}
    for key, value in repair.restore:
        values.setdefault(value, []).append(key.removeprefix(L.DEPLOY_PREFIX))
    restored = "; ".join(f"{', '.join(keys)} to {value}" for value, keys in sorted(values.items()))
    return f"restores the deploy labels {restored}, then {what}" if restored else what


def log_command(kube: Kube, node: str, namespace: str) -> str:
    """The command that shows the MIG manager's log on `node` (its pod's, where one runs there)."""
    pods = kube.list("v1", "Pod", namespace, labels=MIG_MANAGER_SELECTOR, fields=f"spec.nodeName={node}",
                     what=f"listing the MIG manager pod on {node}")
    return f"kubectl logs -n {namespace} {pods[0].name}" if pods else \
        f"kubectl logs -n {namespace} -l {MIG_MANAGER_SELECTOR}"


def repair_mig(kube: Kube, repair: MigRepair, namespace: str, timeout: float) -> bool:
    """Do `repair`, each step said first, and wait for the MIG manager's answer: True on success; False where it
    failed again (said, with its log command; not retried). WaitTimeout where it has not answered."""
    node = repair.node
    if repair.restore:
        info(f"fix: node {node}: restoring the GPU operands' deploy labels the MIG manager paused to their values "
             f"before the pause: {pairs(dict(repair.restore))}")
        kube.patch("v1", "Node", node, {"metadata": {"labels": dict(repair.restore)}})
    if repair.how == ROLLBACK:
        info(f"fix: node {node}: rolling back its failed MIG change to {L.MIG_CONFIG}={repair.config}, its node "
             f"group's recorded layout (state cleared, so the state awaited is the MIG manager's answer to it)")
        kube.patch("v1", "Node", node, {"metadata": {"labels": {L.MIG_CONFIG: repair.config, L.MIG_STATE: None}}})
    else:
        why = "finishing its wedged MIG change" if repair.how == FINISH else \
            "re-applying its node group's recorded MIG config, once"
        info(f"fix: node {node}: {why}: re-labelling {L.MIG_CONFIG}={repair.config} (removed with its state, then "
             "set again: the MIG manager runs a change only when the label's value changes)")
        kube.patch("v1", "Node", node, {"metadata": {"labels": {L.MIG_CONFIG: None, L.MIG_STATE: None}}})
        kube.patch("v1", "Node", node, {"metadata": {"labels": {L.MIG_CONFIG: repair.config}}})
    info(f"fix: node {node}: waiting for the MIG manager to apply {repair.config} ({L.MIG_STATE}=success)")
    try:
        wait_for_mig_state(kube, [node], repair.config, timeout)
    except ClusterError:
        info(f"fix: node {node}: the MIG manager failed to apply {repair.config} again; not retried: read its log "
             f"({log_command(kube, node, namespace)})")
        return False
    except WaitTimeout as exc:
        raise WaitTimeout(f"node {node}: the MIG manager has not applied {repair.config}: {exc.message}",
                          f"read its log ({log_command(kube, node, namespace)}); a GPU pod that does not stop keeps "
                          "it pending (NVIDIA/gpu-operator #2833)") from exc
    info(f"fix: node {node}: {repair.config} applied ({L.MIG_STATE}=success)")
    return True
