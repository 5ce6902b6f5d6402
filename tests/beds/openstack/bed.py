"""OpenStackBed: real Keystone 30 + Magnum 23 (from PyPI, venv.py) on 127.0.0.1, Magnum backed by sim clusters.

Processes (the bed venv's python, logs under <workdir>/logs):
- keystone: Keystone's WSGI app on Werkzeug's threaded server; SQLite, fernet tokens, in-memory cache;
  made with keystone-manage db_sync / fernet_setup / credential_setup / bootstrap, then provisioned
  over its own REST API: user `demo` (member of project `demo`), service user `magnum` (admin and
  service roles in project `service`), the catalog (container-infra, image, compute, network).
- magnum: magnum-api + magnum-conductor in one process (magnum_server.py) over oslo.messaging's fake
  driver, with the project's Magnum driver (driver.py, registered by a per-run dist-info dir on
  PYTHONPATH: the cached venv never holds code of this checkout).
In this process: tiny read-only Glance/Nova/Neutron answers for Magnum's validations (fakes.py).

The API follows tests/emulators/openstack/server.py's OpenStackEmulator where it can (start, stop,
auth_url, write_clouds_yaml), so tests can swap one for the other.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests
import yaml

from tests.beds.openstack.fakes import IMAGE, KEYPAIR, NETWORK, Fakes
from tests.beds.openstack.venv import bed_python, ensure_bed_venv
from tests.support.tools import KUBERNETES_VERSION

HERE = Path(__file__).parent
REPO_ROOT = HERE.parents[2]
REGION = "RegionOne"
MICROVERSION = "container-infra 1.14"
TEMPLATE = "gpu-template"
KUBE_TAG = KUBERNETES_VERSION  # the template's Kubernetes: the sim's, which the driver's clusters run
START_TIMEOUT_S = 90.0
DRIVER_ENTRY_POINT = "gpuctl_sim = tests.beds.openstack.driver:SimDriver"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ini(sections: dict[str, dict[str, Any]]) -> str:
    return "".join(f"[{name}]\n" + "".join(f"{k} = {v}\n" for k, v in opts.items()) + "\n"
                   for name, opts in sections.items())


class BedError(RuntimeError):
    pass


class OpenStackBed:
    """Keystone + Magnum for one test session; `start()` blocks until the cluster template exists."""

    def __init__(self, password: str = "demo-password", username: str = "demo", project: str = "demo",
                 region: str = REGION, workdir: Path | None = None, progress: Callable[[str], None] = print) -> None:
        self.username, self.password, self.project, self.region = username, password, project, region
        self.admin_password = "bed-admin-" + os.urandom(6).hex()
        self.service_password = "bed-magnum-" + os.urandom(6).hex()
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="openstack-bed-"))
        self.log_dir = self.dir / "logs"
        self.progress = progress
        self.keystone_port = _free_port()
        self.magnum_port = _free_port()
        self.fakes = Fakes()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.timings: dict[str, float] = {}
        self.setup_s = 0.0
        self.template_id: str | None = None
        self._tokens: dict[tuple[str, str], tuple[str, float]] = {}
        self.venv: Path | None = None

    # -- addresses ------------------------------------------------------------------------

    @property
    def auth_url(self) -> str:
        return f"http://127.0.0.1:{self.keystone_port}/v3"

    @property
    def magnum_url(self) -> str:
        return f"http://127.0.0.1:{self.magnum_port}"

    @property
    def url(self) -> str:
        """Magnum's root (emulator-compatible name)."""
        return self.magnum_url

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> OpenStackBed:
        started = time.monotonic()
        try:
            self._timed("venv", lambda: setattr(self, "venv", ensure_bed_venv(self.progress)))
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self.fakes.start()
            self._timed("keystone", self._start_keystone)
            self._timed("provision", self._provision)
            self._timed("magnum", self._start_magnum)
            self._timed("template", self._create_template)
        except BaseException:
            self.stop(keep_logs=True)
            raise
        self.setup_s = time.monotonic() - started
        return self

    def stop(self, keep_logs: bool = True) -> None:
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.procs.clear()
        try:
            self.fakes.stop()
        except Exception:  # noqa: BLE001 - never started
            pass
        if not keep_logs:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _timed(self, what: str, step: Callable[[], object]) -> None:
        started = time.monotonic()
        step()
        self.timings[what] = time.monotonic() - started

    def _env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        # stevedore's entry-point cache is keyed on sys.path (our per-run dir included): keep its files here.
        env["XDG_CACHE_HOME"] = str(self.dir / "xdg-cache")
        env.update(extra)
        return env

    def _python(self) -> str:
        assert self.venv is not None
        return str(bed_python(self.venv))

    def _spawn(self, name: str, argv: list[str], env: dict[str, str], ready_url: str) -> None:
        log = (self.log_dir / f"{name}.out").open("ab")
        self.procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            env=env, cwd=self.dir, start_new_session=True)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.procs[name].poll() is not None:
                raise BedError(f"{name} exited with {self.procs[name].returncode}: {self.log_tail(name)}")
            try:
                if requests.get(ready_url, timeout=2).status_code < 500:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise BedError(f"{name} did not answer {ready_url} in {START_TIMEOUT_S:.0f}s: {self.log_tail(name)}")
            time.sleep(0.1)

    def log_tail(self, name: str, lines: int = 15) -> str:
        """The last lines of a service's output and log, after its last errors (what a failure needs)."""
        text = ""
        for path in (self.log_dir / f"{name}.out", self.log_dir / f"{name}.log"):
            if path.exists():
                all_lines = path.read_text(errors="replace").splitlines()
                errors = [line for line in all_lines if " ERROR " in line or "Traceback" in line][-5:]
                text += "\n".join([*errors, *(["..."] if errors else []), *all_lines[-lines:]]) + "\n"
        return f"(logs in {self.log_dir})\n{text}"

    # -- keystone -------------------------------------------------------------------------

    def _start_keystone(self) -> None:
        kdir = self.dir / "keystone"
        for sub in ("fernet-tokens", "fernet-receipts", "credential-keys"):
            (kdir / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        conf = kdir / "keystone.conf"
        conf.write_text(_ini({
            "DEFAULT": {"log_file": self.log_dir / "keystone.log", "debug": "False"},
            # a writer waits for SQLite's lock (default 5 s) rather than failing under load
            "database": {"connection": f"sqlite:///{kdir / 'keystone.sqlite'}?timeout=60"},
            "fernet_tokens": {"key_repository": kdir / "fernet-tokens"},
            "fernet_receipts": {"key_repository": kdir / "fernet-receipts"},
            "credential": {"key_repository": kdir / "credential-keys"},
            "cache": {"enabled": "true", "backend": "dogpile.cache.memory"},
        }))
        env = self._env(OS_KEYSTONE_CONFIG_FILES=str(conf))
        uid, gid = str(os.getuid()), str(os.getgid())

        def manage(*args: str) -> None:
            # keystone-manage, by module (the venv's scripts name the path it was built at)
            code = "import sys; from keystone.cmd.manage import main; sys.argv[0] = 'keystone-manage'; main()"
            proc = subprocess.run([self._python(), "-c", code, "--config-file", str(conf), *args], env=env,
                                  cwd=self.dir, capture_output=True, text=True, timeout=120)
            with (self.log_dir / "keystone-manage.out").open("a") as log:
                log.write(f"$ keystone-manage {args[0]}\n{proc.stdout}{proc.stderr}")
            if proc.returncode != 0:
                raise BedError(f"keystone-manage {args[0]} failed: {proc.stderr[-2000:]}")

        with ThreadPoolExecutor(3) as pool:  # the key repositories need no database
            jobs = [pool.submit(manage, "db_sync"),
                    pool.submit(manage, "fernet_setup", "--keystone-user", uid, "--keystone-group", gid),
                    pool.submit(manage, "credential_setup", "--keystone-user", uid, "--keystone-group", gid)]
            for job in jobs:
                job.result()
        manage("bootstrap", "--bootstrap-password", self.admin_password, "--bootstrap-username", "admin",
               "--bootstrap-project-name", "admin", "--bootstrap-role-name", "admin",
               "--bootstrap-service-name", "keystone", "--bootstrap-region-id", self.region,
               "--bootstrap-public-url", self.auth_url, "--bootstrap-internal-url", self.auth_url)
        self._spawn("keystone", [self._python(), str(HERE / "keystone_server.py"), str(self.keystone_port)], env,
                    self.auth_url)

    def token(self, username: str = "admin", project: str = "admin", password: str | None = None) -> str:
        """A project-scoped Keystone token (cached until 5 minutes before it expires)."""
        cached = self._tokens.get((username, project))
        if cached and cached[1] > time.time() + 300:
            return cached[0]
        if password is None:
            password = self.admin_password if username == "admin" else self.password
        body: dict[str, Any] = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": username, "domain": {"id": "default"}, "password": password}}},
            "scope": {"project": {"name": project, "domain": {"id": "default"}}}}}
        resp = requests.post(f"{self.auth_url}/auth/tokens", json=body, timeout=30)
        if resp.status_code != 201:
            raise BedError(f"Keystone token for {username}: {resp.status_code} {resp.text[:300]}")
        self._tokens[(username, project)] = (resp.headers["X-Subject-Token"], time.time() + 3000)
        return resp.headers["X-Subject-Token"]

    def _keystone(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        resp = requests.request(method, f"{self.auth_url}{path}", json=body, timeout=30,
                                headers={"X-Auth-Token": self.token()})
        if resp.status_code >= 300:
            raise BedError(f"Keystone {method} {path}: {resp.status_code} {resp.text[:300]}")
        return resp.json() if resp.content else {}

    def _provision(self) -> None:
        roles = {r["name"]: r["id"] for r in self._keystone("GET", "/roles")["roles"]}
        projects = {}
        for name in ("service", self.project):
            projects[name] = self._keystone("POST", "/projects", {"project": {
                "name": name, "domain_id": "default", "description": "gpuctl OpenStack bed"}})["project"]["id"]
        users = {}
        for name, password, project in ((self.username, self.password, self.project),
                                        ("magnum", self.service_password, "service")):
            users[name] = self._keystone("POST", "/users", {"user": {
                "name": name, "password": password, "domain_id": "default",
                "default_project_id": projects[project]}})["user"]["id"]
        grants = [(self.project, self.username, "member"), ("service", "magnum", "admin"),
                  ("service", "magnum", "service")]
        for project, user, role in grants:
            self._keystone("PUT", f"/projects/{projects[project]}/users/{users[user]}/roles/{roles[role]}")
        fakes = self.fakes.url
        catalog = [("magnum", "container-infra", f"{self.magnum_url}/v1"), ("glance", "image", f"{fakes}/image"),
                   ("nova", "compute", f"{fakes}/compute/v2.1"), ("neutron", "network", f"{fakes}/network")]
        for name, kind, url in catalog:
            service = self._keystone("POST", "/services", {"service": {"name": name, "type": kind,
                                                                       "enabled": True}})["service"]["id"]
            for interface in ("public", "internal", "admin"):
                self._keystone("POST", "/endpoints", {"endpoint": {
                    "service_id": service, "interface": interface, "url": url, "region_id": self.region}})

    # -- magnum ---------------------------------------------------------------------------

    def _start_magnum(self) -> None:
        assert self.venv is not None
        mdir = self.dir / "magnum"
        (mdir / "locks").mkdir(parents=True, exist_ok=True)
        # The driver's registration: a dist-info dir on PYTHONPATH (importlib.metadata / stevedore find it),
        # its module imported from this checkout (REPO_ROOT on PYTHONPATH).
        entry_points = self.dir / "entry-points"
        dist_info = entry_points / "gpuctl_sim_magnum_driver-0.0.dist-info"
        dist_info.mkdir(parents=True, exist_ok=True)
        (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: gpuctl-sim-magnum-driver\nVersion: 0.0\n")
        (dist_info / "entry_points.txt").write_text(f"[magnum.drivers]\n{DRIVER_ENTRY_POINT}\n")
        # The data plane runs in this (gpuctl's) venv, with this environment (GPUCTL_STATE_DIR: the tests').
        dataplane_env = self.dir / "dataplane-env.json"
        fd = os.open(dataplane_env, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({"python": sys.executable, "cwd": str(REPO_ROOT),
                       "env": {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                               "PYTHONPATH": str(REPO_ROOT)}}, handle)
        auth = {"auth_type": "password", "auth_url": self.auth_url, "username": "magnum",
                "password": self.service_password, "project_name": "service", "user_domain_id": "default",
                "project_domain_id": "default"}
        client = {"region_name": self.region, "endpoint_type": "publicURL"}
        conf = mdir / "magnum.conf"
        conf.write_text(_ini({
            "DEFAULT": {"transport_url": "fake:/", "host": "openstack-bed", "log_file": self.log_dir / "magnum.log",
                        "debug": os.environ.get("GPUCTL_BED_DEBUG", "False"), "state_path": mdir},
            "api": {"host": "127.0.0.1", "port": self.magnum_port, "workers": 1,
                    "api_paste_config": self.venv / "etc" / "magnum" / "api-paste.ini"},
            "database": {"connection": f"sqlite:///{mdir / 'magnum.sqlite'}?timeout=60"},
            "oslo_concurrency": {"lock_path": mdir / "locks"},
            "oslo_messaging_notifications": {"driver": "noop"},
            "keystone_authtoken": {**auth, "www_authenticate_uri": self.auth_url, "region_name": self.region},
            "keystone_auth": auth,
            "certificates": {"cert_manager_type": "x509keypair"},
            **{f"{name}_client": client for name in ("glance", "nova", "neutron", "magnum", "cinder", "octavia")},
        }))
        env = self._env(PYTHONPATH=f"{entry_points}{os.pathsep}{REPO_ROOT}",
                        GPUCTL_BED_DATAPLANE_ENV=str(dataplane_env))
        self._spawn("magnum", [self._python(), str(HERE / "magnum_server.py"), str(conf)], env, self.magnum_url)

    def magnum(self, method: str, path: str, body: dict[str, Any] | None = None, token: str | None = None,
               microversion: str = MICROVERSION) -> requests.Response:
        """One Magnum API request (admin's token unless given); the response as it came."""
        headers = {"X-Auth-Token": token or self.token(), "OpenStack-API-Version": microversion,
                   "Accept": "application/json"}
        return requests.request(method, f"{self.magnum_url}{path}", json=body, headers=headers, timeout=60)

    def _create_template(self) -> None:
        resp = self.magnum("POST", "/v1/clustertemplates", {
            "name": TEMPLATE, "coe": "kubernetes", "image_id": IMAGE["name"], "keypair_id": KEYPAIR,
            "external_network_id": NETWORK["name"], "flavor_id": "m1.large", "master_flavor_id": "m1.large",
            "server_type": "vm", "network_driver": "flannel", "public": True,
            "labels": {"kube_tag": KUBE_TAG}})
        if resp.status_code != 201:
            raise BedError(f"creating cluster template {TEMPLATE}: {resp.status_code} {resp.text[:500]}\n"
                           f"{self.log_tail('magnum')}")
        self.template_id = resp.json()["uuid"]

    # -- for tests ------------------------------------------------------------------------

    def write_clouds_yaml(self, path: Path, clouds: dict[str, str]) -> Path:
        """clouds.yaml with one entry per (cloud name -> password) for the bed's user."""
        entries = {name: {"auth": {"auth_url": self.auth_url, "username": self.username, "password": password,
                                   "project_name": self.project, "user_domain_name": "Default",
                                   "project_domain_name": "Default"},
                          "region_name": self.region, "interface": "public", "identity_api_version": 3}
                   for name, password in clouds.items()}
        path.write_text(yaml.safe_dump({"clouds": entries}))
        path.chmod(0o600)
        return path

    def _json(self, path: str) -> dict[str, Any]:
        resp = self.magnum("GET", path)
        if resp.status_code != 200:
            raise BedError(f"Magnum GET {path}: {resp.status_code} {resp.text[:300]}")
        return resp.json()

    def clusters(self) -> list[dict[str, Any]]:
        """Every cluster of every project, in detail (admin sees all)."""
        return self._json("/v1/clusters/detail")["clusters"]

    def cluster(self, ident: str) -> dict[str, Any] | None:
        resp = self.magnum("GET", f"/v1/clusters/{ident}")
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise BedError(f"Magnum GET cluster {ident}: {resp.status_code} {resp.text[:300]}")
        return resp.json()

    def nodegroups(self, cluster: str) -> list[dict[str, Any]]:
        return self._json(f"/v1/clusters/{cluster}/nodegroups")["nodegroups"]

    def memory_mb(self) -> dict[str, float]:
        """Resident memory of the bed's processes (Keystone, Magnum), in MiB."""
        out = {}
        for name, proc in self.procs.items():
            try:
                for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        out[name] = int(line.split()[1]) / 1024
            except OSError:
                continue
        return out
