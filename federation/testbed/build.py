"""The test bed's programs, built once from their published Go modules into a cache outside the repo.

Helm, which the deployment tests lint, render and install the charts with (deploy/helm/), is built here too.

`testbed/go.mod` pins kube-apiserver and kube-controller-manager (the `k8s.io/kubernetes` module, its
staging modules required at the matching releases) and etcd at the release that Kubernetes release is
tested with; KWOK is installed at `KWOK_VERSION`; Volcano's CRDs are rendered from Volcano's published
API module by controller-gen (`testbed/volcano/go.mod`), the generator Volcano itself uses. The cache
is keyed by a hash of everything that decides the output (the Go files, go.mod/go.sum, KWOK's version,
the Go toolchain and the linker's flags), so a change to any of them builds afresh, and concurrent callers (pytest
workers, a person's `make kube-up`) wait on one lock instead of building twice.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import platformdirs

REPO = Path(__file__).resolve().parents[2]
MODULE = REPO / "testbed"
KWOK_VERSION = "v0.7.0"
HELM_VERSION = "v3.19.0"  # built on Kubernetes 1.34's client libraries, as the test bed
PROMETHEUS_VERSION = "v0.316.0"  # the Go module's version of Prometheus 3.16
PROGRAMS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
VOLCANO_API_PACKAGES = ("topology/v1alpha1", "batch/v1alpha1", "scheduling/v1beta1")


class BuildError(RuntimeError):
    """The test bed could not be built; the message carries the failing command's output."""


@dataclass(frozen=True)
class Tools:
    bin: Path  # etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok, helm
    crds: Path  # Volcano's CRDs as controller-gen renders them (topology.volcano.sh_hypernodes.yaml, ...)

    def program(self, name: str) -> str:
        return str(self.bin / name)

    def crd(self, group: str, plural: str) -> Path:
        return self.crds / f"{group}_{plural}.yaml"


def cache_root() -> Path:
    return Path(os.environ.get("FEDERATION_TESTBED_CACHE") or platformdirs.user_cache_dir("gpu-federation")) / "testbed"


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError("the test bed is built with Go, and no `go` is on PATH (https://go.dev/dl/)")
    return go


def kube_version() -> str:
    """The Kubernetes release `testbed/go.mod` pins (v1.34.4)."""
    found = re.search(r"^\s*k8s\.io/kubernetes (v\d+\.\d+\.\d+)\s*$", (MODULE / "go.mod").read_text(), re.MULTILINE)
    if found is None:
        raise BuildError(f"{MODULE / 'go.mod'} does not require k8s.io/kubernetes at a release")
    return found.group(1)


def ldflags() -> str:
    """Stripped, and stamped with the release as Kubernetes' own build stamps it: without the stamp the API
    server says it is v0.0.0-master+$Format:%H$, which operators that check the server's version refuse."""
    version = kube_version()
    major, minor, _ = version.removeprefix("v").split(".")
    stamp = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    return " ".join(["-s -w"] + [f"-X {package}.{name}={value}" for package in
                                 ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
                                 for name, value in stamp.items()])


