"""Kueue's real controller manager (sigs.k8s.io/kueue, pinned in gpuctl/tools/pins.py) beside a sim cluster.

The manager runs as a detached process of this machine, as the sim's control-plane components do,
with everything it needs under <cluster dir>/kueue (config, self-signed certificates, pid file) and
its log in <cluster dir>/logs/kueue.log. How it is made to run out of cluster, from Kueue v0.19.2's
source (cmd/kueue/main.go, apis/config/v1beta2, pkg/features/kube_features.go):
- leaderElection.leaderElect false: leader election is on by default and needs an in-cluster namespace.
- internalCertManagement.enable false: otherwise BootstrapCerts waits, without end, for a Secret the
  kubelet would mount (pkg/util/cert/cert.go). The webhook server still always starts (its webhooks are
  registered unconditionally) and needs tls.crt/tls.key in webhook.certDir: a self-signed pair for
  127.0.0.1, served on 127.0.0.1 only, new at each start as is the port.
- Kueue's webhooks are in force as in a cluster: once the manager is ready, start_kueue applies the webhook
  configurations kueue_webhooks.py makes from those controller-gen generated from Kueue's source, pointed at
  this manager's port and certificate (again at every start), and returns once the API server calls them
  and they apply every namespace's `default` LocalQueue (kueue_webhooks.wait_for_webhooks).
  So a Job created without the `kueue.x-k8s.io/queue-name` label in a namespace with a LocalQueue named
  `default` is put in that queue, and a queued Job is suspended at creation (pkg/controller/jobs/job/
  job_webhook.go, Default). While the manager is down the API server refuses Jobs outside kube-system
  (failurePolicy Fail), as with Kueue's own deployment.
- The metrics cert watcher reads /etc/kueue/metrics/certs whenever internal cert management is off;
  gpuctl's build (gobuild.py, KUEUE_MAIN_PATCHES) takes the directory from GPUCTL_KUEUE_METRICS_CERT_DIR,
  pointed at the same pair. metrics.bindAddress "0" turns the metrics server off ("" means the default).
- VisibilityOnDemand=false: the visibility API server would need /visibility/tls.{crt,key}.
- DisableWaitForPodsReady=true: no kubelet makes pods Ready, so waitForPodsReady (on by default in
  v0.19) would evict every admitted workload after 30 minutes.
- integrations.frameworks [batch/job] only (FRAMEWORKS: the sim registers their webhooks only); otherwise
  the Configuration gpuctl installs on clouds, DRA's deviceClassMappings included (stack/kueue.py). The
  manager reads its Configuration once, at start: one whose config file is not what gpuctl renders now (a
  gpuctl of another version wrote it) is restarted.
The manager's informers need all eleven kueue.x-k8s.io CRDs: apply those in kueue_crds_dir() (made by
controller-gen from Kueue's API types at build time) before start_kueue.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from gpuctl.kube.errors import KubeNotFound
from gpuctl.kube.kube import Kube
from gpuctl.model.change import Change
from gpuctl.model.dra import API_VERSION
from gpuctl.model.tenant import profile_of
from gpuctl.simulator.daemons import Daemon, apply_crds, free_port, wait_ready
from gpuctl.simulator.kueue_webhooks import (
    WEBHOOKS_FILE,
    ensure_webhook_configurations,
    render_webhook_configurations,
    wait_for_webhooks,
)
from gpuctl.simulator.kwok import KwokCluster
from gpuctl.simulator.procs import flag
from gpuctl.stack.dra_classes import SELECTOR
from gpuctl.stack.kueue import manager_config
from gpuctl.tools.gobuild import KUEUE_METRICS_CERT_ENV
from gpuctl.tools.installer import ensure_tools
from gpuctl.util.errors import ClusterError
from gpuctl.util.files import write_atomic
from gpuctl.util.lazy_import import LazyImport
from gpuctl.util.output import info

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509 import oid as x509_oid
else:  # only to make a serving certificate
    x509 = LazyImport("cryptography.x509", "cryptography")
    x509_oid = LazyImport("cryptography.x509.oid", "cryptography")
    hashes = LazyImport("cryptography.hazmat.primitives.hashes", "cryptography")
    serialization = LazyImport("cryptography.hazmat.primitives.serialization", "cryptography")
    ec = LazyImport("cryptography.hazmat.primitives.asymmetric.ec", "cryptography")

CRDS_DIR = "kueue-crds"  # beside the binary in the tool cache (pins.py: the kueue Tool's extras)
FEATURE_GATES = "VisibilityOnDemand=false,DisableWaitForPodsReady=true"
READY_TIMEOUT_S = 120.0
log = logging.getLogger(__name__)
# Only integrations whose webhooks the sim registers (kueue_webhooks.FRAMEWORK_WEBHOOKS): a Job of another kind
# would not be suspended at creation.
FRAMEWORKS = ("batch/job",)


def kueue_crds_dir() -> Path:
    """The directory of Kueue's CRDs (one kueue.x-k8s.io_<plural>.yaml each), built when absent."""
    [tool] = ensure_tools(["kueue"], info)
    return tool.path.parent / CRDS_DIR


