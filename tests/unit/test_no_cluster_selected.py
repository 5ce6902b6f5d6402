"""Issue 27: before any cluster exists (no kubeconfig, an empty one, no current context, or one naming a cluster
the file lacks), every cluster-side command exits 2 with one line naming `gpuctl cluster create` and --context;
a --context the kubeconfig lacks exits 2 naming it and the contexts there are. Run as a user runs them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_gpuctl

COMMANDS = [["status"], ["validate"], ["tenant", "list"], ["top"], ["advise"]]
FIX = "create one with 'gpuctl cluster create' or pick one with --context NAME"
DANGLING = ("apiVersion: v1\nkind: Config\ncurrent-context: ux-ctx\nclusters: []\nusers: []\n"
            "contexts: [{name: ux-ctx, context: {cluster: gpuctl-sim-ux, user: gpuctl-sim-ux}}]\n")


def one_error_line(proc) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    assert proc.stdout == ""
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.slow  # gpuctl processes, one a case
def test_no_kubeconfig(command: list[str], isolated_env: dict[str, str]) -> None:
    line = one_error_line(run_gpuctl(*command, env=isolated_env))
    assert line == f"error: no cluster selected: there is no kubeconfig at {isolated_env['KUBECONFIG']}; {FIX}"


@pytest.mark.parametrize(("content", "why"), [
    ("", "the kubeconfig {path} has no current context"),
    ("apiVersion: v1\nkind: Config\ncontexts: []\n", "the kubeconfig {path} has no current context"),
    # what `cluster delete` used to leave behind: a current context whose cluster entry is gone
    (DANGLING, "context 'ux-ctx' of {path} names cluster 'gpuctl-sim-ux', which it does not hold (deleted?)"),
], ids=["empty", "no current context", "dangling"])
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.slow  # gpuctl processes, one a case
def test_a_kubeconfig_selecting_no_cluster(command: list[str], content: str, why: str,
                                           isolated_env: dict[str, str]) -> None:
    path = Path(isolated_env["KUBECONFIG"])
    path.parent.mkdir()
    path.write_text(content)
    line = one_error_line(run_gpuctl(*command, env=isolated_env))
    assert line == f"error: no cluster selected: {why.format(path=path)}; {FIX}"


def test_a_context_that_is_not_there_is_named_with_those_that_are(isolated_env: dict[str, str]) -> None:
    path = Path(isolated_env["KUBECONFIG"])
    path.parent.mkdir()
    path.write_text(DANGLING.replace("contexts: [", "contexts: [{name: prod, context: {cluster: p, user: p}}, "))
    line = one_error_line(run_gpuctl("--context", "ux", "status", env=isolated_env))
    assert line == f"error: --context: no context 'ux' in {path}; contexts there: prod, ux-ctx"
