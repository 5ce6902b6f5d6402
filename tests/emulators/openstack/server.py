"""A Keystone v3 + Magnum v1 HTTP emulator on 127.0.0.1, for the OpenStack provider's tests.

Keystone lives under /identity (version discovery, POST /v3/auth/tokens); Magnum under / and
/v1 like its own API service. Shapes follow the real services: X-Subject-Token and a service
catalog on 201, Magnum's {"errors": [...]} bodies, 202 on create, the
`OpenStack-API-Version: container-infra X.Y` microversion header (406 for another service name).
"""

from __future__ import annotations

import datetime
import json
import re
import secrets
import threading
import uuid as uuidlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.emulators.openstack.magnum import NODEGROUP_MIN_VERSION, Magnum, MagnumError

MIN_VERSION, MAX_VERSION = (1, 1), (1, 11)
SERVICE = "container-infra"
TOKEN_TTL = datetime.timedelta(hours=1)


def _version_text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def parse_microversion(header: str | None) -> tuple[int, int]:
    """The requested Magnum microversion; MagnumError(406) for another service or an unsupported one."""
    if header is None:
        return MIN_VERSION
    service, _, version = header.strip().partition(" ")
    if service.lower() != SERVICE:
        raise MagnumError(406, "Invalid service type for OpenStack-API-Version header")
    if version.strip() == "latest":
        return MAX_VERSION
    match = re.fullmatch(r"(\d+)\.(\d+)", version.strip())
    requested = (int(match[1]), int(match[2])) if match else None
    if requested is None or not MIN_VERSION <= requested <= MAX_VERSION:
        raise MagnumError(406, f"Version {version.strip()} was requested but the minor version is not supported by "
                               f"this service. The supported version range is: [{_version_text(MIN_VERSION)}, "
                               f"{_version_text(MAX_VERSION)}].")
    return requested


