"""A real OpenStack (Keystone + Magnum from PyPI) on 127.0.0.1 whose Magnum clusters are gpuctl sim
clusters; see bed.py. `OpenStackBed` is imported lazily: the bed's own processes import this package
(driver.py) with none of gpuctl's dependencies."""

from __future__ import annotations

from typing import Any

__all__ = ["OpenStackBed"]


def __getattr__(name: str) -> Any:
    if name == "OpenStackBed":
        from tests.beds.openstack.bed import OpenStackBed

        return OpenStackBed
    raise AttributeError(name)
