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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuctl.tools.pins import (
    CONTROLLER_TOOLS_VERSION,
    ETCD_VERSION,
    KARPENTER_VERSION,
    KUBERNETES_VERSION,
    KUEUE_VERSION,
    PROMETHEUS_MODULE_VERSION,
    PROMETHEUS_VERSION,
    Tool,
)
from gpuctl.util.errors import ToolError
from gpuctl.util.lazy_import import LazyImport

if TYPE_CHECKING:
    import zipfile
else:
    zipfile = LazyImport("zipfile")  # only to unpack a Go module: `gpuctl render` imports the installer

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


def _version_tuple(version: str) -> tuple[int, ...] | None:
    """(1, 26, 9) for "go1.26.9" or "1.26.9"; None for anything else (an rc, a devel build)."""
    match = re.fullmatch(r"(?:go)?(\d+)\.(\d+)(?:\.(\d+))?", version.split()[0] if version.split() else "")
    return tuple(int(part) for part in match.groups() if part is not None) if match else None


def needed_toolchain(gomod: str, local: str) -> str:
    """GOTOOLCHAIN for building the module of `gomod` with the local Go `local` ("go1.26.8"): "local", or
    "go<X>" when its `go` line asks for a newer Go (the go command then fetches that toolchain from the
    module proxy, as the module golang.org/toolchain), so that a pin bump needs no code edit."""
    match = re.search(r"^go\s+(\S+)\s*$", gomod, re.M)
    if match is None:  # no `go` line means go 1.16
        return "local"
    wanted, have = _version_tuple(match[1]), _version_tuple(local)
    if wanted is None or have is None:
        raise ToolError(f"cannot compare the module's 'go {match[1]}' with the local {local}",
                        "build with a released Go toolchain")
    if wanted <= have:
        return "local"
    return "go" + ".".join(map(str, (wanted + (0,))[:3]))  # "go 1.27" asks for the release go1.27.0


def _go_env() -> dict[str, str]:
    env = dict(os.environ, CGO_ENABLED="0", GOTOOLCHAIN="local")
    # Builds go through the module proxy; machines that cannot reach the checksum database
    # (sum.golang.org) set GOSUMDB=off themselves, and we keep whatever they chose.
    env.setdefault("GOSUMDB", os.environ.get("GPUCTL_GOSUMDB", "off"))
    return env


def _run(args: list[str], cwd: Path, log: Path, **env: str) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join([*(f'{k}={v}' for k, v in env.items()), *args])}\n")
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


def helm_module(version: str) -> str:
    """Helm's Go module for a release: each major is its own module path (helm.sh/helm/v3, helm.sh/helm/v4)."""
    return f"helm.sh/helm/{version.split('.', 1)[0]}"


def _build_helm(go: str, tools: list[Tool], workdir: Path, out: Path, log: Path) -> None:
    # The version ldflag is the one Helm's own Makefile sets (helm.sh/helm/v4@v4.3.1 Makefile L46:
    # -X helm.sh/helm/v4/internal/version.version=...; v3's the same under helm.sh/helm/v3), so that
    # `helm version --short` prints the pin the installer checks for.
    for tool in tools:
        module = helm_module(tool.version)
        ldflags = f"-s -w -X {module}/internal/version.version={tool.version}"
        _go_install(go, [f"{module}/cmd/helm@{tool.version}"], ldflags, workdir, out, log)


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


