"""Run one sim cluster's control plane with `kwokctl --runtime binary`.

kwokctl starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the kwok
controller as detached processes with pid files under <workdir>/clusters/<name>/pids, so the
cluster outlives the gpuctl command that created it.

Crash safety: gpuctl can be killed (kill -9) at any point, so every state on disk must be
recognisable and repairable by the next run.
- A cluster is complete once the marker file `gpuctl-created` exists; kwokctl writes its own
  kwok.yaml before it has made the pki, the kubeconfig or a single process, so a cluster dir
  without the marker is half-made: its processes are killed and it is made again.
- Everything else (gpuctl's kwok Stages, the running components, the simulated operator of the
  current code) is observed and repaired on every run.
- One gpuctl at a time works on a cluster: an fcntl lock on <workdir>/<name>.lock, released by the
  kernel when its holder dies, so a kill -9 never leaves a stale lock.
- A pid from a pid file is trusted only when /proc says the process is ours (procs.py).
"""

from __future__ import annotations

import datetime
import fcntl
import ipaddress
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from gpuctl import __version__
from gpuctl.simulator.procs import (
    OPERATOR_MODULE,
    Proc,
    all_procs,
    cluster_procs,
    flag,
    is_component,
    is_operator,
    kill_and_wait,
    kill_cluster_procs,
    operator_stamp,
    read_argv,
)
from gpuctl.tools.installer import ensure_tools
from gpuctl.tools.pins import KUBERNETES_VERSION, SIM_TOOLS
from gpuctl.util.errors import ClusterError, WaitTimeout
from gpuctl.util.files import write_atomic
from gpuctl.util.lazy_import import LazyImport
from gpuctl.util.output import info
from gpuctl.util.paths import state_dir
from gpuctl.util.resources import data_dir
from gpuctl.util.templating import render_template
from gpuctl.util.words import plural

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509 import oid as x509_oid
else:  # only for a cluster issued by a given CA (write_pki)
    x509 = LazyImport("cryptography.x509", "cryptography")
    x509_oid = LazyImport("cryptography.x509.oid", "cryptography")
    hashes = LazyImport("cryptography.hazmat.primitives.hashes", "cryptography")
    serialization = LazyImport("cryptography.hazmat.primitives.serialization", "cryptography")
    rsa = LazyImport("cryptography.hazmat.primitives.asymmetric.rsa", "cryptography")

log = logging.getLogger(__name__)

_PORTS = ("apiserver", "etcd", "etcd_peer", "kwok_controller", "controller_manager", "scheduler")
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller")
OPERATOR = "gpuctl-sim-operator"
MARKER = "gpuctl-created"
LOCK_TIMEOUT_S = 300.0
KWOKCTL_TIMEOUT_S = 600.0  # a create builds nothing (tools are installed first): minutes at most
CRASH_AT = "GPUCTL_SIM_CRASH_AT"
_OUR_STAGE = re.compile(r"^\s*name:\s*gpuctl-", re.MULTILINE)
_DOCUMENT_SEPARATOR = re.compile(r"^---[ \t]*$", re.MULTILINE)
_STAGES_BEGIN = "# gpuctl's kwok Stages follow (templates/sim/stages.yaml); gpuctl rewrites everything below."


def crash_point(name: str) -> None:
    """Test hook: with GPUCTL_SIM_CRASH_AT=<name>, gpuctl kills itself (SIGKILL) here, as a crash would
    (tests/integration/test_sim_crash.py)."""
    if os.environ.get(CRASH_AT) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def context_name(cluster: str) -> str:
    """The kubeconfig context gpuctl writes for a sim cluster."""
    return f"gpuctl-sim-{cluster}"


def workdir() -> Path:
    """KWOK_WORKDIR for every sim cluster: kept apart from the user's own ~/.kwok."""
    return Path(os.path.abspath(state_dir() / "sim" / "kwok"))


