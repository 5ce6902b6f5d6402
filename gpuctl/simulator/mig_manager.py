"""The sim's MIG manager decides with mig-parted's own code.

The real MIG manager answers a node's nvidia.com/mig.config label by running `nvidia-mig-parted apply -f
config.yaml -c NAME` and setting nvidia.com/mig.config.state from its exit status (mig-parted v0.14.4
pkg/mig/reconfigure/reconfigure.go Run: applyMigConfig, then setState). The sim runs the same apply through
`upstreamcheck mig-apply` (gpuctl/tools/upstreamcheck/migapply.go): mig-parted's parsing, selection, ordering
and instance creation, against go-nvml's mock of the node's GPU. The state is its success or failure and the
MIG devices the device plugin advertises are the ones it made, so gpuctl's own MIG model
(gpuctl.model.mig.place) is not what the sim's MIG decisions are checked against.

go-nvml has no usable mock for two of gpuctl's MIG GPUs (upstreamcheck's migapply.go says why): on h200 and
b200 nodes the sim places layouts with gpuctl's model, as before.

A fault a test turns on, the node annotation sim.gpuctl.dev/fault-mig-wedge: the MIG manager's next run wedges as
NVIDIA/gpu-operator #2833 reports, and as mig-parted v0.15.0 pkg/mig/reconfigure/reconfigure.go Run does when a GPU
pod does not stop: it sets the state `pending`, pauses the operands' deploy labels (shutdownKubernetesGPUClients,
maybeSetPaused: every one but a `false` one, gpu.deploy.client only where the node has it), and returns from
waitForPodsToBeDeleted with an error and no setState. The manager then waits for the next change of the node's
nvidia.com/mig.config label (cmd/nvidia-mig-manager/main.go: SyncableMigConfig.Get), so the node stays so, the
fault gone or not, until the label changes or the manager restarts. The sim cannot see a label removed and set
again between two of its passes; it takes the state cleared with it (as gpuctl's re-label does) for that change.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from gpuctl.model import labels as L
from gpuctl.model.catalog import GpuModel
from gpuctl.model.mig import advertised_resources, layout_from_counts, parse_mig_parted_config, place
from gpuctl.util.errors import UsageError

APPLY_TIMEOUT_S = 20.0
FAULT_MIG_WEDGE = "sim.gpuctl.dev/fault-mig-wedge"
MIG_WEDGED = "sim.gpuctl.dev/mig-wedged"  # the config the sim's MIG manager wedged on (its run returned an error)
# reconfigure.go shutdownKubernetesGPUClients: the deploy labels it pauses (the client's only where set)
PAUSED_OPERANDS = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm")
# The GPU models `upstreamcheck mig-apply --gpu` takes (applyGPUs in migapply.go).
UPSTREAM_MODELS = frozenset({"a100-40gb", "a100-80gb", "a30", "h100-80gb"})


@dataclass(frozen=True)
class MigApplied:
    """What applying one config of a mig-parted file ended with on a node: per GPU the MIG devices made
    (profile -> count; None where MIG is off), or the error that makes the state `failed`."""

    gpus: tuple[dict[str, int] | None, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def mig_enabled(self) -> bool:
        return any(devices is not None for devices in self.gpus)

    @property
    def profiles(self) -> tuple[str, ...]:
        """Every MIG device's profile, GPU after GPU, each GPU's sorted."""
        return tuple(p for devices in self.gpus for p, n in sorted((devices or {}).items()) for _ in range(n))


def apply_mig_config(tool: Path | None, text: str, config: str, model: GpuModel, gpus: int) -> MigApplied:
    """Apply `config` of the mig-parted file `text` to a node of `gpus` GPUs of `model`, as the MIG manager
    would. `tool`: the upstreamcheck binary (None: not installed, and the apply fails)."""
    if model.mig is None:
        return MigApplied(error=f"{model.name} is not MIG-capable")  # the operator runs no MIG manager there
    if not text:
        return MigApplied(error="no mig-parted config: the ClusterPolicy names no MIG ConfigMap with config.yaml")
    if model.name not in UPSTREAM_MODELS:
        return _apply_with_gpuctl_model(text, config, model, gpus)
    if tool is None:
        return MigApplied(error="upstreamcheck is not installed: run 'gpuctl sim install'")
    with tempfile.TemporaryDirectory(prefix="gpuctl-mig-") as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(text)
        proc = subprocess.run([str(tool), "mig-apply", "--file", str(path), "--config", config, "--gpu", model.name,
                               "--gpus", str(gpus)], capture_output=True, text=True, timeout=APPLY_TIMEOUT_S)
    if proc.returncode != 0:
        return MigApplied(error=(proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1])
    return MigApplied(tuple(dict(g["mig-devices"]) if g["mig-enabled"] else None
                            for g in json.loads(proc.stdout)["gpus"]))


def _apply_with_gpuctl_model(text: str, config: str, model: GpuModel, gpus: int) -> MigApplied:
    try:
        configs = parse_mig_parted_config(text)
    except ValueError as err:
        return MigApplied(error=str(err))
    if config not in configs:
        return MigApplied(error=f"error selecting MIG config: selected mig-config not present: {config}")
    counts = configs[config]
    try:
        place(layout_from_counts(config, counts).profiles, model)
    except UsageError as err:
        return MigApplied(error=err.message)
    return MigApplied((dict(counts) if counts is not None else None,) * gpus)


def wedge_labels(labels: dict[str, str]) -> dict[str, str]:
    """The labels a wedged run leaves (reconfigure.go Run up to waitForPodsToBeDeleted): the state `pending`, and
    each operand's deploy label `paused-for-mig-change` unless it was `false` (maybeSetPaused)."""
    keys = [L.DEPLOY_PREFIX + o for o in PAUSED_OPERANDS]
    if labels.get(L.DEPLOY_PREFIX + "client"):
        keys.append(L.DEPLOY_PREFIX + "client")
    return {L.MIG_STATE: "pending",
            **{k: "false" if labels.get(k) == "false" else L.PAUSED_FOR_MIG for k in keys}}


def mig_resources(applied: MigApplied, strategy: str) -> dict[str, int]:
    """The extended resources the device plugin advertises for the MIG devices mig-parted made, GPU by GPU
    (nvidia.com/gpu per GPU where MIG is off). Raises UsageError where the strategy cannot serve them
    (single with two profiles)."""
    total: Counter[str] = Counter()
    for index, devices in enumerate(applied.gpus):
        total.update(advertised_resources(layout_from_counts(f"gpu-{index}", devices), 1, strategy))
    return dict(total)