Patches = tuple[tuple[str, str], ...]  # (old, new) whole-line textual edits of one source file
KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_METRICS_CERT_ENV = "GPUCTL_KUEUE_METRICS_CERT_DIR"
# Textual edits of cmd/kueue/main.go at KUEUE_VERSION, each on one line so that the line numbers of the
# manager's log callers stay upstream's. Each `old` must occur exactly once, or the build stops.
KUEUE_MAIN_PATCHES: Patches = (
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


def apply_patches(source: str, patches: Patches, where: str, table: str) -> str:
    """`source` with each (old, new) applied; ToolError naming `where` (file and module) and the patch
    `table` to update when an `old` does not occur exactly once (upstream moved on)."""
    for old, new in patches:
        if source.count(old) != 1:
            raise ToolError(f"{where} has {source.count(old)} lines {old.strip()!r}, gpuctl's build patch "
                            f"expects exactly one", f"update {table} in gpuctl/tools/gobuild.py for this version")
        source = source.replace(old, new)
    return source


def patch_kueue_main(source: str) -> str:
    """cmd/kueue/main.go with KUEUE_MAIN_PATCHES applied; ToolError if one no longer matches exactly once."""
    return apply_patches(source, KUEUE_MAIN_PATCHES, f"cmd/kueue/main.go of {KUEUE_MODULE}@{KUEUE_VERSION}",
                         "KUEUE_MAIN_PATCHES")


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


def _fetch_module(go: str, module: str, version: str, workdir: Path, skip: tuple[str, ...],
                  **env: str) -> tuple[Path, dict[str, Any]]:
    """module@version's source from the module proxy, extracted from its zip into workdir/src (minus the
    `skip` prefixes), and `go mod download -json`'s record of it."""
    (workdir / "go.mod").unlink(missing_ok=True)  # `go mod download` runs outside a module
    info = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"],
                          cwd=workdir, env={**_go_env(), **env}, capture_output=True, text=True)
    if info.returncode != 0:
        why = (info.stderr.strip().splitlines() or [""])[-1]
        raise ToolError(f"cannot fetch {module}@{version} from the Go module proxy" + (f": {why}" if why else ""),
                        "check GOPROXY and network access to it")
    record: dict[str, Any] = json.loads(info.stdout)
    src = workdir / "src"
    _extract_module(Path(record["Zip"]), f"{module}@{version}/", src, skip)
    return src, record


def _patch_overlay(src: Path, workdir: Path, patches: dict[str, Patches], table: str, module: str) -> Path:
    """An -overlay file replacing each src/<path> by its copy with that path's patches from `table`: the
    go command refuses overlays of files in GOMODCACHE, hence the source extracted into `src`."""
    replace = {}
    for rel, file_patches in patches.items():
        original, patched = src / rel, workdir / "overlay" / rel
        patched.parent.mkdir(parents=True, exist_ok=True)
        patched.write_text(apply_patches(original.read_text(), file_patches, f"{rel} of {module}", table))
        replace[str(original.resolve())] = str(patched.resolve())
    overlay = workdir / "overlay.json"
    overlay.write_text(json.dumps({"Replace": replace}))
    return overlay.resolve()


def _controller_gen(go: str, workdir: Path, log: Path) -> Path:
    """controller-gen at CONTROLLER_TOOLS_VERSION, installed into workdir/bin."""
    bin_dir = workdir / "bin"
    _go_install(go, [f"sigs.k8s.io/controller-tools/cmd/controller-gen@{CONTROLLER_TOOLS_VERSION}"], "-s -w",
                workdir, bin_dir, log)
    return bin_dir / "controller-gen"


def _generate(go: str, src: Path, dest: Path, generator: str, args: list[str], workdir: Path, log: Path,
              **env: str) -> None:
    """controller-gen run in `src` with `args`, the output of its `generator` (crd, webhook) going into `dest`."""
    controller_gen = _controller_gen(go, workdir, log)
    if dest.exists():
        shutil.rmtree(dest)
    _run([str(controller_gen), *args, f"output:{generator}:artifacts:config={dest}"], src, log, **env)
    if not any(dest.glob("*.yaml")):
        raise ToolError(f"controller-gen's {generator} generator wrote nothing into {dest}", f"see {log}")


def _generate_crds(go: str, src: Path, crds: Path, args: list[str], workdir: Path, log: Path, **env: str) -> None:
    """controller-gen at CONTROLLER_TOOLS_VERSION run in `src` with `args`, writing the CRDs into `crds`."""
    _generate(go, src, crds, "crd", args, workdir, log, **env)


# The packages upstream's `make manifests` (Makefile L162-165) runs controller-gen's rbac and webhook generators
# over: their +kubebuilder:webhook markers (pkg/controller/jobs/*/..._webhook.go, pkg/webhooks/*.go) become
# config/components/webhook/manifests.yaml. gpuctl runs the webhook generator only.
KUEUE_WEBHOOK_PATHS = ";".join(f"./pkg/{pkg}/..." for pkg in ("controller", "webhooks", "util/cert", "visibility",
                                                                 "config"))


