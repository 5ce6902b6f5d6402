"""Build the pinned tools from the Go module proxy when no release download is reachable.

`k8s.io/kubernetes` cannot be `go install`ed (its go.mod replaces every k8s.io staging module
with a local path), so its binaries are built in a generated module that requires it and
replaces each staging module with its published `v0.X.Y` twin.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable

from gpuctl.errors import ToolError
from gpuctl.tools.pins import ETCD_VERSION, HELM_VERSION, KUBERNETES_VERSION, Tool

MIN_GO = (1, 26)


def go_toolchain() -> tuple[str | None, str]:
    """Return (path to go, description) or (None, why it cannot be used)."""
    go = shutil.which("go")
    if go is None:
        return None, "no Go toolchain on PATH"
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()
    match = re.match(r"go(\d+)\.(\d+)", out)
    if not match or (int(match[1]), int(match[2])) < MIN_GO:
        return None, f"Go {out or '?'} is older than the go{MIN_GO[0]}.{MIN_GO[1]} these tools need"
    return go, out


def _go_env() -> dict[str, str]:
    env = dict(os.environ, CGO_ENABLED="0", GOTOOLCHAIN="local")
    # Builds go through the module proxy; machines that cannot reach the checksum database
    # (sum.golang.org) set GOSUMDB=off themselves, and we keep whatever they chose.
    env.setdefault("GOSUMDB", os.environ.get("GPUCTL_GOSUMDB", "off"))
    return env


def _run(args: list[str], cwd: Path, log: Path, **env: str) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(args)}\n")
        out.flush()
        proc = subprocess.run(args, cwd=cwd, env={**_go_env(), **env}, stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log.read_text().strip().splitlines()[-1:] or ["?"]
        raise ToolError(f"Go build failed: {tail[0]}", f"see the full log in {log}")


def _kube_ldflags() -> str:
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.gitVersion={KUBERNETES_VERSION}", f"-X {pkg}.gitMajor={major}",
                  f"-X {pkg}.gitMinor={minor}"]
    return " ".join(flags)


def _kubernetes_gomod(go: str, workdir: Path) -> str:
    """go.mod for the kubernetes build, replace list taken from the release's own go.mod."""
    info = subprocess.run([go, "mod", "download", "-json", f"k8s.io/kubernetes@{KUBERNETES_VERSION}"],
                          cwd=workdir, env=_go_env(), capture_output=True, text=True)
    if info.returncode != 0:
        raise ToolError(f"cannot fetch k8s.io/kubernetes@{KUBERNETES_VERSION} from the Go module proxy",
                        "check GOPROXY and network access to it")
    upstream = Path(json.loads(info.stdout)["GoMod"]).read_text()
    staging = re.findall(r"^\s*(k8s\.io/[\w.-]+) => \./staging/", upstream, re.M)
    staging_version = "v0." + KUBERNETES_VERSION.split(".", 1)[1]
    replaces = "\n".join(f"\t{m} => {m} {staging_version}" for m in staging)
    return (f"module gpuctl.local/build\n\ngo {MIN_GO[0]}.{MIN_GO[1]}\n\n"
            f"require k8s.io/kubernetes {KUBERNETES_VERSION}\n\nreplace (\n{replaces}\n)\n")


def _build_kubernetes(go: str, tools: list[Tool], workdir: Path, out: Path, log: Path) -> None:
    (workdir / "go.mod").unlink(missing_ok=True)  # `go mod download` below runs outside a module
    (workdir / "go.mod").write_text(_kubernetes_gomod(go, workdir))
    packages = [f"k8s.io/kubernetes/cmd/{t.name}" for t in tools]
    _run([go, "build", "-mod=mod", "-trimpath", "-ldflags", _kube_ldflags(), "-o", f"{out}/", *packages], workdir, log)


_ETCD_MAIN = """package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
"""


def _build_etcd(go: str, tools: list[Tool], workdir: Path, out: Path, log: Path) -> None:
    # etcd's own cmd module has replace directives too; a two-line wrapper over etcdmain has none.
    (workdir / "go.mod").write_text(
        f"module gpuctl.local/etcd\n\ngo {MIN_GO[0]}.{MIN_GO[1]}\n\nrequire go.etcd.io/etcd/server/v3 {ETCD_VERSION}\n")
    (workdir / "main.go").write_text(_ETCD_MAIN)
    _run([go, "build", "-mod=mod", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "etcd"), "."], workdir, log)


def _go_install(go: str, packages: list[str], ldflags: str, workdir: Path, out: Path, log: Path) -> None:
    _run([go, "install", "-trimpath", "-ldflags", ldflags, *packages], workdir, log, GOBIN=str(out))


def _build_kwok(go: str, tools: list[Tool], workdir: Path, out: Path, log: Path) -> None:
    packages = [f"sigs.k8s.io/kwok/cmd/{t.name}@{t.version}" for t in tools]
    _go_install(go, packages, "-s -w", workdir, out, log)


def _build_helm(go: str, tools: list[Tool], workdir: Path, out: Path, log: Path) -> None:
    ldflags = f"-s -w -X helm.sh/helm/v3/internal/version.version={HELM_VERSION}"
    _go_install(go, [f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"], ldflags, workdir, out, log)


UPSTREAMCHECK_SOURCE = Path(__file__).parent / "upstreamcheck"


def _build_upstreamcheck(go: str, tools: list[Tool], workdir: Path, out: Path, log: Path) -> None:
    # gpuctl's own module; go.sum beside it pins every upstream module, so the build is
    # reproducible. go-nvml's nvml package is cgo, hence a C compiler (and CGO_ENABLED=1).
    cc = (subprocess.run([go, "env", "CC"], capture_output=True, text=True).stdout.split() or ["gcc"])[0]
    if shutil.which(cc) is None:
        raise ToolError(f"building upstreamcheck needs a C compiler ({cc!r} not found): go-nvml uses cgo",
                        "install gcc (e.g. 'apt-get install gcc') and rerun")
    for stale in workdir.glob("*.go"):
        stale.unlink()
    for src in UPSTREAMCHECK_SOURCE.iterdir():
        if src.suffix == ".go" or src.name in ("go.mod", "go.sum"):
            shutil.copyfile(src, workdir / src.name)
    # -Wno-deprecated-declarations: NVML's header marks dozens of calls deprecated; keep the log readable.
    _run([go, "build", "-mod=mod", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "upstreamcheck"), "."],
         workdir, log, CGO_ENABLED="1", CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations")


Recipe = Callable[[str, list[Tool], Path, Path, Path], None]
RECIPES: dict[str, Recipe] = {
    "kubernetes": _build_kubernetes,
    "etcd": _build_etcd,
    "kwok": _build_kwok,
    "helm": _build_helm,
    "upstreamcheck": _build_upstreamcheck,
}


def build(go: str, recipe: str, tools: list[Tool], workdir: Path, out: Path, log: Path) -> None:
    """Build `tools` (all of one recipe) with `go`, leaving each binary at out/<name>."""
    workdir.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    RECIPES[recipe](go, tools, workdir, out, log)
