"""Tiny read-only Glance, Nova and Neutron for the bed: exactly what Magnum's API validates a cluster
template and a cluster against (magnum/api/attr_validator.py through openstacksdk, magnum/common/clients.py).

- image:   GET /image (version discovery), /image/v2/images/<id>, /image/v2/images?name=  (find_image)
- compute: GET /compute[/v2.1] (discovery), /compute/v2.1/flavors/detail, /compute/v2.1/os-keypairs/<name>
- network: GET /network (discovery), /network/v2.0/networks[?router:external=True]
Any other request answers 404 and is kept in `unexpected`, so a Magnum that starts asking for
more shows up in the bed's tests.
"""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.beds.openstack.dataplane import FLAVORS

IMAGE = {"id": str(uuid.uuid5(uuid.NAMESPACE_URL, "gpuctl-bed/image")), "name": "gpuctl-sim-k8s",
         "os_distro": "gpuctl-sim", "status": "active", "visibility": "public", "disk_format": "qcow2",
         "container_format": "bare", "min_disk": 0, "min_ram": 0, "size": 1 << 30, "tags": [],
         "protected": False, "owner": "bed"}
KEYPAIR = "default"
NETWORK = {"id": str(uuid.uuid5(uuid.NAMESPACE_URL, "gpuctl-bed/network/public")), "name": "public",
           "router:external": True, "status": "ACTIVE", "admin_state_up": True, "shared": True, "subnets": [],
           "tenant_id": "bed", "project_id": "bed", "mtu": 1500}
MICROVERSION = "2.96"


def _flavors(url: str) -> list[dict[str, Any]]:
    out = []
    for name, flavor in FLAVORS.items():
        gpus = flavor.gpus
        extra = {"resources:VGPU": str(gpus)} if gpus else {}
        out.append({"id": name, "name": name, "ram": 65536 if gpus else 8192, "vcpus": 8 * max(gpus, 1),
                    "disk": 100, "OS-FLV-EXT-DATA:ephemeral": 0, "swap": 0, "rxtx_factor": 1.0,
                    "os-flavor-access:is_public": True, "OS-FLV-DISABLED:disabled": False,
                    "description": f"{flavor.gpu.name} x{gpus}" if flavor.gpu else "CPU only", "extra_specs": extra,
                    "links": [{"rel": "self", "href": f"{url}/compute/v2.1/flavors/{name}"}]})
    return out


class Fakes:
    def __init__(self) -> None:
        self.unexpected: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="openstack-bed-fakes", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server's address
        return f"http://{host}:{port}"

    def start(self) -> Fakes:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        url = self.url
        image_v2 = {"id": "v2.16", "status": "CURRENT", "links": [{"rel": "self", "href": f"{url}/image/v2/"}]}
        compute = {"id": "v2.1", "status": "CURRENT", "version": MICROVERSION, "min_version": "2.1",
                   "updated": "2013-07-23T11:33:21Z", "links": [{"rel": "self", "href": f"{url}/compute/v2.1/"}]}
        network = {"id": "v2.0", "status": "CURRENT", "links": [{"rel": "self", "href": f"{url}/network/v2.0/"}]}
        routes: dict[str, Any] = {
            "/image": lambda: (300, {"versions": [image_v2]}),
            "/image/versions": lambda: (200, {"versions": [image_v2]}),
            "/image/v2/images": lambda: (200, {"images": [IMAGE] if query.get("name", [IMAGE["name"]])[0]
                                               in (IMAGE["name"], IMAGE["id"]) and query.get("id", [IMAGE["id"]])[0]
                                               == IMAGE["id"] else [], "first": "/v2/images", "schema": "/v2/schemas/images"}),
            f"/image/v2/images/{IMAGE['id']}": lambda: (200, IMAGE),
            "/compute": lambda: (200, {"versions": [compute]}),
            "/compute/v2.1": lambda: (200, {"version": compute}),
            "/compute/v2.1/flavors/detail": lambda: (200, {"flavors": _flavors(url)}),
            "/compute/v2.1/flavors": lambda: (200, {"flavors": [{"id": f["id"], "name": f["name"], "links": f["links"]}
                                                                for f in _flavors(url)]}),
            f"/compute/v2.1/os-keypairs/{KEYPAIR}": lambda: (200, {"keypair": {
                "name": KEYPAIR, "type": "ssh", "fingerprint": "00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff",
                "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGJlZGJlZGJlZGJlZGJlZGJlZGJlZGJlZGJlZGJlZGJlZA bed",
                "user_id": "demo", "created_at": "2026-01-01T00:00:00.000000", "deleted": False, "id": 1}}),
            "/network": lambda: (200, {"versions": [network]}),
            "/network/v2.0": lambda: (200, {"resources": [{"name": "network", "collection": "networks",
                                                            "links": []}]}),
            "/network/v2.0/networks": lambda: (200, {"networks": [NETWORK] if query.get("router:external", ["true"])[0]
                                                     .lower() == "true" else []}),
            f"/network/v2.0/networks/{NETWORK['id']}": lambda: (200, {"network": NETWORK}),
        }
        route = routes.get(path.rstrip("/") or "/")
        if route is None and path.startswith("/image/v2/images/"):
            # find_image(name) asks by id first: Glance's 404 is the expected answer
            return 404, {"code": 404, "title": "Not Found", "message": f"No image found with ID {path[17:]}"}
        if route is None:
            self.unexpected.append(path + (f"?{query}" if query else ""))
            return 404, {"itemNotFound": {"code": 404, "message": f"{path} not found"},
                         "NeutronError": {"type": "NotFound", "message": "not found", "detail": ""}}
        return route()


def _handler(fakes: Fakes) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            status, body = fakes.answer(parts.path, parse_qs(parts.query))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if parts.path.startswith("/compute"):
                self.send_header("OpenStack-API-Version", f"compute {MICROVERSION}")
                self.send_header("X-OpenStack-Nova-API-Version", MICROVERSION)
            self.end_headers()
            self.wfile.write(data)

    return Handler
