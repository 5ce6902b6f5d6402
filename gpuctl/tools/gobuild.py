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
import zipfile
from collections.abc import Callable
from pathlib import Path

from gpuctl.tools.pins import (
    CONTROLLER_TOOLS_VERSION,
    ETCD_VERSION,
    HELM_VERSION,
    KUBERNETES_VERSION,
    KUEUE_VERSION,
    Tool,
)
from gpuctl.util.errors import ToolError

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


KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_METRICS_CERT_ENV = "GPUCTL_KUEUE_METRICS_CERT_DIR"
# Textual edits of cmd/kueue/main.go at KUEUE_VERSION, each on one line so that the line numbers of the
# manager's log callers stay upstream's. Each `old` must occur exactly once, or the build stops.
KUEUE_MAIN_PATCHES: tuple[tuple[str, str], ...] = (
    # L150: a --version flag, so that the installer can check what it built (upstream has none; its
    # version is only logged at start, L172-180, after the configuration has loaded).
    ("\tflag.Parse()\n",
     '\tgpuctlVersion := flag.Bool("version", false, "gpuctl build: print the version and exit"); flag.Parse(); '
     'if *gpuctlVersion { fmt.Println("kueue", version.GitVersion); os.Exit(0) }\n'),
    # L215-228: with internalCertManagement off, the metrics certwatcher always reads the hard-coded
    # /etc/kueue/metrics/certs/tls.{crt,key} (even with metrics.bindAddress "0") and exits when they are
    # missing; gpuctl writes nothing under /etc, so the directory can come from the environment.
    ('\t\tmetricsCertPath := "/etc/kueue/metrics/certs"\n',
     '\t\tmetricsCertPath := "/etc/kueue/metrics/certs"; '
     f'if dir := os.Getenv("{KUEUE_METRICS_CERT_ENV}"); dir != "" {{ metricsCertPath = dir }}\n'),
)
# Not extracted from the module zip: they hold upstream's rendered CRDs (config/components/crd/bases,
# the Helm chart's templates); gpuctl's come from controller-gen only.
_KUEUE_SKIP = ("config/", "charts/")


def patch_kueue_main(source: str) -> str:
    """cmd/kueue/main.go with KUEUE_MAIN_PATCHES applied; ToolError if one no longer matches exactly once."""
    for old, new in KUEUE_MAIN_PATCHES:
        if source.count(old) != 1:
            raise ToolError(f"cmd/kueue/main.go of {KUEUE_MODULE}@{KUEUE_VERSION} has {source.count(old)} lines "
                            f"{old.strip()!r}, gpuctl's build patch expects exactly one",
                            "update KUEUE_MAIN_PATCHES in gpuctl/tools/gobuild.py for this Kueue version")
        source = source.replace(old, new)
    return source


def _extract_module(zip_path: Path, prefix: str, dest: Path, skip: tuple[str, ...]) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    with zipfile.ZipFile(zip_path) as archive:
        for member in archive.infolist():
            name = member.filename.removeprefix(prefix)
            if name == member.filename or name.startswith(skip) or member.is_dir():
                continue
            if name.startswith("/") or ".." in Path(name).parts:
                raise ToolError(f"unexpected path {member.filename!r} in {zip_path}", "remove the file and rerun")
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(member))


def _build_kueue(go: str, tools: list[Tool], workdir: Path, out: Path, log: Path) -> None:
    """Kueue's manager as upstream's Makefile builds it (`go build ... cmd/kueue/main.go`, CGO off), in
    the module itself so that its own go.sum checks every dependency, with main.go replaced through
    `-overlay` by the patched copy (the go command refuses overlays of files in GOMODCACHE, hence the
    module's source extracted from its zip); then its CRDs as `make manifests` generates them."""
    (workdir / "go.mod").unlink(missing_ok=True)  # `go mod download` below runs outside a module
    info = subprocess.run([go, "mod", "download", "-json", f"{KUEUE_MODULE}@{KUEUE_VERSION}"],
                          cwd=workdir, env=_go_env(), capture_output=True, text=True)
    if info.returncode != 0:
        raise ToolError(f"cannot fetch {KUEUE_MODULE}@{KUEUE_VERSION} from the Go module proxy",
                        "check GOPROXY and network access to it")
    module = json.loads(info.stdout)
    src = workdir / "src"
    _extract_module(Path(module["Zip"]), f"{KUEUE_MODULE}@{KUEUE_VERSION}/", src, _KUEUE_SKIP)
    main_go = src / "cmd" / "kueue" / "main.go"
    patched = workdir / "overlay" / "main.go"
    patched.parent.mkdir(exist_ok=True)
    patched.write_text(patch_kueue_main(main_go.read_text()))
    overlay = workdir / "overlay.json"
    overlay.write_text(json.dumps({"Replace": {str(main_go.resolve()): str(patched.resolve())}}))
    commit = (module.get("Origin") or {}).get("Hash", "")
    version_pkg = f"{KUEUE_MODULE}/pkg/version"  # upstream's LD_FLAGS, Makefile L112-115
    ldflags = f"-s -w -X {version_pkg}.GitVersion={KUEUE_VERSION}" + (f" -X {version_pkg}.GitCommit={commit}"
                                                                        if commit else "")
    _run([go, "build", "-mod=readonly", "-trimpath", "-overlay", str(overlay.resolve()), "-ldflags", ldflags,
          "-o", str(out.resolve() / "kueue"), "./cmd/kueue"], src, log)
    # Makefile L157-161 (`make manifests`), with controller-gen at the version hack/tools/go.mod pins.
    bin_dir = workdir / "bin"
    _go_install(go, [f"sigs.k8s.io/controller-tools/cmd/controller-gen@{CONTROLLER_TOOLS_VERSION}"], "-s -w",
                workdir, bin_dir, log)
    crds = out.resolve() / "kueue-crds"
    if crds.exists():
        shutil.rmtree(crds)
    _run([str(bin_dir / "controller-gen"), "crd:generateEmbeddedObjectMeta=true",
          f"output:crd:artifacts:config={crds}", "paths=./apis/..."], src, log)
    if not any(crds.glob("*.yaml")):
        raise ToolError("controller-gen wrote no Kueue CRDs", f"see {log}")


Recipe = Callable[[str, list[Tool], Path, Path, Path], None]
RECIPES: dict[str, Recipe] = {
    "kubernetes": _build_kubernetes,
    "etcd": _build_etcd,
    "kwok": _build_kwok,
    "helm": _build_helm,
    "upstreamcheck": _build_upstreamcheck,
    "kueue": _build_kueue,
}


def build(go: str, recipe: str, tools: list[Tool], workdir: Path, out: Path, log: Path) -> None:
    """Build `tools` (all of one recipe) with `go`, leaving each binary at out/<name>."""
    workdir.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    RECIPES[recipe](go, tools, workdir, out, log)
