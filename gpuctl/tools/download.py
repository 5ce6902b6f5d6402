"""Fetch a pinned tool from its official release, verifying the published sha256."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

from gpuctl.tools.pins import Tool
from gpuctl.util.lazy_import import LazyImport

# urllib.request (http.client, email, ssl) and hashlib load only when something is downloaded.
if TYPE_CHECKING:
    import hashlib
    import urllib.error as urllib_error
    import urllib.request as urllib_request
else:
    hashlib = LazyImport("hashlib")
    urllib_error = LazyImport("urllib.error")
    urllib_request = LazyImport("urllib.request")

TIMEOUT_S = 10


def _get(url: str) -> bytes:
    with urllib_request.urlopen(url, timeout=TIMEOUT_S) as response:
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
    except (urllib_error.URLError, OSError, ValueError, tarfile.TarError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"download from {url.split('/')[2]} failed ({reason})"
    dest.write_bytes(payload)
    dest.chmod(0o755)
    return None