def key() -> str:
    """What the cache is keyed by: the module sources, KWOK's version and the Go toolchain."""
    digest = hashlib.sha256()
    for path in sorted(p for p in MODULE.rglob("*") if p.is_file() and p.suffix in (".go", ".mod", ".sum")):
        digest.update(str(path.relative_to(MODULE)).encode() + b"\0" + path.read_bytes() + b"\0")
    version = subprocess.run([_go(), "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout
    digest.update(f"kwok {KWOK_VERSION} helm {HELM_VERSION} {version.strip()} {ldflags()}".encode())
    return digest.hexdigest()[:16]


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(argv, cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, check=False)
    if done.returncode:
        raise BuildError(f"{' '.join(argv)} (in {cwd}) failed:\n{done.stdout}{done.stderr}")


def _once(target: Path, what: str, build: Callable[[], None], say: Callable[[str], None]) -> None:
    """Build into `target` unless a build finished there; concurrent callers (pytest workers, a person's `make
    kube-up`) wait on one lock instead of building twice."""
    if (target / "complete").exists():
        return
    root = target.parent
    root.mkdir(parents=True, exist_ok=True)
    with (root / "lock").open("a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another build holds it: say who, since when, rather than wait in silence
            lock.seek(0)
            say(f"waiting for the test bed build that holds {root / 'lock'}: {lock.read().strip() or 'unknown'}")
            fcntl.flock(lock, fcntl.LOCK_EX)
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()} ({' '.join(sys.argv)[:200]}), since "
                   f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n")
        lock.flush()
        if (target / "complete").exists():  # another process built it while we waited
            return
        shutil.rmtree(target, ignore_errors=True)
        started = time.monotonic()
        say(f"building {what} into {target}")
        build()
        (target / "complete").write_text(f"{time.monotonic() - started:.0f}\n")
        say(f"built in {time.monotonic() - started:.0f} s; {size(target) / 2**20:.0f} MiB in {target}")


def ensure(say: Callable[[str], None] = lambda _: None) -> Tools:
    """The built test bed, building it first when the cache has none for this key."""
    target = cache_root() / key()
    tools = Tools(target / "bin", target / "crds")

    def build() -> None:
        env = {"GOFLAGS": "-buildvcs=false -trimpath", "CGO_ENABLED": "0"}
        say("  kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kubectl ...")
        _run([_go(), "build", f"-ldflags={ldflags()}", "-o", str(tools.bin) + "/", "./cmd/..."], MODULE, env)
        say(f"  kwok {KWOK_VERSION} ...")
        _run([_go(), "install", "-ldflags=-s -w", f"sigs.k8s.io/kwok/cmd/kwok@{KWOK_VERSION}"], MODULE,
             {**env, "GOBIN": str(tools.bin)})
        say(f"  helm {HELM_VERSION} ...")
        _run([_go(), "install", "-ldflags=-s -w", f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"], MODULE,
             {**env, "GOBIN": str(tools.bin)})
        say("  Volcano's CRDs (controller-gen over volcano.sh/apis) ...")
        paths = [f"paths=volcano.sh/apis/pkg/apis/{p}" for p in VOLCANO_API_PACKAGES]
        _run([_go(), "tool", "controller-gen", "crd:crdVersions=v1", *paths, f"output:crd:dir={tools.crds}"],
             MODULE / "volcano", env)
        missing = [p for p in (*PROGRAMS, "kwok", "helm") if not (tools.bin / p).exists()]
        if missing or not tools.crd("topology.volcano.sh", "hypernodes").exists():
            raise BuildError(f"the build finished without {', '.join(missing) or 'the HyperNode CRD'}")

    _once(target, "the Kubernetes test bed (once per version; about 10 minutes on 2 cores)", build, say)
    return tools


def promtool(say: Callable[[str], None] = lambda _: None) -> Path:
    """Prometheus' `promtool` (the alerts' checks and unit tests) at `PROMETHEUS_VERSION`, built once beside the
    test bed: a cache of its own, so the test bed's key, and its longer build, stay as they are."""
    version = subprocess.run([_go(), "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()
    target = cache_root() / f"promtool-{PROMETHEUS_VERSION}-{version}"

    def build() -> None:
        _run([_go(), "install", "-ldflags=-s -w",
              f"github.com/prometheus/prometheus/cmd/promtool@{PROMETHEUS_VERSION}"], MODULE,
             {"GOFLAGS": "-buildvcs=false -trimpath", "CGO_ENABLED": "0", "GOBIN": str(target / "bin")})
        if not (target / "bin" / "promtool").exists():
            raise BuildError("the build finished without promtool")

    _once(target, f"promtool {PROMETHEUS_VERSION} (once; a few minutes on 2 cores)", build, say)
    return target / "bin" / "promtool"


def kwok_crd(plural: str) -> Path:
    """One of KWOK's own CRDs (`execs`: a pod's `kubectl exec` run as a local command), from KWOK's published
    module at `KWOK_VERSION`, copied beside the builds once: the Go module cache holds it after the build, and
    the module proxy otherwise."""
    target = cache_root() / f"kwok-{KWOK_VERSION}-crds" / f"kwok.x-k8s.io_{plural}.yaml"
    if not target.exists():
        done = subprocess.run([_go(), "mod", "download", "-json", f"sigs.k8s.io/kwok@{KWOK_VERSION}"], cwd=MODULE,
                              capture_output=True, text=True, check=False)
        if done.returncode:
            raise BuildError(f"go mod download sigs.k8s.io/kwok@{KWOK_VERSION} failed:\n{done.stdout}{done.stderr}")
        source = Path(json.loads(done.stdout)["Dir"]) / "kustomize" / "crd" / "bases" / target.name
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}")
        shutil.copyfile(source, partial)
        partial.replace(target)  # whole or not at all, whoever copies it at the same time
    return target


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


if __name__ == "__main__":
    import sys

    try:
        built = ensure(print)
        checker = promtool(print)
    except BuildError as err:
        sys.exit(f"testbed: {err}")
    print(f"test bed ready: {built.bin} ({size(built.bin.parent) / 2**20:.0f} MiB), {checker}")