def _kueue_dir(cluster: str) -> Path:
    return KwokCluster(cluster).dir / "kueue"


def _config_path(cluster: str) -> Path:
    return _kueue_dir(cluster) / "config.yaml"


def _log_path(cluster: str) -> Path:
    return KwokCluster(cluster).dir / "logs" / "kueue.log"


def _argv(binary: Path, cluster: str) -> list[str]:
    return [str(binary), "--config", str(_config_path(cluster)), "--kubeconfig",
            str(KwokCluster(cluster).kubeconfig_path), f"--feature-gates={FEATURE_GATES}"]


def _is_kueue(argv: tuple[str, ...], cluster: str) -> bool:
    """A Kueue manager of this cluster: the binary named kueue, run with this cluster's config."""
    return Path(argv[0]).name == "kueue" and flag(argv, "--config") == str(_config_path(cluster))


def daemon(cluster: str) -> Daemon:
    """The cluster's Kueue manager as a process of this machine."""
    return Daemon(_kueue_dir(cluster) / "kueue.pid", _log_path(cluster), lambda argv: _is_kueue(argv, cluster))


def _write_certs(certs: Path) -> None:
    """A self-signed serving pair for 127.0.0.1/localhost (webhook and metrics cert watcher)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509_oid.NameOID.COMMON_NAME, "gpuctl-sim-kueue")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    certs.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(certs / "tls.key", key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption()).decode())
    write_atomic(certs / "tls.crt", cert.public_bytes(serialization.Encoding.PEM).decode())


def render_kueue_config(cert_dir: Path, webhook_port: int, health_port: int, profiles: Iterable[str] = ()) -> str:
    """The manager's Configuration (config.kueue.x-k8s.io/v1beta2; decoded strictly: no unknown keys):
    the one gpuctl installs on clouds (stack/kueue.py), made to run out of cluster (see above); `profiles`: those
    of gpuctl's MIG DeviceClasses on the cluster (class_profiles), mapped as the clouds' release maps the spec's."""
    config = {
        **manager_config(profiles),
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "integrations": {"frameworks": list(FRAMEWORKS)},
    }
    return yaml.safe_dump(config, sort_keys=False)


def class_profiles(cluster: str) -> list[str]:
    """The MIG profiles of gpuctl's DeviceClasses on the cluster (stack/dra_classes.py: apply makes them before
    install-kueue), from their extended resource names; none where resource.k8s.io/v1 is not served. A class
    made later is mapped once the manager is started again (ensure_kueue: its config is then not current)."""
    kube = Kube.connect(KwokCluster(cluster).kubeconfig_path)
    try:
        classes = kube.list(API_VERSION, "DeviceClass", labels=SELECTOR, what="listing gpuctl's DeviceClasses")
    except KubeNotFound:
        return []
    return sorted(p for c in classes if (p := profile_of(str(c.spec.get("extendedResourceName") or ""))))


def ensure_kueue(cluster: str) -> Change:
    """Kueue on a sim cluster: its CRDs (server-side applied), its manager and its webhook configurations.
    CREATED where the CRDs or the manager were missing; UPDATED where the manager was started again (its config
    out of date: the DeviceClasses it maps) or the configurations were out of date."""
    missing = apply_crds(cluster, kueue_crds_dir(), "Kueue")
    before = get_kueue_pid(cluster)
    pid, registered = _run_manager(cluster, READY_TIMEOUT_S)
    if missing or before is None:
        return Change.CREATED
    return Change.UPDATED if registered or pid != before else Change.NO_CHANGE


def maps_profiles(cluster: str, profiles: Iterable[str]) -> bool:
    """Whether the cluster's Kueue manager runs, with a config that maps exactly the DeviceClasses of `profiles`
    (read only: what ensure_kueue would leave as it is, for plan)."""
    if get_kueue_pid(cluster) is None:
        return False
    try:
        config = yaml.safe_load(_config_path(cluster).read_text())
    except (OSError, yaml.YAMLError):
        return False
    mappings = (config.get("resources") or {}).get("deviceClassMappings") if isinstance(config, dict) else None
    return bool(mappings == manager_config(profiles)["resources"]["deviceClassMappings"])


