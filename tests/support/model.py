"""gpuctl's model, for the tests: the catalog, node groups, label names, MIG geometry, sharing, charts, taints."""

from __future__ import annotations

from gpuctl.model import labels, promql
from gpuctl.model.catalog import GPUS, GpuModel, get_gpu
from gpuctl.model.change import Change
from gpuctl.model.charts import DRA_DRIVER, GPU_OPERATOR, chart_ref
from gpuctl.model.dra import PLUGIN_COMPONENT, PLUGIN_COMPONENT_LABEL
from gpuctl.model.labels import NODEGROUP
from gpuctl.model.mig import config_name, mig_parted_config, parse_layout, place
from gpuctl.model.sharing import DEFAULT_CONFIG_KEY, Sharing, plugin_configs
from gpuctl.model.spec import NodeGroupSpec
from gpuctl.model.stack_spec import StackSpec
from gpuctl.model.taints import DEFAULT_GPU_TAINTS, Taint

__all__ = ["DEFAULT_CONFIG_KEY", "DEFAULT_GPU_TAINTS", "DRA_DRIVER", "GPUS", "GPU_OPERATOR", "NODEGROUP",
           "PLUGIN_COMPONENT", "PLUGIN_COMPONENT_LABEL", "Change", "GpuModel", "NodeGroupSpec", "Sharing",
           "StackSpec", "Taint", "chart_ref", "config_name", "get_gpu", "labels", "mig_parted_config",
           "parse_layout", "place", "plugin_configs", "promql"]