class OpenStackEmulator:
    """One user in one project; Magnum backed by sim clusters (see dataplane.py)."""

    def __init__(self, username: str = "demo", password: str = "demo-password", project: str = "gpu-project",
                 region: str = "RegionOne") -> None:
        self.username, self.password, self.project, self.region = username, password, project, region
        self.project_id = uuidlib.uuid4().hex
        self.magnum = Magnum(self.project_id)
        self.tokens: dict[str, datetime.datetime] = {}
        self.requests: list[tuple[str, str]] = []  # Magnum calls that passed authentication
        self.throttled = 0  # the next N Magnum calls answer 429
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="openstack-emulator", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server's address
        return f"http://{host}:{port}"

    def start(self) -> OpenStackEmulator:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def fail_next_create(self, status_reason: str) -> None:
        """The next cluster or node group create ends in CREATE_FAILED with this reason."""
        self.magnum.failures.append(status_reason)

    def seed_cluster(self, name: str, nodegroups: dict[str, dict[str, str]]) -> None:
        """A cluster made outside gpuctl, as a record only (no sim cluster behind it), with node
        groups (name -> labels); blocks until all are CREATE_COMPLETE."""
        with self.magnum.lock:
            self.magnum.create_cluster({"name": name, "cluster_template_id": "gpu-template"}, simulated=False)
        self.magnum.wait_idle()
        with self.magnum.lock:
            for ng, labels in nodegroups.items():
                self.magnum.create_nodegroup(name, {"name": ng, "flavor_id": "g2.5xlarge", "labels": labels})
        self.magnum.wait_idle()

    def write_clouds_yaml(self, path: Path, clouds: dict[str, str]) -> Path:
        """clouds.yaml with one entry per (cloud name -> password) for this emulator's user."""
        entries = {name: {"auth": {"auth_url": f"{self.url}/identity/v3", "username": self.username,
                                   "password": password, "project_name": self.project,
                                   "user_domain_name": "Default", "project_domain_name": "Default"},
                          "region_name": self.region, "identity_api_version": 3}
                   for name, password in clouds.items()}
        path.write_text(yaml.safe_dump({"clouds": entries}))
        path.chmod(0o600)
        return path

    # -- Keystone --------------------------------------------------------------------------

    def version_v3(self) -> dict[str, Any]:
        return {"id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
                "links": [{"rel": "self", "href": f"{self.url}/identity/v3/"}],
                "media-types": [{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}]}

    def issue_token(self, body: Any) -> tuple[str, dict[str, Any]]:
        try:
            identity = body["auth"]["identity"]
            user = identity["password"]["user"]
            ok = ("password" in identity["methods"] and user.get("name") == self.username
                  and user.get("password") == self.password)
        except (KeyError, TypeError):
            ok = False
        if not ok:
            raise KeystoneError(401, "The request you have made requires authentication.")
        token = "gAAAAA" + secrets.token_urlsafe(24)
        now = datetime.datetime.now(datetime.timezone.utc)
        self.tokens[token] = now + TOKEN_TTL
        domain = {"id": "default", "name": "Default"}

        def endpoints(url: str) -> list[dict[str, Any]]:
            return [{"id": uuidlib.uuid4().hex, "interface": interface, "region": self.region,
                     "region_id": self.region, "url": url} for interface in ("public", "internal", "admin")]

        catalog = [
            {"type": "identity", "name": "keystone", "id": uuidlib.uuid4().hex,
             "endpoints": endpoints(f"{self.url}/identity")},
            {"type": SERVICE, "name": "magnum", "id": uuidlib.uuid4().hex, "endpoints": endpoints(f"{self.url}/v1")},
        ]
        stamp = "%Y-%m-%dT%H:%M:%S.000000Z"
        return token, {"token": {
            "methods": ["password"], "expires_at": self.tokens[token].strftime(stamp), "issued_at": now.strftime(stamp),
            "user": {"id": "u-demo", "name": self.username, "domain": domain, "password_expires_at": None},
            "project": {"id": self.project_id, "name": self.project, "domain": domain},
            "roles": [{"id": uuidlib.uuid4().hex, "name": "member"}, {"id": uuidlib.uuid4().hex, "name": "reader"}],
            "catalog": catalog, "is_domain": False, "audit_ids": [secrets.token_urlsafe(16)]}}

    def authenticated(self, token: str | None) -> bool:
        expiry = self.tokens.get(token or "")
        return expiry is not None and expiry > datetime.datetime.now(datetime.timezone.utc)

    # -- Magnum routes ---------------------------------------------------------------------

    def magnum_root(self) -> dict[str, Any]:
        v1 = {"id": "v1", "status": "CURRENT", "min_version": _version_text(MIN_VERSION),
              "max_version": _version_text(MAX_VERSION), "links": [{"href": f"{self.url}/v1/", "rel": "self"}]}
        return {"name": "OpenStack Magnum API", "description": "Magnum is an OpenStack project which aims to "
                "provide container cluster management.", "versions": [v1], "default_version": v1}

    def route(self, method: str, path: str, body: Any, version: tuple[int, int]) -> tuple[int, Any]:
        m = self.magnum

        def delete_cluster(c: str) -> tuple[int, None]:
            m.delete_cluster(c)
            return 204, None

        def delete_nodegroup(c: str, n: str) -> tuple[int, None]:
            m.delete_nodegroup(c, n)
            return 204, None

        routes: list[tuple[str, str, Callable[..., tuple[int, Any]]]] = [
            ("GET", r"/v1/clusters",
             lambda: (200, {"clusters": [c.summary() for c in m.visible(m.clusters).values()]})),
            ("POST", r"/v1/clusters", lambda: (202, {"uuid": m.create_cluster(body).uuid})),
            ("GET", r"/v1/clusters/([^/]+)", lambda c: (200, m.cluster(c).detail())),
            ("DELETE", r"/v1/clusters/([^/]+)", delete_cluster),
            ("POST", r"/v1/clusters/([^/]+)/actions/resize", lambda c: (202, {"uuid": m.resize(c, body).uuid})),
            ("GET", r"/v1/clusters/([^/]+)/nodegroups",
             lambda c: (200, {"nodegroups": [ng.summary()
                                             for ng in m.visible(m.cluster(c).nodegroups).values()]})),
            ("POST", r"/v1/clusters/([^/]+)/nodegroups",
             lambda c: (202, m.create_nodegroup(c, body).detail(m.cluster(c)))),
            ("GET", r"/v1/clusters/([^/]+)/nodegroups/([^/]+)",
             lambda c, n: (200, m.nodegroup(m.cluster(c), n).detail(m.cluster(c)))),
            ("PATCH", r"/v1/clusters/([^/]+)/nodegroups/([^/]+)",
             lambda c, n: (202, m.update_nodegroup(c, n, body).detail(m.cluster(c)))),
            ("DELETE", r"/v1/clusters/([^/]+)/nodegroups/([^/]+)", delete_nodegroup),
            ("GET", r"/v1/certificates/([^/]+)", lambda c: (200, m.ca(c))),
            ("POST", r"/v1/certificates", lambda: (201, m.sign(body))),
        ]
        known_path = False
        for verb, pattern, action in routes:
            match = re.fullmatch(pattern, path)
            if not match:
                continue
            known_path = True
            if verb != method:
                continue
            if "/nodegroups" in pattern and version < NODEGROUP_MIN_VERSION:  # base.Controller.api_version("1.9")
                raise MagnumError(406, f"Version {_version_text(version)} was requested but the minor version is "
                                       "not supported by this service.")
            with m.lock:
                return action(*match.groups())
        if known_path and version >= NODEGROUP_MIN_VERSION:
            raise MagnumError(405, f"The method {method} is not allowed for this resource.")
        raise MagnumError(404, "The resource could not be found.")


