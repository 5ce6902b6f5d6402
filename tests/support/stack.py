"""gpuctl's GPU stack, for the tests: the charts' values and releases, Helm plans, ownership, Karpenter objects.

The GPU operator's and the DRA driver's namespaces are both NAMESPACE in gpuctl; here they are named apart."""

from __future__ import annotations

from gpuctl.stack.dra_driver import NAMESPACE as DRA_DRIVER_NAMESPACE
from gpuctl.stack.dra_driver import RELEASE as DRA_DRIVER_RELEASE
from gpuctl.stack.dra_driver import dra_values
from gpuctl.stack.helm import HelmTarget, plan_release
from gpuctl.stack.karpenter import render_nodeoverlay, render_nodepool
from gpuctl.stack.owners import is_device_plugin
from gpuctl.stack.releases import operator_release
from gpuctl.stack.values import DEVICE_PLUGIN_CONFIGMAP, nfd_values, operator_values
from gpuctl.stack.values import NAMESPACE as OPERATOR_NAMESPACE

__all__ = ["DEVICE_PLUGIN_CONFIGMAP", "DRA_DRIVER_NAMESPACE", "DRA_DRIVER_RELEASE", "OPERATOR_NAMESPACE",
           "HelmTarget", "dra_values", "is_device_plugin", "nfd_values", "operator_release", "operator_values",
           "plan_release", "render_nodeoverlay", "render_nodepool"]
