"""The two Helm releases of the GPU stack, from a StackSpec."""

from __future__ import annotations

from gpuctl.model.charts import GPU_OPERATOR, NFD, chart_ref
from gpuctl.model.stack_spec import StackSpec
from gpuctl.stack.helm import Release
from gpuctl.stack.values import NAMESPACE, nfd_values, operator_values


def nfd_release(stack: StackSpec) -> Release:
    return Release("node-feature-discovery", NAMESPACE, chart_ref(NFD, stack.charts), nfd_values(stack))


def operator_release(stack: StackSpec) -> Release:
    return Release("gpu-operator", NAMESPACE, chart_ref(GPU_OPERATOR, stack.charts), operator_values(stack))