class KeystoneError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _handler(emulator: OpenStackEmulator) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence the access log
            pass

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_PATCH(self) -> None:
            self._dispatch("PATCH")

        def do_DELETE(self) -> None:
            self._dispatch("DELETE")

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = b"" if body is None or status == 204 else json.dumps(body).encode()
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            if data:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            return json.loads(raw) if raw else None

        def _dispatch(self, method: str) -> None:
            path = self.path.split("?", 1)[0].rstrip("/") or "/"
            try:
                body = self._body()
            except ValueError:
                self._send(400, MagnumError(400, "Malformed JSON body.").body())
                return
            if path.startswith("/identity"):
                self._keystone(method, path.removeprefix("/identity") or "/", body)
            else:
                self._magnum(method, path, body)

        def _keystone(self, method: str, path: str, body: Any) -> None:
            if method == "GET" and path == "/":
                self._send(300, {"versions": {"values": [emulator.version_v3()]}})
            elif method == "GET" and path == "/v3":
                self._send(200, {"version": emulator.version_v3()})
            elif method == "POST" and path == "/v3/auth/tokens":
                try:
                    token, doc = emulator.issue_token(body)
                except KeystoneError as exc:
                    self._send(exc.status, {"error": {"code": exc.status, "title": "Unauthorized",
                                                      "message": exc.message}})
                    return
                self._send(201, doc, {"X-Subject-Token": token})
            else:
                self._send(404, {"error": {"code": 404, "title": "Not Found", "message": "Not found"}})

        def _magnum(self, method: str, path: str, body: Any) -> None:
            if method == "GET" and path == "/":
                self._send(200, emulator.magnum_root())
                return
            if method == "GET" and path == "/v1":
                self._send(200, {**emulator.magnum_root()["default_version"],
                                 "media_types": [{"base": "application/json",
                                                  "type": "application/vnd.openstack.magnum.v1+json"}]})
                return
            if not emulator.authenticated(self.headers.get("X-Auth-Token")):
                # keystonemiddleware answers before Magnum, in Keystone's error format
                self._send(401, {"error": {"code": 401, "title": "Unauthorized",
                                           "message": "The request you have made requires authentication."}},
                           {"WWW-Authenticate": f"Keystone uri=\"{emulator.url}/identity\""})
                return
            emulator.requests.append((method, path))
            headers = {"OpenStack-API-Minimum-Version": f"{SERVICE} {_version_text(MIN_VERSION)}",
                       "OpenStack-API-Maximum-Version": f"{SERVICE} {_version_text(MAX_VERSION)}",
                       "Vary": "OpenStack-API-Version"}
            if emulator.throttled > 0:
                emulator.throttled -= 1
                self._send(429, MagnumError(429, "Rate limit exceeded; slow down.").body(), headers)
                return
            try:
                version = parse_microversion(self.headers.get("OpenStack-API-Version"))
                headers["OpenStack-API-Version"] = f"{SERVICE} {_version_text(version)}"
                status, result = emulator.route(method, path, body, version)
            except MagnumError as exc:
                self._send(exc.status, exc.body(), headers)
                return
            self._send(status, result, headers)

    return Handler