def _free_ports() -> dict[str, int]:
    # kwokctl's own choice scans down from 32766 and can race between clusters: pick our own.
    with ExitStack() as stack:
        ports = {}
        for name in _PORTS:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports[name] = sock.getsockname()[1]
        return ports


def kwokctl_config(binaries: dict[str, str], apiserver_args: dict[str, str] | None = None) -> str:
    """The configuration `kwokctl create cluster` gets (templates/sim/kwokctl.yaml.j2): the pinned Kubernetes,
    loopback ports of the cluster's own, the tools' `binaries` by name, extra kube-apiserver flags."""
    return render_template("sim/kwokctl.yaml.j2", kube_version=KUBERNETES_VERSION, ports=_free_ports(),
                           binaries=binaries, apiserver_args=apiserver_args or {})


class KwokCluster:
    """One kwokctl-managed control plane, addressed by cluster name."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dir = workdir() / "clusters" / name

    # -- what is on disk ------------------------------------------------------------------

    @property
    def config_path(self) -> Path:
        """gpuctl's kwokctl configuration, read by `kwokctl create` only."""
        return workdir() / f"{self.name}.kwokctl.yaml"

    @property
    def lock_path(self) -> Path:
        return workdir() / f"{self.name}.lock"

    @property
    def kubeconfig_path(self) -> Path:
        return self.dir / "kubeconfig.yaml"

    @property
    def on_disk(self) -> bool:
        """Files of the cluster exist, a half-made one's included (its lock file aside)."""
        return self.dir.exists() or self.config_path.exists()

    @property
    def exists(self) -> bool:
        """Anything of the cluster on disk: a lock file alone is one a gpuctl holds, or held when it died."""
        return self.on_disk or self.lock_path.exists()

    @property
    def complete(self) -> bool:
        """kwokctl finished creating it, and what it made is there. A gpuctl before the marker appended
        its Stages to kwok.yaml (without _STAGES_BEGIN) only after `kwokctl create` had succeeded: those
        clusters are complete too. (A delete removes the marker first: a crashed delete is half-made.)"""
        if (self.dir / MARKER).exists():
            return all((self.dir / f).exists() for f in ("kwok.yaml", "kubeconfig.yaml", "pki/ca.crt"))
        try:
            text = (self.dir / "kwok.yaml").read_text()
        except OSError:
            return False
        return _OUR_STAGE.search(text) is not None and _STAGES_BEGIN not in text

    def pids(self) -> dict[str, int]:
        """The pid files as they are (see component_pid for a pid that is trusted)."""
        pids = {}
        for pid_file in sorted((self.dir / "pids").glob("*.pid")):
            try:
                pids[pid_file.stem] = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
        return pids

    def component_pid(self, component: str) -> int | None:
        """The pid of a running control-plane component; None when its pid file is missing or stale."""
        pid = self.pids().get(component)
        argv = read_argv(pid) if pid is not None else None
        return pid if argv is not None and is_component(argv, self.dir, component) else None

    def stopped(self) -> list[str]:
        """The control-plane components that do not run."""
        return [c for c in COMPONENTS if self.component_pid(c) is None]

    def running(self) -> bool:
        """Every control-plane component runs."""
        return not self.stopped()

    def endpoint(self) -> str | None:
        try:  # kwokctl writes it in place: a killed create can leave it empty or cut short
            return yaml.safe_load(self.kubeconfig_path.read_text())["clusters"][0]["cluster"]["server"]
        except (OSError, yaml.YAMLError, LookupError, TypeError):
            return None

    # -- one gpuctl at a time -------------------------------------------------------------

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the cluster's lock (fcntl: released when the holder exits, however it exits).

        The lock file goes when the cluster does; a waiter that then gets the lock of the unlinked
        file retries on the path, so two holders can never hold different files."""
        path = self.lock_path
        path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        waited = False
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                os.close(fd)
                if time.monotonic() > deadline:
                    raise WaitTimeout(f"another gpuctl (pid {holder}) is still working on sim cluster {self.name!r} "
                                      f"after {LOCK_TIMEOUT_S:.0f}s", "wait for it to finish") from None
                if not waited:
                    info(f"  waiting for another gpuctl (pid {holder}) working on sim cluster {self.name!r}")
                    waited = True
                time.sleep(0.1)
                continue
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            if not self.on_disk:
                path.unlink(missing_ok=True)
            os.close(fd)

    # -- kwokctl --------------------------------------------------------------------------

    def _kwokctl(self, *args: str, apiserver_args: dict[str, str] | None = None) -> None:
        tools = {t.name: t.path for t in ensure_tools(SIM_TOOLS, info)}
        env = dict(
            os.environ,
            KWOK_WORKDIR=str(workdir()),
            # Never the user's kubeconfig: gpuctl manages that itself (kwokctl is told --kubeconfig="").
            KUBECONFIG=str(self.dir / "kwokctl.kubeconfig"),
            # kwokctl looks kubectl up on PATH before its configured binary: put the pinned one first.
            PATH=f"{tools['kubectl'].parent}{os.pathsep}{os.environ.get('PATH', '')}",
        )
        config: list[str] = []
        flags: list[str] = []
        if args[0] == "create":
            self.config_path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.config_path, kwokctl_config({n: str(p.resolve()) for n, p in tools.items()},
                                                          apiserver_args))
            config, flags = ["--config", str(self.config_path)], ["--kubeconfig="]
        command = [str(tools["kwokctl"]), "--name", self.name, *config, *args, *flags]
        log.info("running %s (KWOK_WORKDIR=%s)", " ".join(command), env["KWOK_WORKDIR"])
        # umask 077: the CA and admin keys kwokctl writes, and every file of its components, are private.
        proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, umask=0o077)
        crash_point(f"kwokctl-{args[0]}")
        try:
            stdout, stderr = proc.communicate(timeout=KWOKCTL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise WaitTimeout(f"kwokctl {' '.join(args)} did not finish in {KWOKCTL_TIMEOUT_S:g}s",
                              f"component logs are in {self.dir / 'logs'}") from None
        log.debug("kwokctl output: %s", stderr + stdout)
        if proc.returncode != 0:
            lines = [line for line in (stderr + stdout).splitlines() if line.strip()]
            raise ClusterError(f"kwokctl {' '.join(args)} failed: {lines[-1] if lines else proc.returncode}",
                               f"component logs are in {self.dir / 'logs'}")

    def create(self, apiserver_args: dict[str, str] | None = None, ca: tuple[bytes, bytes] | None = None) -> None:
        """Make a new control plane and mark it complete; `apiserver_args` adds kube-apiserver flags
        (e.g. a token webhook); `ca` (PEM certificate, PEM unencrypted key) is the CA its pki is issued by
        instead of one kwokctl makes (see write_pki). Its Stages, processes and operator are the ensure_*
        methods' work."""
        try:
            if ca is not None:
                self.dir.mkdir(parents=True, exist_ok=True)
                self.dir.chmod(0o700)
                write_pki(self.dir / "pki", *ca)
            self._kwokctl("create", "cluster", apiserver_args=apiserver_args)
        finally:
            self.config_path.unlink(missing_ok=True)  # kwokctl keeps what it needs in kwok.yaml
        self.protect_keys()
        self.mark_complete()

    def mark_complete(self) -> None:
        if not (self.dir / MARKER).exists():
            write_atomic(self.dir / MARKER, f"{__version__}\n")

    def protect_keys(self) -> None:
        """Private keys (CA, admin) and the cluster dir readable by their owner only; kwokctl runs
        under umask 077, this also fixes clusters made before it did."""
        if not self.dir.is_dir():
            return
        self.dir.chmod(0o700)
        for path in self.dir.rglob("*.key"):
            if path.is_file() and not path.is_symlink() and path.stat().st_mode & 0o077:
                path.chmod(0o600)

    def ensure_stages(self) -> bool:
        """gpuctl's kwok Stages (templates/sim/stages.yaml) after kwokctl's default ones in kwok.yaml;
        True if they had to be written. Supplying any Stage at create time would replace kwok's defaults.

        The kwok controller reads them at start only, so kwok.yaml changes only while it is stopped:
        a running controller has always loaded the file as it is (ensure_started starts it again)."""
        config = self.dir / "kwok.yaml"
        text = config.read_text()
        if _STAGES_BEGIN in text:
            base = text.partition(_STAGES_BEGIN)[0]
        else:  # kwokctl's own, or with the Stages a gpuctl before _STAGES_BEGIN appended
            chunks = _DOCUMENT_SEPARATOR.split(text)
            base = "---".join(chunks[:next((i for i, c in enumerate(chunks) if _OUR_STAGE.search(c)), len(chunks))])
        stages = (data_dir("templates") / "sim" / "stages.yaml").read_text()
        want = f"{base.rstrip()}\n{_STAGES_BEGIN}\n---\n{stages}"
        if text == want:
            return False
        self._stop_component("kwok-controller")
        crash_point("stages")
        write_atomic(config, want)
        return True

    def _stop_component(self, component: str) -> None:
        pid = self.component_pid(component)
        argv = read_argv(pid) if pid is not None else None
        if pid is not None and argv is not None:
            kill_and_wait([Proc(pid, argv)])
        # kwokctl skips a component whose pid file names a live process, whoever that is.
        (self.dir / "pids" / f"{component}.pid").unlink(missing_ok=True)

    def ensure_started(self) -> bool:
        """Start whatever control-plane component is not running; True if one had to be started.

        Before kwokctl starts them: a kwokctl left by a killed gpuctl is stopped, a pid file whose
        process is not ours (gone, or its pid reused) is removed, and a component running without
        a pid file (kwokctl killed between fork and write) is killed: it holds its port."""
        drivers, others = cluster_procs(workdir(), self.name)
        kill_and_wait(drivers)
        known = {pid for c in COMPONENTS if (pid := self.component_pid(c)) is not None}
        for component in COMPONENTS:
            if self.component_pid(component) is None:
                (self.dir / "pids" / f"{component}.pid").unlink(missing_ok=True)
        kill_and_wait([p for p in others if is_component(p.argv, self.dir) and p.pid not in known])
        if len(known) == len(COMPONENTS):
            return False
        self._kwokctl("start", "cluster")
        return True

    # -- the simulated GPU operator -------------------------------------------------------

    @property
    def operator_pid_file(self) -> Path:
        # Beside kwokctl's own pid files: pids() lists it with the control plane's.
        return self.dir / "pids" / f"{OPERATOR}.pid"

    def _operator_argv(self) -> list[str]:
        # --stamp names the code it runs: an operator of other code is restarted.
        return [sys.executable, "-m", OPERATOR_MODULE, "--kubeconfig", str(self.kubeconfig_path),
                "--logs", str(self.dir / "sim-logs"), "--stamp", operator_stamp()]

    def operator_pid(self) -> int | None:
        """The pid of this cluster's operator when it runs the current code."""
        pid = self.pids().get(OPERATOR)
        argv = read_argv(pid) if pid is not None else None
        return pid if argv is not None and list(argv[1:]) == self._operator_argv()[1:] else None

    def ensure_operator(self) -> str | None:
        """Exactly one simulated GPU operator, running the current code. Any other operator of this
        cluster (outdated code, a second one) is stopped first. Returns what had to be done, or None."""
        want = self._operator_argv()
        procs = [p for p in all_procs() if is_operator(p.argv, self.kubeconfig_path)]
        current = next((p for p in procs if list(p.argv[1:]) == want[1:]), None)
        stale = [p for p in procs if p is not current]
        kill_and_wait(stale)
        if current is not None:
            if self.pids().get(OPERATOR) != current.pid:
                write_atomic(self.operator_pid_file, str(current.pid))
            return f"stopped {plural(len(stale), 'other simulated operator')}" if stale else None
        crash_point("operator-start")
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        with (self.dir / "logs" / f"{OPERATOR}.log").open("a") as log_file:
            proc = subprocess.Popen(want, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                    start_new_session=True, umask=0o077)
        write_atomic(self.operator_pid_file, str(proc.pid))
        if not stale:
            return "started the simulated operator"
        stamps = sorted({flag(p.argv, "--stamp") or "no stamp" for p in stale})
        return f"restarted the simulated operator (it ran {', '.join(stamps)}; now {operator_stamp()})"

    # -- deletion -------------------------------------------------------------------------

    def delete(self) -> None:
        """Stop every process of the cluster and remove every file of it, a half-made one included."""
        with self.lock():
            self.remove()

    def remove(self) -> None:
        """delete() for a caller that holds the lock."""
        # First the marker: a crash from here on leaves a half-made cluster, which the next create
        # makes again and the next delete finishes.
        (self.dir / MARKER).unlink(missing_ok=True)
        kill_cluster_procs(workdir(), self.name, helm_context=context_name(self.name))
        crash_point("delete")
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.config_path.unlink(missing_ok=True)
        if not set(cluster_names()) - {self.name}:  # kwokctl's kubeconfig, written before gpuctl passed --kubeconfig=""
            (workdir() / "kwokctl-scratch.kubeconfig").unlink(missing_ok=True)

    def log_tail(self, component: str = "kube-apiserver", lines: int = 3) -> str:
        log = self.dir / "logs" / f"{component}.log"
        if not log.exists():
            return ""
        return " | ".join(log.read_text(errors="replace").strip().splitlines()[-lines:])


