"""gpuctl's door to Kubernetes, for the tests: its client, its errors, its patch types, kubeconfig and nodes."""

from __future__ import annotations

from gpuctl.kube.cached_lists import cached_lists
from gpuctl.kube.client import api_client
from gpuctl.kube.errors import KubeApiError, KubeConflict, KubeNotFound
from gpuctl.kube.informer import Informer
from gpuctl.kube.kube import Kube
from gpuctl.kube.kubeconfig import write_kubeconfig
from gpuctl.kube.nodes import list_nodes_json, node_patch
from gpuctl.kube.objects import APPLY_PATCH, MERGE_PATCH
from gpuctl.kube.prometheus import Prometheus

__all__ = ["APPLY_PATCH", "MERGE_PATCH", "Informer", "Kube", "KubeApiError", "KubeConflict", "KubeNotFound", "Prometheus",
           "api_client", "cached_lists", "list_nodes_json", "node_patch", "write_kubeconfig"]