def _health_address(cluster: str) -> str:
    config = yaml.safe_load(_config_path(cluster).read_text())
    return str(config["health"]["healthProbeBindAddress"])


def get_kueue_pid(cluster: str) -> int | None:
    """The pid of the cluster's Kueue manager when its pid file names a live one; None otherwise."""
    return daemon(cluster).pid()


def wait_for_kueue(cluster: str, timeout: float = READY_TIMEOUT_S) -> None:
    """Block until the manager answers /readyz (its webhook server is up and nothing waits for certs);
    ClusterError as soon as it has exited, WaitTimeout after `timeout` seconds."""
    wait_ready(f"http://{_health_address(cluster)}/readyz", lambda: get_kueue_pid(cluster) is not None,
               f"Kueue's manager of sim cluster {cluster!r}", _log_path(cluster), timeout)


def start_kueue(cluster: str, timeout: float = READY_TIMEOUT_S) -> int:
    """Run Kueue's manager for a sim cluster and return its pid once it is ready (wait_for_kueue) and the API
    server calls its webhooks (register_webhooks). Idempotent: a manager of the pinned binary already running
    for the cluster is kept; one of another binary (an older pin) is stopped first. Builds the tool on first
    use (minutes)."""
    return _run_manager(cluster, timeout)[0]


def _run_manager(cluster: str, timeout: float) -> tuple[int, bool]:
    """start_kueue's work: the manager's pid, and whether the webhook configurations were written."""
    kwok = KwokCluster(cluster)
    [tool] = ensure_tools(["kueue"], info)  # before the lock: a first build takes minutes
    with kwok.lock():
        if not kwok.complete:
            raise ClusterError(f"no sim cluster {cluster!r}",
                               f"create it: gpuctl cluster create --cloud sim --name {cluster}")
        want = _argv(tool.path, cluster)
        current = daemon(cluster).keep(lambda p: list(p.argv) == want and _config_is_current(cluster))
        pid = current.pid if current is not None else _start(cluster, want)
    wait_for_kueue(cluster, timeout)
    return pid, register_webhooks(cluster, tool.path.parent / WEBHOOKS_FILE)


def register_webhooks(cluster: str, manifests: Path) -> bool:
    """Point Kueue's webhook configurations (kueue_webhooks.py, from controller-gen's `manifests`) at the
    manager the cluster's config file describes, its port and certificate, where they differ, and wait until
    the API server calls them (kueue_webhooks.wait_for_webhooks); True if they were written."""
    config = yaml.safe_load(_config_path(cluster).read_text())
    webhook = config["webhook"]
    docs = render_webhook_configurations(manifests.read_text(), config["integrations"]["frameworks"],
                                         int(webhook["port"]), (Path(webhook["certDir"]) / "tls.crt").read_text())
    kube = Kube.connect(KwokCluster(cluster).kubeconfig_path)
    written = ensure_webhook_configurations(kube, docs)
    waited = wait_for_webhooks(kube)
    log.debug("Kueue's webhooks of sim cluster %s in force after %.1fs", cluster, waited)
    return written


def _config_is_current(cluster: str) -> bool:
    """Whether the config file is the one gpuctl would render now, with the ports and certs it names."""
    try:
        text = _config_path(cluster).read_text()
        config = yaml.safe_load(text)
        webhook, health = config["webhook"], config["health"]["healthProbeBindAddress"]
        wanted = render_kueue_config(Path(webhook["certDir"]), int(webhook["port"]), int(health.rsplit(":", 1)[1]),
                                     class_profiles(cluster))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError):
        return False
    return text == wanted


def _start(cluster: str, argv: list[str]) -> int:
    certs = _kueue_dir(cluster) / "certs"
    _write_certs(certs)
    write_atomic(_config_path(cluster), render_kueue_config(certs, free_port(), free_port(), class_profiles(cluster)))
    env = dict(os.environ, **{KUEUE_METRICS_CERT_ENV: str(certs)})
    env.pop("KUBECONFIG", None)  # --kubeconfig names the cluster's; nothing else may be picked up
    return daemon(cluster).start(argv, env)


def stop_kueue(cluster: str) -> None:
    """Stop the cluster's Kueue manager, whether or not its pid file names it (found through /proc).
    Does not take the cluster's lock: KwokCluster.remove calls it with the lock held."""
    daemon(cluster).stop()
