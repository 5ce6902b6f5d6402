"""NVIDIA XID errors: what an XID means and what brings the GPU back, from NVIDIA's XID catalogue
(https://docs.nvidia.com/deploy/xid-errors/, "XID Catalog" and "Recommended actions"), for the XIDs that make the
device plugin mark a GPU unhealthy and those it ignores (k8s-device-plugin internal/rm/health.go ignoredXids)."""

from __future__ import annotations

from dataclasses import dataclass

XID_CATALOGUE = "https://docs.nvidia.com/deploy/xid-errors/"
RESET = "reset"  # a GPU reset (nvidia-smi -r, or a node reboot) clears it
RESET_OR_REPLACE = "reset-or-replace"  # reset; replace the GPU (or the node) where it comes back
APPLICATION = "application"  # an application's error: the GPU stays usable


@dataclass(frozen=True)
class Xid:
    number: int
    meaning: str
    action: str


XIDS = {x.number: x for x in (
    Xid(13, "graphics engine exception (an application's error)", APPLICATION),
    Xid(31, "GPU memory page fault (an application's error)", APPLICATION),
    Xid(43, "GPU stopped processing (an application's error)", APPLICATION),
    Xid(45, "preemptive cleanup, due to previous errors", APPLICATION),
    Xid(48, "double-bit ECC error (DBE)", RESET_OR_REPLACE),
    Xid(61, "internal micro-controller breakpoint/warning", RESET),
    Xid(62, "internal micro-controller halt", RESET_OR_REPLACE),
    Xid(63, "ECC page retirement or row remapping recorded", RESET),
    Xid(64, "ECC page retirement or row remapping failed", RESET_OR_REPLACE),
    Xid(68, "video processor exception (an application's error)", APPLICATION),
    Xid(74, "NVLink error", RESET_OR_REPLACE),
    Xid(79, "GPU has fallen off the bus", RESET_OR_REPLACE),
    Xid(92, "high single-bit ECC error rate", RESET_OR_REPLACE),
    Xid(94, "contained ECC error", RESET),
    Xid(95, "uncontained ECC error", RESET_OR_REPLACE),
    Xid(109, "context switch timeout (an application's error)", APPLICATION),
    Xid(119, "GSP RPC timeout", RESET_OR_REPLACE),
    Xid(120, "GSP error", RESET_OR_REPLACE),
    Xid(140, "unrecovered ECC error", RESET_OR_REPLACE),
)}


def xid_meaning(number: int) -> str:
    found = XIDS.get(number)
    return found.meaning if found else f"XID {number} (see {XID_CATALOGUE})"


def needs_replacement(number: int | None) -> bool:
    """Whether NVIDIA's recommended action goes as far as replacing the GPU where a reset does not clear it
    (unknown XID: said as reset-or-replace too)."""
    found = XIDS.get(number) if number is not None else None
    return found is None or found.action == RESET_OR_REPLACE
