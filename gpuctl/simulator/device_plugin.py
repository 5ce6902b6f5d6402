"""The simulated device plugin's config loading, done by the real device plugin's code.

Each node's config goes through `upstreamcheck plugin-config` (gpuctl/tools/upstreamcheck), which
selects the ConfigMap key as the plugin's config-manager does and loads it with the plugin's own
config package and checks, so a config the real plugin refuses leaves the sim node without GPUs too.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpuctl.model.sharing import NO_SHARING, Sharing

LOAD_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class PluginLoad:
    """What a device-plugin pod ended with: the sharing it serves, or the error it exits with."""

    sharing: Sharing = NO_SHARING
    error: str | None = None


def load_plugin_config(tool: Path, configs: dict[str, str] | None, node_config: str, default: str,
                       mig_strategy: str, compute_capability: tuple[int, int], mig_enabled: bool) -> PluginLoad:
    """Load a node's config as the plugin would; `configs` None: the operator names no ConfigMap
    (no config-manager: the plugin serves whole GPUs with its built-in defaults)."""
    if configs is None:
        return PluginLoad(NO_SHARING)
    with tempfile.TemporaryDirectory(prefix="gpuctl-plugin-") as tmp:
        for key, text in configs.items():
            (Path(tmp) / key).write_text(text)
        args = [str(tool), "plugin-config", "--dir", tmp, "--mig-strategy", mig_strategy,
                "--compute-capability", f"{compute_capability[0]}.{compute_capability[1]}"]
        if node_config:
            args += ["--node-config", node_config]
        if default:
            args += ["--default", default]
        if mig_enabled:
            args.append("--mig-enabled")
        proc = subprocess.run(args, capture_output=True, text=True, timeout=LOAD_TIMEOUT_S)
    if proc.returncode != 0:
        return PluginLoad(error=(proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1])
    sharing = json.loads(proc.stdout)["sharing"]
    replicas = max((r.get("replicas") or 1 for r in sharing.get("resources") or []), default=1)
    if sharing["strategy"] == "none":
        return PluginLoad(NO_SHARING)
    return PluginLoad(Sharing(sharing["strategy"], int(replicas)))
