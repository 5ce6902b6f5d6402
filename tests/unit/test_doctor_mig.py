"""doctor --fix's MIG repairs (gpuctl/ops/doctor/mig_repair.py) and validate's `doctor` check.

The plan: a wedged change (gpu-operator #2833: `pending`, deploy labels `paused-for-mig-change`) is finished on the
node's own config after the paused labels go back to their value before the pause (`true`, what mig-parted v0.15.0
reconfigure.go maybeSetTrue restores, or the group's recorded value); a failed one (mig-parted #484) rolls back to
the group's recorded layout, or re-applies it where the node already names it; with no recorded layout it is named
only. The repair: each step said before its patch, the label removed and set again (the MIG manager runs a change
only when the label's value changes: main.go ContinuouslySyncMigConfigChanges), and a second failure said with the
MIG manager's log command, not retried."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.model.catalog import GPUS
from gpuctl.model.mig import config_name, parse_layout
from gpuctl.model.sharing import NO_SHARING
from gpuctl.model.spec import GroupPlan, NodeGroupSpec
from gpuctl.ops import validate
from gpuctl.ops.doctor import doctor as doctor_module
from gpuctl.ops.doctor import mig_repair
from gpuctl.ops.doctor.findings import Finding
from gpuctl.ops.doctor.mig_repair import (
    FINISH,
    REAPPLY,
    ROLLBACK,
    MigRepair,
    describe,
    plan_mig_repair,
    repair_mig,
)
from gpuctl.simulator.mig_manager import wedge_labels
from gpuctl.util.errors import WaitTimeout

A100 = GPUS["a100-40gb"]
LAYOUT = parse_layout("3g.20gb-2x2g.10gb", A100)
RECORDED = config_name(LAYOUT)  # custom-3g.20gb-2x2g.10gb
PLUGIN, DCGM, CLIENT = (f"{L.DEPLOY_PREFIX}{c}" for c in ("device-plugin", "dcgm-exporter", "client"))


def group(labels: dict[str, str] | None = None, mig: bool = True) -> GroupPlan:
    return GroupPlan(NodeGroupSpec("a100", A100, 1, 1), NO_SHARING, LAYOUT if mig else None, labels or {})


def node(labels: dict[str, str], name: str = "a100-0") -> KubeObject:
    return KubeObject({"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": name, "labels": {L.NODEGROUP: "a100", **labels}}})


WEDGED = {L.MIG_CONFIG: RECORDED, L.MIG_STATE: "pending", PLUGIN: L.PAUSED_FOR_MIG, DCGM: L.PAUSED_FOR_MIG,
          CLIENT: L.PAUSED_FOR_MIG, f"{L.DEPLOY_PREFIX}driver": "true"}


# -- the plan -------------------------------------------------------------------------------------------------


def test_a_wedged_change_is_finished_on_its_own_config_with_the_paused_labels_restored() -> None:
    repair = plan_mig_repair(node(WEDGED), group())
    assert repair == MigRepair("a100-0", FINISH, RECORDED, ((CLIENT, "true"), (DCGM, "true"), (PLUGIN, "true")))
    # the change wedged is the node's, whatever the record says (a `mig apply` of another layout), and with no record
    other = {**WEDGED, L.MIG_CONFIG: "all-1g.5gb"}
    assert plan_mig_repair(node(other), None) == MigRepair("a100-0", FINISH, "all-1g.5gb", repair.restore)


def test_a_paused_label_goes_back_to_the_value_the_groups_record_gives_it() -> None:
    repair = plan_mig_repair(node(WEDGED), group({DCGM: "false", "team": "a"}))
    assert repair is not None and dict(repair.restore) == {CLIENT: "true", DCGM: "false", PLUGIN: "true"}
    assert describe(repair, RECORDED) == ("restores the deploy labels dcgm-exporter to false; client, device-plugin "
                                          f"to true, then finishes the change to {RECORDED}")


def test_pending_alone_is_no_wedge_and_success_needs_nothing() -> None:
    assert plan_mig_repair(node({L.MIG_CONFIG: RECORDED, L.MIG_STATE: "pending"}), group()) is None
    assert plan_mig_repair(node({L.MIG_CONFIG: RECORDED, L.MIG_STATE: "success"}), group()) is None


def test_a_failed_change_rolls_back_to_the_recorded_layout_or_re_applies_it_once() -> None:
    failed_other = node({L.MIG_CONFIG: "all-1g.5gb", L.MIG_STATE: "failed"})
    assert plan_mig_repair(failed_other, group()) == MigRepair("a100-0", ROLLBACK, RECORDED)
    failed_same = node({L.MIG_CONFIG: RECORDED, L.MIG_STATE: "failed"})
    assert plan_mig_repair(failed_same, group()) == MigRepair("a100-0", REAPPLY, RECORDED)
    # nothing known good: no group, or a group of no MIG layout
    assert plan_mig_repair(failed_other, None) is None
    assert plan_mig_repair(failed_other, group(mig=False)) is None


def test_the_plan_travels_in_the_findings_action_and_back() -> None:
    repair = MigRepair("a100-0", FINISH, RECORDED, ((DCGM, "false"), (PLUGIN, "true")))
    assert MigRepair.of_action(repair.action()) == repair
    assert MigRepair.of_action(MigRepair("n", REAPPLY, RECORDED).action()) == MigRepair("n", REAPPLY, RECORDED)


# -- the repair -----------------------------------------------------------------------------------------------


class FakeKube:
    """One node; a patch merges its labels; the MIG manager answers `answer` once the label is set again after the
    node's state was cleared (as the real one answers a change of the label's value)."""

    def __init__(self, labels: dict[str, str], answer: str = "success", mig_pod: bool = True) -> None:
        self.labels = dict(labels)
        self.answer = answer
        self.mig_pod = mig_pod
        self.done: list[str] = []

    def patch(self, api_version: str, kind: str, name: str, patch: dict[str, Any],
              namespace: str | None = None) -> KubeObject:
        changes = patch["metadata"]["labels"]
        self.done.append(f"patch {name} {sorted(changes.items(), key=lambda kv: kv[0])}")
        for key, value in changes.items():
            if value is None:
                self.labels.pop(key, None)
            else:
                self.labels[key] = value
        if L.MIG_CONFIG in changes and changes[L.MIG_CONFIG] is not None and L.MIG_STATE not in self.labels:
            self.labels[L.MIG_STATE] = self.answer
        return node(self.labels)

    def list(self, api_version: str, kind: str, namespace: str | None = None, *, labels: str = "",
             fields: str = "", what: str | None = None) -> list[KubeObject]:
        if kind == "Pod":
            assert (labels, fields) == ("app=nvidia-mig-manager", "spec.nodeName=a100-0")
            return [KubeObject({"metadata": {"name": "nvidia-mig-manager-x7k2p", "namespace": namespace}})] \
                if self.mig_pod else []
        return [node(self.labels)]


@pytest.fixture
def said(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    lines: list[str] = []
    monkeypatch.setattr(mig_repair, "info", lambda line: lines.append(line))
    return lines


def test_a_wedge_is_finished_each_step_said_first_the_label_removed_and_set_again(said: list[str]) -> None:
    kube = FakeKube(WEDGED)
    repair = plan_mig_repair(node(WEDGED), group())
    assert repair is not None
    assert repair_mig(kube, repair, "gpu-operator", 30) is True  # type: ignore[arg-type]
    assert kube.done == [
        f"patch a100-0 {[(CLIENT, 'true'), (DCGM, 'true'), (PLUGIN, 'true')]}",
        f"patch a100-0 {[(L.MIG_CONFIG, None), (L.MIG_STATE, None)]}",
        f"patch a100-0 {[(L.MIG_CONFIG, RECORDED)]}"]
    assert said[0].startswith("fix: node a100-0: restoring the GPU operands' deploy labels the MIG manager paused")
    assert said[1].startswith(f"fix: node a100-0: finishing its wedged MIG change: re-labelling {L.MIG_CONFIG}="
                              f"{RECORDED} (removed with its state, then set again")
    assert said[-1] == f"fix: node a100-0: {RECORDED} applied ({L.MIG_STATE}=success)"
    assert kube.labels[PLUGIN] == "true" and kube.labels[L.MIG_STATE] == "success"


def test_a_failed_change_rolls_back_in_one_patch_that_clears_its_state(said: list[str]) -> None:
    kube = FakeKube({L.MIG_CONFIG: "all-1g.5gb", L.MIG_STATE: "failed"})
    assert repair_mig(kube, MigRepair("a100-0", ROLLBACK, RECORDED), "gpu-operator", 30) is True  # type: ignore[arg-type]
    assert kube.done == [f"patch a100-0 {[(L.MIG_CONFIG, RECORDED), (L.MIG_STATE, None)]}"]
    assert said[0].startswith(f"fix: node a100-0: rolling back its failed MIG change to {L.MIG_CONFIG}={RECORDED}")


def test_a_change_that_fails_again_is_said_with_the_mig_managers_log_and_not_retried(said: list[str]) -> None:
    kube = FakeKube({L.MIG_CONFIG: RECORDED, L.MIG_STATE: "failed"}, answer="failed")
    assert repair_mig(kube, MigRepair("a100-0", REAPPLY, RECORDED), "gpu-operator", 30) is False  # type: ignore[arg-type]
    assert len(kube.done) == 2  # removed and set again, once
    assert said[-1] == (f"fix: node a100-0: the MIG manager failed to apply {RECORDED} again; not retried: read its "
                        "log (kubectl logs -n gpu-operator nvidia-mig-manager-x7k2p)")
    kube = FakeKube({L.MIG_CONFIG: RECORDED, L.MIG_STATE: "failed"}, answer="failed", mig_pod=False)
    assert repair_mig(kube, MigRepair("a100-0", REAPPLY, RECORDED), "gpu-operator", 30) is False  # type: ignore[arg-type]
    assert said[-1].endswith("(kubectl logs -n gpu-operator -l app=nvidia-mig-manager)")


def test_a_manager_that_never_answers_is_a_timeout_naming_its_log(said: list[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube(WEDGED, answer="pending")
    repair = plan_mig_repair(node(WEDGED), group())
    assert repair is not None

    def timeout(*args: Any, **kwargs: Any) -> None:
        raise WaitTimeout("nvidia.com/mig.config.state=success: 0 of 1 after 1s")

    monkeypatch.setattr(mig_repair, "wait_for_mig_state", timeout)
    with pytest.raises(WaitTimeout) as raised:
        repair_mig(kube, repair, "gpu-operator", 1)  # type: ignore[arg-type]
    assert raised.value.message.startswith(f"node a100-0: the MIG manager has not applied {RECORDED}")
    assert "kubectl logs -n gpu-operator nvidia-mig-manager-x7k2p" in (raised.value.hint or "")


def test_fix_runs_each_mig_repair_in_the_operators_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    repair = MigRepair("a100-0", ROLLBACK, RECORDED)
    finding = Finding("mig-change-failed", "error", "node a100-0", {}, "", "", node="a100-0", action=repair.action())
    done: list[tuple[MigRepair, str, float]] = []
    monkeypatch.setattr(doctor_module, "repair_mig", lambda kube, r, ns, timeout: done.append((r, ns, timeout)))
    monkeypatch.setattr(doctor_module, "read_policies", lambda kube: [])
    monkeypatch.setattr(doctor_module, "read_operator_deployments", lambda kube: [])
    monkeypatch.setattr(doctor_module, "doctor", lambda kube, nodegroup, node: [])
    assert doctor_module.fix(object(), [finding], timeout=42) == []  # type: ignore[arg-type]
    assert done == [(repair, "gpu-operator", 42)]


# -- validate's `doctor` check -------------------------------------------------------------------------------


def finding(check: str, severity: str = "error", on: str = "node a100-0") -> Finding:
    return Finding(check, severity, on, {}, f"{check} cause", "repair")


def test_validate_fails_on_doctors_errors_and_lists_them(monkeypatch: pytest.MonkeyPatch) -> None:
    found = [finding("mig-change-wedged"), finding("gpu-taint-missing", "warning"), finding("security-floor")]
    asked: list[str | None] = []

    def doctor(kube: object, nodegroup: str | None, with_xids: bool) -> list[Finding]:
        assert with_xids is False  # validate lists the checks: it reaches no Prometheus for XID evidence
        asked.append(nodegroup)
        return found

    monkeypatch.setattr(validate, "doctor", doctor)
    check = validate.check_doctor(object(), "a100")  # type: ignore[arg-type]
    assert (check.name, check.ok, asked) == ("doctor", False, ["a100"])
    assert check.detail == ("mig-change-wedged on node a100-0: mig-change-wedged cause; not failing validate: "
                            "gpu-taint-missing, security-floor (see 'gpuctl doctor'); 'gpuctl doctor' names each "
                            "repair")


def test_validate_passes_with_warnings_and_a_security_advisory_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validate, "doctor", lambda kube, nodegroup, with_xids: [finding("security-floor")])
    check = validate.check_doctor(object(), None)  # type: ignore[arg-type]
    assert check.ok and check.detail == "no errors found; not failing validate: security-floor (see 'gpuctl doctor')"
    monkeypatch.setattr(validate, "doctor", lambda kube, nodegroup, with_xids: [])
    assert validate.check_doctor(object(), None).as_dict() == {  # type: ignore[arg-type]
        "check": "doctor", "ok": True, "detail": "no errors found"}


def test_many_errors_are_cut_at_five(monkeypatch: pytest.MonkeyPatch) -> None:
    found = [finding("gpu-failed", on=f"node n{i}") for i in range(7)]
    monkeypatch.setattr(validate, "doctor", lambda kube, nodegroup, with_xids: found)
    detail = validate.check_doctor(object(), None).detail  # type: ignore[arg-type]
    assert detail.count("gpu-failed on") == 5 and "(+2 more)" in detail


# -- the sim's wedge ------------------------------------------------------------------------------------------


def test_the_sims_wedge_pauses_as_mig_parted_does() -> None:
    # reconfigure.go shutdownKubernetesGPUClients: five operands, `false` kept, the client's only where set
    assert wedge_labels({DCGM: "false", PLUGIN: "true"}) == {
        L.MIG_STATE: "pending", PLUGIN: L.PAUSED_FOR_MIG, DCGM: "false",
        **{f"{L.DEPLOY_PREFIX}{c}": L.PAUSED_FOR_MIG for c in ("gpu-feature-discovery", "dcgm", "nvsm")}}
    assert wedge_labels({CLIENT: "true"})[CLIENT] == L.PAUSED_FOR_MIG
