"""The OpenStack bed itself (tests/beds/openstack): real Keystone and Magnum, driven with plain HTTP
(keystoneauth / requests), never through gpuctl's OpenStack provider. Magnum's periodic status sync runs
every ~10 s: every create, resize and delete below takes one or two of those."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from keystoneauth1 import adapter
from openstack import config as os_config
from openstack import connection

from tests.integration.conftest import BED_PASSWORD
from tests.support.sim import KwokCluster

pytestmark = pytest.mark.integration

MICROVERSION = {"OpenStack-API-Version": "container-infra 1.14"}
NODEGROUP_LABEL = "magnum.openstack.org/nodegroup"
STEP_TIMEOUT_S = 120.0


def _magnum(bed, tmp_path: Path) -> adapter.Adapter:
    """Magnum through the catalog, as the `openstack` CLI gets it: clouds.yaml -> keystoneauth session."""
    clouds = bed.write_clouds_yaml(tmp_path / "clouds.yaml", {"bed": BED_PASSWORD})
    region = os_config.OpenStackConfig(config_files=[str(clouds)]).get_one("bed")
    conn = connection.Connection(config=region)
    return adapter.Adapter(conn.session, service_type="container-infra", interface="public",
                           region_name=bed.region, additional_headers=MICROVERSION)


def _wait(what: str, probe: Callable[[], Any], bed, timings: dict[str, float]) -> Any:
    started = time.monotonic()
    while True:
        value = probe()
        if value:
            timings[what] = time.monotonic() - started
            return value
        if time.monotonic() - started > STEP_TIMEOUT_S:
            pytest.fail(f"{what}: not done after {STEP_TIMEOUT_S:.0f}s\n{bed.log_tail('magnum', 40)}")
        time.sleep(0.5)


def test_keystone_and_magnum_discovery(openstack_bed, tmp_path: Path) -> None:
    bed = openstack_bed
    magnum = _magnum(bed, tmp_path)
    assert magnum.session.get_token()
    assert magnum.get_endpoint() == f"{bed.magnum_url}/v1"

    root = requests.get(f"{bed.magnum_url}/", timeout=10)
    assert root.status_code == 200
    (v1,) = root.json()["versions"]
    assert (v1["id"], v1["min_version"], v1["max_version"]) == ("v1", "1.1", "1.14")

    assert requests.get(f"{bed.magnum_url}/v1/clusters", timeout=10).status_code == 401
    listed = magnum.get("/clusters", raise_exc=False)
    assert listed.status_code == 200, listed.text
    # Magnum accepts container-infra (and two other names) but answers with the official service type
    assert listed.headers["OpenStack-API-Version"] == "container-infrastructure-management 1.14"
    assert listed.headers["OpenStack-API-Maximum-Version"] == "container-infrastructure-management 1.14"
    too_new = magnum.get("/clusters", headers={"OpenStack-API-Version": "container-infra 1.99"}, raise_exc=False)
    assert too_new.status_code == 406, too_new.text
    templates = magnum.get("/clustertemplates").json()["clustertemplates"]
    assert [t["name"] for t in templates] == ["gpu-template"]
    assert bed.fakes.unexpected == []


def _kubeconfig(magnum: adapter.Adapter, cluster: dict[str, Any], path: Path) -> Path:
    """As `openstack coe cluster config` makes it: Magnum's cluster CA, a client certificate Magnum signs."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "admin"),
                                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters")]))
           .sign(key, hashes.SHA256()))
    ca = magnum.get(f"/certificates/{cluster['uuid']}").json()["pem"]
    signed = magnum.post("/certificates", json={
        "cluster_uuid": cluster["uuid"], "csr": csr.public_bytes(serialization.Encoding.PEM).decode()}).json()["pem"]
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption())

    def b64(data: str | bytes) -> str:
        return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()

    name = cluster["name"]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": cluster["api_address"],
                                                "certificate-authority-data": b64(ca)}}],
        "users": [{"name": "admin", "user": {"client-certificate-data": b64(signed),
                                             "client-key-data": b64(key_pem)}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "admin"}}]}))
    return path


def _node_names(kubeconfig: Path, nodegroup: str) -> list[str]:
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    return sorted(n.metadata.name for n in api.list_node(label_selector=f"{NODEGROUP_LABEL}={nodegroup}").items)


