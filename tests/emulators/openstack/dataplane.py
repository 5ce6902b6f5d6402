"""The emulated Magnum's data plane: each Magnum cluster is a gpuctl sim cluster of the same name.

A node group becomes kwok GPU nodes of its flavor's GPU, labelled the way Magnum's Kubernetes
drivers label their nodes; the cluster CA signs the client certificates /v1/certificates issues.
"""

from __future__ import annotations

import datetime
import warnings
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509.oid import ExtendedKeyUsageOID
from kubernetes.client import CoreV1Api

from tests.support.kube import MERGE_PATCH, api_client
from tests.support.model import GPUS, NODEGROUP, GpuModel, NodeGroupSpec
from tests.support.sim import SYSTEM_NODE, KwokCluster, SimProvider

MAGNUM_NODEGROUP = "magnum.openstack.org/nodegroup"
MAGNUM_ROLE = "magnum.openstack.org/role"
CERT_DAYS = 365


@dataclass(frozen=True)
class Flavor:
    name: str
    gpu: GpuModel | None  # None: a CPU flavor
    gpus: int


# The site's Nova flavors: the catalog's defaults for every GPU, and one CPU flavor for default-worker.
FLAVORS: dict[str, Flavor] = {
    "m1.large": Flavor("m1.large", None, 0),
    **{m.openstack_flavor: Flavor(m.openstack_flavor, m, m.default_gpus_per_node) for m in GPUS.values()},
}


class SimDataPlane:
    """Runs in the emulator's worker threads; every call blocks until the sim cluster matches."""

    def __init__(self) -> None:
        self.sim = SimProvider()

    def create_cluster(self, name: str) -> str:
        """Start the sim cluster, make its system node Magnum's default-worker; return api_address."""
        self.sim.ensure_cluster(name)
        self._label(name, SYSTEM_NODE, "default-worker")
        endpoint = KwokCluster(name).endpoint()
        assert endpoint, f"sim cluster {name} has no endpoint"
        return endpoint

    def delete_cluster(self, name: str) -> None:
        if KwokCluster(name).exists:
            self.sim.delete_cluster(name)

    def ensure_nodes(self, cluster: str, nodegroup: str, flavor: Flavor, count: int) -> None:
        """Converge the node group's kwok nodes to `count` and give them Magnum's node labels."""
        if flavor.gpu is None:
            return  # CPU node groups have no simulated nodes beyond the system node
        self.sim.ensure_node_group(cluster, NodeGroupSpec(nodegroup, flavor.gpu, count, flavor.gpus))
        v1 = CoreV1Api(api_client(KwokCluster(cluster).kubeconfig_path))
        for node in v1.list_node(label_selector=f"{NODEGROUP}={nodegroup}").items:
            if (node.metadata.labels or {}).get(MAGNUM_NODEGROUP) != nodegroup:
                self._label(cluster, node.metadata.name, nodegroup)

    def _label(self, cluster: str, node: str, nodegroup: str) -> None:
        v1 = CoreV1Api(api_client(KwokCluster(cluster).kubeconfig_path))
        labels = {MAGNUM_NODEGROUP: nodegroup, MAGNUM_ROLE: "worker"}
        v1.patch_node(node, {"metadata": {"labels": labels}}, _content_type=MERGE_PATCH)

    def ca_pem(self, cluster: str) -> str:
        return (KwokCluster(cluster).dir / "pki" / "ca.crt").read_text()

    def sign(self, cluster: str, csr_pem: str) -> str:
        """Sign a client CSR with the sim cluster's CA, as Magnum's x509 module does with the cluster CA."""
        pki = KwokCluster(cluster).dir / "pki"
        with warnings.catch_warnings():  # kwokctl's CA has a non-positive serial number
            warnings.simplefilter("ignore", CryptographyDeprecationWarning)
            ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
        ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
        csr = x509.load_pem_x509_csr(csr_pem.encode())
        if not csr.is_signature_valid:
            raise ValueError("CSR signature is invalid")
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder()
                .subject_name(csr.subject)
                .issuer_name(ca.subject)
                .public_key(csr.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
        return cert.public_bytes(serialization.Encoding.PEM).decode()
