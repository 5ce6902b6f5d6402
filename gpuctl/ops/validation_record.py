"""Which platform last passed validation, recorded on the cluster: `apply` exits 0 only when the platform it
describes has passed validation since its last change, also after a run that was killed between its writes
and its smoke test. The record (ConfigMap `gpuctl-validated`, beside gpuctl's GPU configs) holds the digest
of the spec that passed; a run that writes empties it first, and a run whose spec's digest differs from it
validates even when it has nothing to write."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any

from gpuctl.kube.kube import Kube
from gpuctl.kube.objects import ensure_config_map_keys, read_config_map_data

VALIDATED_CONFIGMAP = "gpuctl-validated"
_KEY = "spec-sha256"


def spec_digest(spec: Any) -> str:
    """A digest of a PlatformSpec (a dataclass): equal specs, equal digests, in every process. What a command
    line left unsaid (`unstated`) is not state: the spec has taken the recorded values by then."""
    state = {k: v for k, v in asdict(spec).items() if k != "unstated"}
    text = json.dumps(state, sort_keys=True, default=_stable)
    return hashlib.sha256(text.encode()).hexdigest()


def _stable(value: Any) -> Any:
    """A set in a fixed order (str() of one follows the process's hash seed), anything else as text."""
    return sorted(value, key=str) if isinstance(value, (set, frozenset)) else str(value)


def read_validated(kube: Kube, namespace: str) -> str:
    """The digest of the spec last validated on this cluster; "" when none is (or a change came since)."""
    return (read_config_map_data(kube, namespace, VALIDATED_CONFIGMAP) or {}).get(_KEY, "")


def forget_validated(kube: Kube, namespace: str) -> None:
    """Before a run's first write: until its validation passes, nothing on the cluster counts as validated."""
    if read_validated(kube, namespace):
        ensure_config_map_keys(kube, namespace, VALIDATED_CONFIGMAP, {_KEY: ""})


def record_validated(kube: Kube, namespace: str, digest: str) -> None:
    ensure_config_map_keys(kube, namespace, VALIDATED_CONFIGMAP, {_KEY: digest})
