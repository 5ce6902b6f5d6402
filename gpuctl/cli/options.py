"""Options shared by the commands of every provider: the same verbs and flags everywhere."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

Cloud = Annotated[str, typer.Option("--cloud", help="Provider: sim (a local simulated GPU cluster).")]
ClusterName = Annotated[str, typer.Option("--cluster", help="Cluster name.")]
Nodes = Annotated[int, typer.Option("--nodes", help="Number of GPU nodes.")]
GpusPerNode = Annotated[
    Optional[int], typer.Option("--gpus-per-node", help="GPUs per node (default: from the GPU catalog).")
]
Gpu = Annotated[str, typer.Option("--gpu", help="GPU model from 'gpuctl gpus' (t4, a100-40gb, ...).")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