def _build_kueue(go: str, tools: list[Tool], workdir: Path, out: Path, log: Path) -> None:
    """Kueue's manager as upstream's Makefile builds it (`go build ... cmd/kueue/main.go`, CGO off), in
    the module itself so that its own go.sum checks every dependency, with main.go replaced through
    `-overlay` by the patched copy; then its CRDs and webhook manifests as `make manifests` generates them."""
    src, module = _fetch_module(go, KUEUE_MODULE, KUEUE_VERSION, workdir, _KUEUE_SKIP)
    overlay = _patch_overlay(src, workdir, {"cmd/kueue/main.go": KUEUE_MAIN_PATCHES}, "KUEUE_MAIN_PATCHES",
                             f"{KUEUE_MODULE}@{KUEUE_VERSION}")
    commit = (module.get("Origin") or {}).get("Hash", "")
    version_pkg = f"{KUEUE_MODULE}/pkg/version"  # upstream's LD_FLAGS, Makefile L112-115
    ldflags = f"-s -w -X {version_pkg}.GitVersion={KUEUE_VERSION}" + (f" -X {version_pkg}.GitCommit={commit}"
                                                                        if commit else "")
    _run([go, "build", "-mod=readonly", "-trimpath", "-overlay", str(overlay), "-ldflags", ldflags,
          "-o", str(out.resolve() / "kueue"), "./cmd/kueue"], src, log)
    # Makefile L157-161 (`make manifests`), with controller-gen at the version hack/tools/go.mod pins.
    _generate_crds(go, src, out.resolve() / "kueue-crds", ["crd:generateEmbeddedObjectMeta=true", "paths=./apis/..."],
                   workdir, log)
    # The same target's webhook manifests (one MutatingWebhookConfiguration, one ValidatingWebhookConfiguration
    # whose entries call a Service): kueue-webhooks/manifests.yaml, which the sim points at its manager.
    _generate(go, src, out.resolve() / "kueue-webhooks", "webhook", ["webhook", f"paths={KUEUE_WEBHOOK_PATHS}"],
              workdir, log)


KARPENTER_MODULE = "sigs.k8s.io/karpenter"
# Textual edits at KARPENTER_VERSION, each within one line so that upstream's line numbers stay.
KARPENTER_PATCHES: dict[str, Patches] = {
    # L197, L199: the metrics and health-probe servers listen on every interface (only the port is an
    # option); gpuctl's processes listen on loopback only.
    "pkg/operator/operator.go": (
        ('\t\t\tBindAddress: fmt.Sprintf(":%d", options.FromContext(ctx).MetricsPort),\n',
         '\t\t\tBindAddress: fmt.Sprintf("127.0.0.1:%d", options.FromContext(ctx).MetricsPort),\n'),
        ('\t\tHealthProbeBindAddress: fmt.Sprintf(":%d", options.FromContext(ctx).HealthProbePort),\n',
         '\t\tHealthProbeBindAddress: fmt.Sprintf("127.0.0.1:%d", options.FromContext(ctx).HealthProbePort),\n'),
    ),
    # L20, L32: a --version flag, so that the installer can check what it built (upstream has none, and
    # its flag set panics on an unknown flag: pkg/operator/injection/injection.go L45-58).
    "kwok/main.go": (
        ('\t"github.com/samber/lo"\n', '\t"fmt"; "os"; "github.com/samber/lo"\n'),
        ("\tctx, op := operator.NewOperator()\n",
         '\tif len(os.Args) == 2 && os.Args[1] == "--version" { fmt.Println("karpenter-kwok", operator.Version); '
         "os.Exit(0) }; ctx, op := operator.NewOperator()\n"),
    ),
}
# Upstream's rendered CRDs for the Helm chart; gpuctl's come from controller-gen only. pkg/apis/crds and
# kwok/apis/crds are kept: //go:embed needs them to compile (pkg/apis/apis.go L32-39, kwok/apis/apis.go L32).
_KARPENTER_SKIP = ("kwok/charts/",)


def _toolchain_env(go: str, module: str, workdir: Path) -> dict[str, str]:
    """The go command's environment overrides for building module@version: none with the local Go, else
    GOTOOLCHAIN (needed_toolchain) and, unless the user chose one, the go command's own GOSUMDB: it
    verifies a downloaded toolchain only against the checksum database, and refuses it with GOSUMDB=off
    (cmd/go/internal/modfetch/sumdb.go, useSumDB)."""
    (workdir / "go.mod").unlink(missing_ok=True)  # `go list -m` runs outside a module
    # `go list -m` fetches only the go.mod, which works whatever Go it asks for (`go mod download` does not).
    listed = subprocess.run([go, "list", "-m", "-json", module], cwd=workdir, env=_go_env(),
                            capture_output=True, text=True)
    if listed.returncode != 0:
        raise ToolError(f"cannot fetch {module} from the Go module proxy", "check GOPROXY and network access to it")
    env = _go_env()
    if "GOSUMDB" not in os.environ and "GPUCTL_GOSUMDB" not in os.environ:
        del env["GOSUMDB"]  # not gpuctl's default "off": the go command's own (go env -w, else sum.golang.org)
    local, sumdb = subprocess.run([go, "env", "GOVERSION", "GOSUMDB"], env=env, capture_output=True,
                                  text=True).stdout.strip().splitlines()
    toolchain = needed_toolchain(Path(json.loads(listed.stdout)["GoMod"]).read_text(), local)
    return {} if toolchain == "local" else {"GOTOOLCHAIN": toolchain, "GOSUMDB": sumdb}


