"""Fetch a pinned tool from its official release, verifying the published sha256."""

from __future__ import annotations

import hashlib
import io
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

from gpuctl.tools.pins import Tool

TIMEOUT_S = 10


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        return response.read()


def _expected_sha256(tool: Tool, filename: str) -> str:
    text = _get(tool.checksum_url).decode()  # type: ignore[arg-type]
    for line in text.splitlines():
        parts = line.split()
        # Either a bare digest, or "digest  filename" lines (SHA256SUMS).
        if len(parts) == 1 or (len(parts) >= 2 and parts[-1].lstrip("*") == filename):
            return parts[0].lower()
    raise ValueError(f"no checksum for {filename} in {tool.checksum_url}")


def download(tool: Tool, dest: Path) -> str | None:
    """Write the tool's binary to `dest`; return None on success, else why it could not."""
    url = tool.url
    if url is None:
        return f"{tool.name} {tool.version} has no release download"
    try:
        payload = _get(url)
        if tool.checksum_url:
            expected = _expected_sha256(tool, url.rsplit("/", 1)[1])
            if hashlib.sha256(payload).hexdigest() != expected:
                return f"checksum mismatch for {url}"
        if tool.member:
            with tarfile.open(fileobj=io.BytesIO(payload), mode="r:gz") as archive:
                member = archive.extractfile(tool.member)
                if member is None:
                    return f"{tool.member} missing from {url}"
                payload = member.read()
    except (urllib.error.URLError, OSError, ValueError, tarfile.TarError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"download from {url.split('/')[2]} failed ({reason})"
    dest.write_bytes(payload)
    dest.chmod(0o755)
    return None
