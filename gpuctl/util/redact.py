"""The credentials in use, registered where they are loaded, and cut out of everything gpuctl prints.

A server's error text may echo what it was sent: Keystone or Magnum the X-Auth-Token, AWS the
session token, a kube-apiserver the bearer token. Each loader registers its secrets here (Keystone
token, password and application-credential secret; AWS secret key and session token; kubeconfig
token, password and client key; the EKS token), and the error boundary (gpuctl/cli/main.py) puts
stderr behind `RedactingStream`, so every error line, log line and --debug traceback has them
replaced by "***".
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterable
from typing import IO, Any

MASK = "***"
MIN_LENGTH = 8  # shorter values are too likely to be ordinary words, and too weak to be real secrets

_lock = threading.Lock()
_secrets: set[str] = set()


def _pieces(value: str) -> Iterable[str]:
    """The value itself and, for a PEM block, each base64 line (a message may quote one line of it)."""
    yield value.strip()
    if "-----BEGIN" in value:
        yield from (line.strip() for line in value.splitlines() if not line.startswith("-----"))


def register(*values: Any) -> None:
    """Remember secrets (str or bytes; None and short values are ignored) to redact from output."""
    with _lock:
        for value in values:
            if isinstance(value, bytes):
                value = value.decode(errors="replace")
            if not isinstance(value, str):
                continue
            _secrets.update(piece for piece in _pieces(value) if len(piece) >= MIN_LENGTH)


def registered() -> int:
    """How many secrets are registered (for tests)."""
    return len(_secrets)


def forget_all() -> None:
    """Drop every registered secret (for tests)."""
    with _lock:
        _secrets.clear()


def redact(text: str) -> str:
    """`text` with every registered secret replaced by ***, longest first (a token may contain a shorter one)."""
    if not _secrets or not text:
        return text
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


class RedactingStream(io.TextIOBase):
    """A text stream that writes through to `stream` with the registered secrets redacted.

    Everything else (isatty, fileno, encoding) is the wrapped stream's, so a terminal is still one.
    """

    def __init__(self, stream: IO[str]) -> None:
        super().__init__()
        self._stream = stream

    @property
    def wrapped(self) -> IO[str]:
        return self._stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", "utf-8")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