def _build_karpenter(go: str, tools: list[Tool], workdir: Path, out: Path, log: Path) -> None:
    """Karpenter's kwok cloud provider (upstream: `ko build sigs.k8s.io/karpenter/kwok`, Makefile L31-32),
    built like Kueue's manager: in the extracted module with -overlay patches, then its CRDs."""
    [tool] = tools
    module = f"{KARPENTER_MODULE}@{KARPENTER_VERSION}"
    env = _toolchain_env(go, module, workdir)
    src, _ = _fetch_module(go, KARPENTER_MODULE, KARPENTER_VERSION, workdir, _KARPENTER_SKIP, **env)
    overlay = _patch_overlay(src, workdir, KARPENTER_PATCHES, "KARPENTER_PATCHES", module)
    ldflags = f"-s -w -X {KARPENTER_MODULE}/pkg/operator.Version={KARPENTER_VERSION}"  # no commit: the proxy has none
    _run([go, "build", "-mod=readonly", "-trimpath", "-overlay", str(overlay), "-ldflags", ldflags,
          "-o", str(out.resolve() / tool.name), "./kwok"], src, log, **env)
    # What `go generate` runs (pkg/apis/apis.go L30, kwok/apis/apis.go L30), without the `object` generator
    # (it would rewrite zz_generated.deepcopy.go) and the Makefile's later yq edits (hack/validation/*.sh).
    # controller-gen loads the packages with `go list`, hence the toolchain here too.
    _generate_crds(go, src, out.resolve() / "karpenter-crds", ["crd", "paths=./pkg/apis/...", "paths=./kwok/apis/..."],
                   workdir, log, **env)


PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
# What upstream's .promu.yml builds with, less `builtinassets` (the React UI, which `make assets` compiles with npm):
# without it web/ui/ui.go serves the UI from web/ui/static on disk, absent here, while the HTTP API (/api/v1/*,
# /-/ready) needs no assets. remove_all_sd leaves out the cloud service discoveries (plugins/plugin_*.go); static,
# file and HTTP discovery stay (plugins/minimum.go). Both are documented in its README ("Building from source").
PROMETHEUS_TAGS = "netgo,remove_all_sd"


def _build_prometheus(go: str, tools: list[Tool], workdir: Path, out: Path, log: Path) -> None:
    """cmd/prometheus with `go install module/cmd/prometheus@version` (its go.mod has no replace directives, and
    go install ignores the go.work the module ships), the version set as .promu.yml's ldflags set it."""
    module = f"{PROMETHEUS_MODULE}@{PROMETHEUS_MODULE_VERSION}"
    env = _toolchain_env(go, module, workdir)
    ldflags = f"-s -w -X github.com/prometheus/common/version.Version={PROMETHEUS_VERSION.lstrip('v')}"
    _run([go, "install", "-trimpath", "-tags", PROMETHEUS_TAGS, "-ldflags", ldflags,
          f"{PROMETHEUS_MODULE}/cmd/prometheus@{PROMETHEUS_MODULE_VERSION}"], workdir, log, GOBIN=str(out.resolve()),
         **env)


Recipe = Callable[[str, list[Tool], Path, Path, Path], None]
RECIPES: dict[str, Recipe] = {
    "kubernetes": _build_kubernetes,
    "etcd": _build_etcd,
    "kwok": _build_kwok,
    "helm": _build_helm,
    "upstreamcheck": _build_upstreamcheck,
    "kueue": _build_kueue,
    "karpenter": _build_karpenter,
    "prometheus": _build_prometheus,
}


def build(go: str, recipe: str, tools: list[Tool], workdir: Path, out: Path, log: Path) -> None:
    """Build `tools` (all of one recipe) with `go`, leaving each binary at out/<name>."""
    workdir.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    RECIPES[recipe](go, tools, workdir, out, log)
