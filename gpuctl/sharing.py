"""GPU sharing through the NVIDIA device plugin: time-slicing and MPS configs, one key per config.

The operator's device-plugin ConfigMap holds named configs; a node picks one with the label
nvidia.com/device-plugin.config=<key> (see ../shared/reference/gpu-facts.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from gpuctl.errors import UsageError

STRATEGIES = ("none", "time-slicing", "mps")
MAX_REPLICAS = 64
CONFIG_LABEL = "nvidia.com/device-plugin.config"


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


def sharing_from_flags(slices: int | None, strategy: str | None) -> Sharing:
    """`--slices N [--sharing time-slicing|mps|none]`; errors name the flag."""
    chosen = strategy or ("time-slicing" if slices else "none")
    if chosen not in STRATEGIES:
        raise UsageError("--sharing", f"unknown strategy {chosen!r}", f"use one of: {', '.join(STRATEGIES)}")
    if chosen == "none":
        if slices not in (None, 1):
            raise UsageError("--slices", f"{slices} slices need a sharing strategy", "drop --sharing none or --slices")
        return NO_SHARING
    if slices is None:
        raise UsageError("--slices", f"--sharing {chosen} needs the number of slices", "pass --slices N (N >= 2)")
    if not 2 <= slices <= MAX_REPLICAS:
        raise UsageError("--slices", f"must be between 2 and {MAX_REPLICAS}, got {slices}", "pass e.g. --slices 4")
    return Sharing(chosen, slices)


def render_plugin_config(sharing: Sharing) -> str:
    """The device-plugin config document for one ConfigMap key."""
    section = "timeSlicing" if sharing.strategy == "time-slicing" else "mps"
    body: dict = {"resources": [{"name": "nvidia.com/gpu", "replicas": sharing.replicas}]}
    if section == "timeSlicing":
        body = {"renameByDefault": False, "failRequestsGreaterThanOne": False, **body}
    doc = {"version": "v1", "flags": {"migStrategy": "none"}, "sharing": {section: body}}
    return yaml.safe_dump(doc, sort_keys=False)


def parse_plugin_config(text: str) -> Sharing:
    """Inverse of render_plugin_config, for the simulated device plugin (ValueError if malformed)."""
    doc = yaml.safe_load(text) or {}
    sharing = doc.get("sharing") or {}
    for section, strategy in (("timeSlicing", "time-slicing"), ("mps", "mps")):
        if section in sharing:
            resources = sharing[section].get("resources") or []
            replicas = next((int(r["replicas"]) for r in resources if r.get("name") == "nvidia.com/gpu"), 1)
            if replicas < 2:
                raise ValueError(f"{section} replicas must be >= 2, got {replicas}")
            return Sharing(strategy, replicas)
    return NO_SHARING
