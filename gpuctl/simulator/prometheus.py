"""A real Prometheus (pinned in gpuctl/tools/pins.py, built by gpuctl/tools/gobuild.py) beside a sim cluster,
scraping the sim's DCGM exporter (dcgm_exporter.py): the data plane `gpuctl top` and `advise` query.

Both run as detached processes of this machine like the sim's Kueue and Karpenter (daemons.py), under
<cluster dir>/monitoring (Prometheus's config and TSDB, pid files) with their logs in <cluster dir>/logs, on free
loopback ports, and go with the cluster (procs.cluster_procs). The scrape job is named as the GPU Operator's
ServiceMonitor names it (assets/state-dcgm-exporter/0500_service_monitor.yaml: jobLabel app, whose value is
nvidia-dcgm-exporter); its interval is 2 s instead of the operator's 15 s (values.yaml
dcgmExporter.serviceMonitor.interval), so that a test sees a change at once, and its timeout the same 2 s
(Prometheus allows no more than the interval): on a loaded machine a 1 s timeout failed every scrape for a minute.
A static target adds no namespace/pod/container labels of its own, so the exporter's pod labels arrive as they
are; under the operator's ServiceMonitor (honorLabels false) they arrive as exported_pod, exported_namespace,
exported_container.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from gpuctl.simulator.daemons import Daemon, free_port, wait_ready
from gpuctl.simulator.dcgm_exporter import ensure_dcgm_exporter, stop_dcgm_exporter
from gpuctl.simulator.kwok import KwokCluster
from gpuctl.simulator.procs import flag, is_prometheus, read_argv
from gpuctl.tools.installer import ensure_tools
from gpuctl.util.errors import ClusterError, WaitTimeout
from gpuctl.util.files import write_atomic
from gpuctl.util.output import info

TOOL = "prometheus"
JOB = "nvidia-dcgm-exporter"
SCRAPE_INTERVAL = "2s"
RETENTION = "2d"  # the sim's data plane is for looking at now, not for history
READY_TIMEOUT_S = 60.0


def _dir(cluster: str) -> Path:
    return KwokCluster(cluster).dir / "monitoring"


def _config_path(cluster: str) -> Path:
    return _dir(cluster) / "prometheus.yml"


def log_path(cluster: str) -> Path:
    return KwokCluster(cluster).dir / "logs" / "prometheus.log"


def render_prometheus_config(exporter: str) -> str:
    """Prometheus's configuration: one job scraping the exporter at HOST:PORT `exporter`."""
    config = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL,
                   "evaluation_interval": SCRAPE_INTERVAL},
        "scrape_configs": [{"job_name": JOB, "metrics_path": "/metrics",
                            "static_configs": [{"targets": [exporter]}]}],
    }
    return yaml.safe_dump(config, sort_keys=False)


def _argv(binary: Path, cluster: str, port: int) -> list[str]:
    return [str(binary), f"--config.file={_config_path(cluster)}", f"--storage.tsdb.path={_dir(cluster) / 'data'}",
            f"--storage.tsdb.retention.time={RETENTION}", f"--web.listen-address=127.0.0.1:{port}"]


def _daemon(cluster: str) -> Daemon:
    directory = KwokCluster(cluster).dir
    return Daemon(_dir(cluster) / "prometheus.pid", log_path(cluster), lambda argv: is_prometheus(argv, directory))


def get_prometheus_pid(cluster: str) -> int | None:
    return _daemon(cluster).pid()


def monitoring_url(cluster: str) -> str | None:
    """The base URL of the sim cluster's Prometheus (http://127.0.0.1:PORT, its HTTP API under /api/v1) when it
    runs; None otherwise."""
    pid = get_prometheus_pid(cluster)
    address = flag(read_argv(pid) or (), "--web.listen-address") if pid is not None else None
    return f"http://{address}" if address else None


def ensure_monitoring(cluster: str, timeout: float = READY_TIMEOUT_S) -> str:
    """The sim's DCGM exporter and a Prometheus scraping it, for a sim cluster: started where they do not run
    (Prometheus again where its configuration changed, e.g. a new exporter port; its data stays), and the
    Prometheus base URL returned once it is ready (/-/ready). Idempotent. Builds Prometheus on first use
    (minutes); ClusterError for a cluster that does not exist."""
    [tool] = ensure_tools([TOOL], info)  # before the lock: a first build takes minutes
    exporter = ensure_dcgm_exporter(cluster, timeout)
    kwok = KwokCluster(cluster)
    with kwok.lock():
        if not kwok.complete:
            raise ClusterError(f"no sim cluster {cluster!r}",
                               f"create it: gpuctl cluster create --cloud sim --name {cluster}")
        config = render_prometheus_config(exporter)
        path = _config_path(cluster)
        stale = not path.exists() or path.read_text() != config
        if stale:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_atomic(path, config)  # read at start only (gpuctl sends no reload): a new one, a new process
        daemon = _daemon(cluster)
        if daemon.keep(lambda p: Path(p.argv[0]) == tool.path and not stale) is None:
            daemon.start(_argv(tool.path, cluster, free_port()),
                         {k: v for k, v in os.environ.items() if k != "KUBECONFIG"})
    url = monitoring_url(cluster)
    if url is None:
        raise ClusterError(f"Prometheus of sim cluster {cluster!r} exited at once", f"its log is {log_path(cluster)}")
    wait_ready(f"{url}/-/ready", lambda: get_prometheus_pid(cluster) is not None,
               f"Prometheus of sim cluster {cluster!r}", log_path(cluster), timeout)
    _wait_scraped(url, cluster, timeout)
    return url


def _wait_scraped(url: str, cluster: str, timeout: float) -> None:
    """Return once Prometheus has scraped the exporter (`up` of the job is 1): a ready Prometheus that has not
    scraped yet answers every query with nothing, and `gpuctl top` would say there are no GPUs."""
    query = f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": f'up{{job="{JOB}"}} == 1'})
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(query, timeout=5) as answer:
                if json.load(answer)["data"]["result"]:
                    return
        except (OSError, ValueError, KeyError):
            pass  # not answering yet: wait
        if time.monotonic() > deadline:
            raise WaitTimeout(f"Prometheus of sim cluster {cluster!r} has not scraped the DCGM exporter after "
                              f"{timeout:.0f}s", f"see its log {log_path(cluster)}")
        time.sleep(0.2)


def stop_monitoring(cluster: str) -> None:
    """Stop the cluster's Prometheus and DCGM exporter, whether or not their pid files name them."""
    _daemon(cluster).stop()
    stop_dcgm_exporter(cluster)
