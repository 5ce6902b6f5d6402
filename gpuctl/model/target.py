"""The cluster a command reaches: a kubeconfig and a context in it, as kubectl's --kubeconfig and --context.

Made once (the CLI from its global flags, a library caller by hand) and taken by every gpuctl.api function
that reaches a cluster. The name a create or apply writes into the kubeconfig is a separate value
(`write_context`), never this one's `context`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuctl.model.naming import check_text
from gpuctl.util.paths import check_file_path

CONTEXT_FIELD = "--context"
KUBECONFIG_FIELD = "--kubeconfig"
MAX_CONTEXT_LENGTH = 253


def check_context(context: str, field: str = CONTEXT_FIELD) -> str:
    """A context name as kubectl takes one (a DNS-subdomain's length at most): else a UsageError naming `field`."""
    return check_text(context, field, maximum=MAX_CONTEXT_LENGTH)


@dataclass(frozen=True)
class ClusterTarget:
    """`kubeconfig`: the file (None: $KUBECONFIG, else ~/.kube/config); `context`: the context in it (None: its
    current context). Judged when made: a bad value is a UsageError naming --kubeconfig or --context."""

    kubeconfig: Path | None = None
    context: str | None = None

    def __post_init__(self) -> None:
        if self.context is not None:
            check_context(self.context)
        if self.kubeconfig is not None:
            check_file_path(self.kubeconfig, KUBECONFIG_FIELD)


DEFAULT_TARGET = ClusterTarget()
