"""Issue 29: inputs are judged once, at gpuctl.api, for the CLI and library callers alike. Each call below has one
bad input and no cluster behind it: the UsageError names the field as the CLI's flag does, before any cluster,
cloud or kubeconfig is touched (a `confirm` callback is never reached)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpuctl.util.errors import UsageError

if TYPE_CHECKING:  # the names gpuctl's __getattr__ hands out, with their signatures for mypy
    from gpuctl import api as gpuctl
else:
    import gpuctl


def _never() -> None:
    raise AssertionError("confirmed before every input was judged")


BAD = "Bad_Name"
CALLS: dict[str, tuple[Callable[[], Any], str]] = {
    "gpu_status": (lambda: gpuctl.gpu_status(nodegroup=BAD), "--nodegroup"),
    "validate_cluster nodegroup": (lambda: gpuctl.validate_cluster(nodegroup=BAD), "--nodegroup"),
    "validate_cluster image": (lambda: gpuctl.validate_cluster(image=" padded "), "--image"),
    "validate_cluster timeout": (lambda: gpuctl.validate_cluster(timeout=-1), "--timeout"),
    "remove_tenant": (lambda: gpuctl.remove_tenant(BAD, confirm=_never), "NAME"),
    "delete_cluster": (lambda: gpuctl.delete_cluster("sim", BAD, confirm=_never), "--name"),
    "delete_node_group cluster": (lambda: gpuctl.delete_node_group("sim", BAD, "gpu", confirm=_never), "--cluster"),
    "delete_node_group name": (lambda: gpuctl.delete_node_group("sim", "demo", BAD, confirm=_never), "--name"),
    "scale_node_group name": (lambda: gpuctl.scale_node_group("sim", "demo", BAD, 1), "--name"),
    "scale_node_group nodes": (lambda: gpuctl.scale_node_group("sim", "demo", "gpu", -1), "--nodes"),
    "scale_node_group nothing": (lambda: gpuctl.scale_node_group("sim", "demo", "gpu", None), "--nodes"),
    "get_node_group": (lambda: gpuctl.get_node_group("sim", BAD, "gpu"), "--cluster"),
    "list_node_groups": (lambda: gpuctl.list_node_groups("sim", BAD), "--cluster"),
    "top nodegroup": (lambda: gpuctl.top(nodegroup=BAD), "--nodegroup"),
    "plan_platform write_context": (lambda: gpuctl.plan_platform(None, write_context=" x"), "--context"),  # type: ignore[arg-type]
    "target context": (lambda: gpuctl.ClusterTarget(context=""), "--context"),
    "target kubeconfig": (lambda: gpuctl.ClusterTarget(kubeconfig=Path("/")), "--kubeconfig"),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_a_bad_input_is_refused_at_the_api_naming_its_field(call: str, isolated_env: dict[str, str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("GPUCTL_STATE_DIR", "GPUCTL_CACHE_DIR", "KUBECONFIG"):  # nothing real to reach, should it try
        monkeypatch.setenv(key, isolated_env[key])
    function, field = CALLS[call]
    with pytest.raises(UsageError) as raised:
        function()
    assert raised.value.field == field, raised.value
    assert "\n" not in str(raised.value)


def test_the_target_is_one_value_the_cli_makes_once() -> None:
    from gpuctl.cli.settings import make_settings

    settings = make_settings(None, "ux-ctx", "table", 0, False)
    assert settings.target == gpuctl.ClusterTarget(None, "ux-ctx")
    with pytest.raises(UsageError) as raised:
        make_settings(None, "", "table", 0, False)
    assert raised.value.field == "--context"