def test_cluster_lifecycle(openstack_bed, tmp_path: Path) -> None:
    bed = openstack_bed
    magnum = _magnum(bed, tmp_path)
    timings: dict[str, float] = {}

    def cluster(uuid: str, being_created: bool = False) -> dict[str, Any] | None:
        resp = magnum.get(f"/clusters/{uuid}", raise_exc=False)
        # between the conductor writing the cluster row and its node groups Magnum answers 400 (the provider's
        # MagnumApi.get_cluster takes it the same way)
        if resp.status_code == 404 or (resp.status_code == 400 and being_created):
            return None
        assert resp.status_code == 200, resp.text
        return resp.json()

    def nodegroup(uuid: str, ng: str) -> dict[str, Any] | None:
        resp = magnum.get(f"/clusters/{uuid}/nodegroups/{ng}", raise_exc=False)
        return None if resp.status_code == 404 else resp.json()

    def settled(uuid: str, in_progress: str) -> Callable[[], dict[str, Any] | None]:
        return lambda: (c := cluster(uuid)) and c["status"] != in_progress and c

    # create: 202 at once, the record shortly after (the conductor makes it: an RPC cast), then the sync
    created = magnum.post("/clusters", json={"name": "bed", "cluster_template_id": "gpu-template",
                                             "master_count": 1, "node_count": 1}, raise_exc=False)
    assert created.status_code == 202, created.text
    uuid = created.json()["uuid"]
    record = _wait("record visible", lambda: cluster(uuid, being_created=True), bed, timings)
    assert record["status"] == "CREATE_IN_PROGRESS"
    done = _wait("cluster create", settled(uuid, "CREATE_IN_PROGRESS"), bed, timings)
    assert done["status"] == "CREATE_COMPLETE", done["status_reason"]
    assert done["api_address"].startswith("https://127.0.0.1:")
    sim = done["cluster_id"]  # the driver's stack_id: the sim cluster's name
    assert KwokCluster(sim).complete
    assert sorted(ng["name"] for ng in bed.nodegroups(uuid)) == ["default-master", "default-worker"]

    # a GPU node group: flavor g2.5xlarge (t4), 2 nodes
    added = magnum.post(f"/clusters/{uuid}/nodegroups", json={"name": "t4", "flavor_id": "g2.5xlarge",
                                                              "node_count": 2}, raise_exc=False)
    assert added.status_code == 202, added.text
    ng = _wait("nodegroup create", lambda: (n := nodegroup(uuid, "t4")) and n["status"] != "CREATE_IN_PROGRESS"
               and n, bed, timings)
    assert ng["status"] == "CREATE_COMPLETE", ng["status_reason"]
    assert _wait("cluster after nodegroup", settled(uuid, "UPDATE_IN_PROGRESS"), bed, timings)["status"] \
        == "UPDATE_COMPLETE"

    # the kubeconfig `openstack coe cluster config` would write: TLS verified against Magnum's CA
    kubeconfig = _kubeconfig(magnum, done, tmp_path / "kubeconfig")
    assert _node_names(kubeconfig, "t4") == ["t4-0", "t4-1"]
    assert _node_names(kubeconfig, "default-worker") == ["system-0"]

    # resize the node group to 1, then delete it
    resized = magnum.post(f"/clusters/{uuid}/actions/resize", json={"node_count": 1, "nodegroup": "t4"},
                          raise_exc=False)
    assert resized.status_code == 202, resized.text
    # (the conductor gets the resize by an RPC cast: right after the 202 nothing has changed yet)
    ng = _wait("resize", lambda: (n := nodegroup(uuid, "t4")) and n["status"] in ("UPDATE_COMPLETE", "UPDATE_FAILED")
               and n, bed, timings)
    assert (ng["status"], ng["node_count"]) == ("UPDATE_COMPLETE", 1), ng["status_reason"]
    assert _wait("cluster update", settled(uuid, "UPDATE_IN_PROGRESS"), bed, timings)["status"] == "UPDATE_COMPLETE"
    assert _node_names(kubeconfig, "t4") == ["t4-0"]
    deleted = magnum.delete(f"/clusters/{uuid}/nodegroups/t4", raise_exc=False)
    assert deleted.status_code == 204, deleted.text
    _wait("nodegroup delete", lambda: nodegroup(uuid, "t4") is None, bed, timings)
    assert _node_names(kubeconfig, "t4") == []

    # delete: the record goes once the sim cluster has
    gone = magnum.delete(f"/clusters/{uuid}", raise_exc=False)
    assert gone.status_code == 204, gone.text
    def record_gone() -> bool:
        # DELETE_IN_PROGRESS until then; 400 while the periodic job destroys the node groups before the row (the
        # provider's MagnumApi.get_cluster takes it for gone; here the row's own 404 is waited for)
        resp = magnum.get(f"/clusters/{uuid}", raise_exc=False)
        assert resp.status_code in (200, 400, 404), resp.text
        return resp.status_code == 404

    _wait("cluster delete", record_gone, bed, timings)
    assert not KwokCluster(sim).exists
    assert all(c["uuid"] != uuid for c in bed.clusters())
    print("\nbed operation times: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
