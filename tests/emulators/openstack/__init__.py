"""Keystone v3 + Magnum v1 emulator backed by gpuctl sim clusters (see server.py)."""

from tests.emulators.openstack.server import OpenStackEmulator

__all__ = ["OpenStackEmulator"]
