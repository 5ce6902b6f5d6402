"""GPU sharing through the NVIDIA device plugin: time-slicing and MPS configs, one key per config.

The operator's device-plugin ConfigMap holds named configs; a node picks one with the label
nvidia.com/device-plugin.config=<key>, and a node without the label gets the `default` key
(see ../shared/reference/gpu-facts.md). The configs carry no `flags`: under the GPU Operator the
plugin's MIG_STRATEGY env (ClusterPolicy mig.strategy) overrides any flag in the file
(k8s-device-plugin cmd/nvidia-device-plugin/main.go, loadConfig; checked by tests/conformance).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from gpuctl.model.catalog import GpuModel
from gpuctl.util.choices import Choice
from gpuctl.util.errors import UsageError
from gpuctl.util.lazy_import import LazyImport

if TYPE_CHECKING:
    import yaml
else:
    yaml = LazyImport("yaml")  # the node-group model loads this module, `gpuctl --help` loads that

STRATEGIES = ("none", "time-slicing", "mps")
# The one reading of a sharing strategy's name (--sharing; any case, near misses answered).
STRATEGY = Choice("strategy", STRATEGIES, {"timeslicing": ("time-slicing",), "timeslice": ("time-slicing",),
                                           "time-slice": ("time-slicing",), "slicing": ("time-slicing",),
                                           "time_slicing": ("time-slicing",), "off": ("none",),
                                           "disabled": ("none",)})
# A sharing strategy's section in the device plugin's config (`sharing.timeSlicing`), which is also its key
# under a spec's node group `sharing:` (specfile.py, cli/documents.py).
SECTIONS = {"time-slicing": "timeSlicing", "mps": "mps"}
STRATEGY_OF_SECTION = {section: strategy for strategy, section in SECTIONS.items()}
MAX_REPLICAS = 64
CONFIG_LABEL = "nvidia.com/device-plugin.config"
# The key unlabelled nodes load. Without it the config-manager's `single` fallback would hand them
# the only sharing config there is (k8s-device-plugin cmd/config-manager/main.go, updateConfigName).
DEFAULT_CONFIG_KEY = "default"


@dataclass(frozen=True)
class Sharing:
    strategy: str  # none | time-slicing | mps
    replicas: int  # 1 for none, >= 2 otherwise

    @property
    def config_key(self) -> str | None:
        """The ConfigMap key (and node label value); None: the plugin's default, no sharing."""
        if self.strategy == "none":
            return None
        return f"slice-{self.replicas}" if self.strategy == "time-slicing" else f"mps-{self.replicas}"


NO_SHARING = Sharing("none", 1)


def max_replicas(strategy: str, model: GpuModel) -> int:
    """The most replicas the device plugin accepts: an MPS server takes 48 clients from compute
    capability 7.5 on, 16 before (k8s-device-plugin cmd/mps-control-daemon/mps/device.go, maxClients)."""
    if strategy == "mps":
        return 48 if model.compute_capability >= (7, 5) else 16
    return MAX_REPLICAS


def check_sharing_fits(sharing: Sharing, model: GpuModel, field: str) -> None:
    """Refuse replicas the device plugin would refuse on this GPU; `field` names the replicas input."""
    limit = max_replicas(sharing.strategy, model)
    if sharing.replicas > limit:
        raise UsageError(field, f"{sharing.strategy} on {model.name} takes at most {limit} replicas, got "
                         f"{sharing.replicas}", f"use {limit} or fewer")


def render_plugin_config(sharing: Sharing) -> str:
    """The device-plugin config document for one ConfigMap key (NO_SHARING: the plain default)."""
    doc: dict = {"version": "v1"}
    if sharing.config_key:
        section = SECTIONS[sharing.strategy]
        body: dict = {"resources": [{"name": "nvidia.com/gpu", "replicas": sharing.replicas}]}
        if sharing.strategy == "time-slicing":
            body = {"renameByDefault": False, "failRequestsGreaterThanOne": False, **body}
        doc["sharing"] = {section: body}
    return yaml.safe_dump(doc, sort_keys=False)


def plugin_configs(sharings: list[Sharing]) -> dict[str, str]:
    """The device-plugin ConfigMap's data: one key per sharing config in use plus the default;
    empty when nothing is shared, so the operator is never pointed at a ConfigMap with no keys."""
    keys = {s.config_key: render_plugin_config(s) for s in sharings if s.config_key}
    return {DEFAULT_CONFIG_KEY: render_plugin_config(NO_SHARING), **keys} if keys else {}


@lru_cache(maxsize=64)
def parse_plugin_config(text: str) -> Sharing:
    """Inverse of render_plugin_config, for the simulated device plugin (ValueError if malformed). Cached: a
    capacity check asks it for each of 1,000 nodes, which share a handful of configs."""
    doc = yaml.safe_load(text) or {}
    sharing = doc.get("sharing") or {}
    for strategy, section in SECTIONS.items():
        if section in sharing:
            resources = sharing[section].get("resources") or []
            replicas = next((int(r["replicas"]) for r in resources if r.get("name") == "nvidia.com/gpu"), 1)
            if replicas < 2:
                raise ValueError(f"{section} replicas must be >= 2, got {replicas}")
            return Sharing(strategy, replicas)
    return NO_SHARING