def write_pki(pki: Path, ca_cert_pem: bytes, ca_key_pem: bytes) -> None:
    """kwokctl's pki, issued by a given CA: ca.crt/ca.key, and the one admin.crt/admin.key that every
    component uses as client and serving certificate (CN kwok-admin, O system:masters, kwokctl's SANs).
    `kwokctl create` keeps a pki dir it finds, so a cluster made on it trusts clients that CA signed and
    serves a certificate that CA verifies (a cloud's cluster CA, e.g. Magnum's)."""
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = datetime.datetime.now(datetime.timezone.utc)
    dns = ["kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
           "localhost"]
    ips = [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(x509_oid.NameOID.ORGANIZATION_NAME, "system:masters"),
                                     x509.NameAttribute(x509_oid.NameOID.COMMON_NAME, "kwok-admin")]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(min(now + datetime.timedelta(days=365), ca_cert.not_valid_after_utc))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, content_commitment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509_oid.ExtendedKeyUsageOID.SERVER_AUTH,
                                                   x509_oid.ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName([*map(x509.DNSName, dns), *map(x509.IPAddress, ips)]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),  # type: ignore[arg-type]
                           critical=False)
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    pki.mkdir(mode=0o700, parents=True, exist_ok=True)
    private = serialization.PrivateFormat.TraditionalOpenSSL
    files = {"ca.crt": ca_cert.public_bytes(serialization.Encoding.PEM), "ca.key": ca_key_pem,
             "admin.crt": cert.public_bytes(serialization.Encoding.PEM),
             "admin.key": key.private_bytes(serialization.Encoding.PEM, private, serialization.NoEncryption())}
    for name, data in files.items():
        fd = os.open(pki / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)


def cluster_names() -> list[str]:
    """Every cluster with something on disk, half-made ones included (so that they can be deleted)."""
    root = workdir()
    names = {p.name for p in (root / "clusters").iterdir() if p.is_dir()} if (root / "clusters").is_dir() else set()
    if root.is_dir():
        names |= {p.name[:-len(".kwokctl.yaml")] for p in root.glob("*.kwokctl.yaml")}
        names |= {p.stem for p in root.glob("*.lock")}
    return sorted(names)
