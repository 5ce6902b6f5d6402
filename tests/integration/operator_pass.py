"""A whole pass of the sim's GPU Operator over a node, begun after the caller's last write: the decision a
test waits for where what it proves is that the operator did NOT do something (reload a config, put a
resource back). A fixed sleep would pass on a machine too slow for the operator to have looked at all.

The operator (gpuctl/simulator/operator.py) reconciles one node after another, pass after pass, in one
process: it reads the nodes (as its watch keeps them: kube/informer.py) and the ClusterPolicy's ConfigMaps,
decides each node's labels, annotations and allocatable, and writes them in that order, conditional on the
node as it read it. Taking away a label it owns (nvidia.com/gpu.present, which it puts on every GPU node:
operands.node_labels) and seeing it back shows a pass that read the node after the caller's writes; its
allocatable is written just after that label, so a second round shows a later pass, and with it every write of
the first one done.
"""

from __future__ import annotations

import time
from typing import Any

from tests.support.kube import MERGE_PATCH

MARK = "nvidia.com/gpu.present"


def operator_pass(v1: Any, node: str, timeout: float = 60.0) -> Any:
    """Wait until a pass of the sim's operator over `node` that began after this call has written all it decided
    there; the node as it is then."""
    deadline = time.monotonic() + timeout
    for _ in range(2):  # the first round: a pass begun after the call; the second: that pass done
        v1.patch_node(node, {"metadata": {"labels": {MARK: None}}}, _content_type=MERGE_PATCH)
        while (found := v1.read_node(node)).metadata.labels.get(MARK) != "true":
            assert time.monotonic() < deadline, f"the sim's operator did not label {node} {MARK} again in {timeout:.0f}s"
            time.sleep(0.2)
    return found
