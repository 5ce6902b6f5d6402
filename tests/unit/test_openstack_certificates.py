"""Client certificates for Magnum clusters: Magnum's CSR subject, reuse, file modes, kubeconfig shape."""

from __future__ import annotations

import base64
import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from gpuctl.providers.openstack.certificates import (
    CertificateCache,
    ClientCredentials,
    client_credentials,
    new_key_and_csr,
    render_kubeconfig,
    usable,
)

NOW = datetime.datetime.now(datetime.timezone.utc)


class FakeMagnum:
    """Signs CSRs with its own CA, like POST /v1/certificates; counts the calls."""

    def __init__(self, days: float = 365) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cluster-ca")])
        self.ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(self.key.public_key())
                   .serial_number(1).not_valid_before(NOW - datetime.timedelta(days=1))
                   .not_valid_after(NOW + datetime.timedelta(days=3650)).sign(self.key, hashes.SHA256()))
        self.days = days
        self.signed = 0

    @property
    def ca_pem(self) -> bytes:
        return self.ca.public_bytes(serialization.Encoding.PEM)

    def sign(self, csr_pem: str) -> str:
        self.signed += 1
        csr = x509.load_pem_x509_csr(csr_pem.encode())
        cert = (x509.CertificateBuilder().subject_name(csr.subject).issuer_name(self.ca.subject)
                .public_key(csr.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(NOW - datetime.timedelta(minutes=1))
                .not_valid_after(NOW + datetime.timedelta(days=self.days)).sign(self.key, hashes.SHA256()))
        return cert.public_bytes(serialization.Encoding.PEM).decode()


def test_csr_is_rsa_2048_for_admin_in_system_masters() -> None:
    key_pem, csr_pem = new_key_and_csr()
    csr = x509.load_pem_x509_csr(csr_pem.encode())
    assert csr.is_signature_valid
    assert csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "admin"
    assert csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    key = serialization.load_pem_private_key(key_pem, password=None)
    assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == 2048
    assert csr.public_key() == key.public_key()


def test_credentials_are_reused_while_valid_under_the_same_ca(tmp_path: Path) -> None:
    magnum = FakeMagnum()
    cache = CertificateCache("uuid-1", root=tmp_path)
    first = client_credentials(cache, magnum.ca_pem, magnum.sign)
    second = client_credentials(CertificateCache("uuid-1", root=tmp_path), magnum.ca_pem, magnum.sign)
    assert first == second and magnum.signed == 1
    assert cache.dir.stat().st_mode & 0o777 == 0o700
    assert {p.name: p.stat().st_mode & 0o777 for p in cache.dir.iterdir()} == {
        "ca.crt": 0o600, "client.key": 0o600, "client.crt": 0o600}


def test_a_new_ca_or_an_expiring_certificate_gets_a_new_key(tmp_path: Path) -> None:
    magnum = FakeMagnum()
    first = client_credentials(CertificateCache("c", root=tmp_path), magnum.ca_pem, magnum.sign)
    rotated = FakeMagnum()
    renewed = client_credentials(CertificateCache("c", root=tmp_path), rotated.ca_pem, rotated.sign)
    assert renewed.key_pem != first.key_pem and rotated.signed == 1
    short = FakeMagnum(days=0.5)
    client_credentials(CertificateCache("d", root=tmp_path), short.ca_pem, short.sign)
    client_credentials(CertificateCache("d", root=tmp_path), short.ca_pem, short.sign)
    assert short.signed == 2  # less than a day left: not reused


def test_a_certificate_of_another_key_is_not_usable() -> None:
    magnum = FakeMagnum()
    key_a, csr_a = new_key_and_csr()
    key_b, _ = new_key_and_csr()
    cert = magnum.sign(csr_a).encode()
    assert usable(ClientCredentials(key_a, cert))
    assert not usable(ClientCredentials(key_b, cert))
    assert not usable(ClientCredentials(key_a, cert), now=NOW + datetime.timedelta(days=365))


def test_forget_removes_the_cached_key(tmp_path: Path) -> None:
    magnum = FakeMagnum()
    cache = CertificateCache("c", root=tmp_path)
    client_credentials(cache, magnum.ca_pem, magnum.sign)
    cache.forget()
    assert not cache.dir.exists()


def test_kubeconfig_embeds_ca_and_client_certificate_and_no_token() -> None:
    creds = ClientCredentials(b"KEY", b"CERT")
    doc = render_kubeconfig("gpuctl-openstack-os1", "https://10.0.0.5:6443", b"CA", creds)
    assert doc["current-context"] == "gpuctl-openstack-os1"
    assert doc["contexts"] == [{"name": "gpuctl-openstack-os1",
                                "context": {"cluster": "gpuctl-openstack-os1", "user": "gpuctl-openstack-os1"}}]
    cluster = doc["clusters"][0]["cluster"]
    assert cluster["server"] == "https://10.0.0.5:6443"
    assert base64.b64decode(cluster["certificate-authority-data"]) == b"CA"
    user = doc["users"][0]["user"]
    assert {k: base64.b64decode(v) for k, v in user.items()} == {"client-certificate-data": b"CERT",
                                                                   "client-key-data": b"KEY"}
