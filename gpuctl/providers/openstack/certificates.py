"""Client certificates the way `openstack coe cluster config` makes them, kept for reuse.

An RSA-2048 key and a CSR for CN=admin, O=system:masters (cluster-admin under RBAC) are signed
by Magnum with the cluster CA. gpuctl writes the kubeconfig only when it changed, and a fresh key
on every run would always change it, so the key and certificate are cached per cluster (mode
0600) and reused while the certificate is valid for more than a day under the same CA.
"""

from __future__ import annotations

import base64
import datetime
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from gpuctl.util.files import write_atomic
from gpuctl.util.paths import state_dir

CLIENT_CN = "admin"
CLIENT_ORG = "system:masters"
KEY_BITS = 2048
MIN_REMAINING = datetime.timedelta(days=1)


@dataclass(frozen=True)
class ClientCredentials:
    key_pem: bytes
    cert_pem: bytes


def new_key_and_csr() -> tuple[bytes, str]:
    """A new private key (PEM) and its CSR (PEM text) with Magnum's admin subject."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CLIENT_CN),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, CLIENT_ORG)])
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption())
    return key_pem, csr.public_bytes(serialization.Encoding.PEM).decode()


def usable(creds: ClientCredentials, now: datetime.datetime | None = None) -> bool:
    """True if the certificate belongs to the key and has more than a day left."""
    try:
        cert = x509.load_pem_x509_certificate(creds.cert_pem)
        key = serialization.load_pem_private_key(creds.key_pem, password=None)
    except (ValueError, TypeError):
        return False
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return (cert.public_key() == key.public_key() and cert.not_valid_before_utc <= now
            and cert.not_valid_after_utc - now > MIN_REMAINING)


class CertificateCache:
    """<state>/openstack/<cluster uuid>/{ca.crt,client.key,client.crt}: directory 0700, files 0600."""

    def __init__(self, cluster_uuid: str, root: Path | None = None) -> None:
        self.dir = (root or state_dir() / "openstack") / cluster_uuid

    def load(self, ca_pem: bytes) -> ClientCredentials | None:
        """The cached credentials if they were issued under this same CA and are still usable."""
        try:
            if (self.dir / "ca.crt").read_bytes() != ca_pem:
                return None
            creds = ClientCredentials((self.dir / "client.key").read_bytes(), (self.dir / "client.crt").read_bytes())
        except OSError:
            return None
        return creds if usable(creds) else None

    def save(self, ca_pem: bytes, creds: ClientCredentials) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.dir, 0o700)
        for name, data in (("ca.crt", ca_pem), ("client.key", creds.key_pem), ("client.crt", creds.cert_pem)):
            write_atomic(self.dir / name, data)

    def forget(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def client_credentials(cache: CertificateCache, ca_pem: bytes, sign: Callable[[str], str]) -> ClientCredentials:
    """Cached credentials, or a new key whose CSR `sign` (POST /v1/certificates) turns into a certificate."""
    cached = cache.load(ca_pem)
    if cached is not None:
        return cached
    key_pem, csr = new_key_and_csr()
    creds = ClientCredentials(key_pem, sign(csr).encode())
    cache.save(ca_pem, creds)
    return creds


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def render_kubeconfig(name: str, server: str, ca_pem: bytes, creds: ClientCredentials) -> dict[str, Any]:
    """A one-context kubeconfig (cluster, user and context all called `name`), credentials embedded."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": name, "user": {"client-certificate-data": _b64(creds.cert_pem),
                                          "client-key-data": _b64(creds.key_pem)}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
