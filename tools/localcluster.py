"""A real, throwaway Kubernetes control plane on 127.0.0.1, without containers.

Why this exists: our machines have no Docker engine, so kind/k3d/minikube are out, yet everything the
scheduler does (watches, Bindings, Events, status patches) has to be tested against a real API server.
This module starts the upstream binaries built by ``tools/build-upstream.sh`` as plain processes:

* **etcd**, data on tmpfs (``/dev/shm``) with ``--unsafe-no-fsync``: the cluster is disposable and fsync
  dominates small-write latency otherwise;
* **kube-apiserver**, token auth (one admin token in ``system:masters``, which is also exempt from API
  Priority and Fairness), client certificates of a client CA, RBAC authorization, a service-account key pair,
  a self-signed serving cert, and the aggregation layer's front proxy (``tools/aggregation.py``);
* **kube-controller-manager** (full mode): Deployments create pods, the service-account controller creates
  ``default`` ServiceAccounts, the node-lifecycle controller removes the ``not-ready`` taint, namespaces and
  garbage get cleaned up;
* **kwok** (full mode): fake kubelets for Nodes annotated ``kwok.x-k8s.io/node=fake``; bound pods turn Running.

kube-scheduler is *not* started by default (we are the scheduler); :meth:`LocalCluster.start_kube_scheduler`
starts upstream's as the oracle for conformance tests and benchmarks.

Light mode runs etcd and kube-apiserver only. Without the controller-manager nobody creates ServiceAccounts
or removes the not-ready taint, so the ``ServiceAccount`` and ``TaintNodesByCondition`` admission plugins are
disabled (as envtest and scheduler_perf do).

Nothing may outlive its owner: every component runs in its own process group with ``PR_SET_PDEATHSIG``
(dies with the Python process even on SIGKILL), clusters are stopped from ``atexit``, and SIGTERM is turned
into ``KeyboardInterrupt`` so that pytest and the demo unwind through their normal teardown.

Usage::

    with LocalCluster() as cluster:
        api = cluster.api_client()
        ...
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import yaml

from tools.aggregation import Pki, write_pki

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, CoreV1Api

REPO_ROOT = Path(__file__).resolve().parent.parent
VERSIONS_FILE = REPO_ROOT / "tools" / "versions.env"

#: Annotation that tells our kwok instance to manage a Node (and the pods bound to it).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE = "fake"

#: kwok's Stage objects (node heartbeat, pod ready/complete/delete), written by build-upstream.sh from the
#: pinned kwok module: kwok >= 0.8 refuses to start without stages when run outside kwokctl.
KWOK_STAGES_FILE = "kwok-stages.yaml"

#: The bearer token of the cluster admin (user ``admin`` in ``system:masters``). Local and throwaway.
ADMIN_USER = "admin"

#: The alpha feature gates the control plane runs with, and the API versions that must be enabled for them. Upstream
#: 1.36's workload-aware scheduling: kube-apiserver serves Workload and PodGroup (scheduling.k8s.io/v1alpha2) and
#: keeps ``pod.spec.schedulingGroup`` only with GenericWorkload on; kube-controller-manager's
#: podgroup-protection controller (GenericWorkload too) lifts the finalizer the PodGroupProtection admission plugin
#: puts on every PodGroup, or no PodGroup (nor its namespace) could ever be deleted. TopologyAwareWorkloadScheduling
#: and WorkloadAwarePreemption keep a PodGroup's ``schedulingConstraints`` and ``disruptionMode``/``priority``
#: (kube-apiserver's PodGroup and Workload strategies drop them with the gates off); the last needs GangScheduling
#: on (a declared gate dependency, checked at start-up). kube-scheduler, the oracle,
#: keeps its defaults: its gates decide which plugins the default profile has.
FEATURE_GATES: tuple[str, ...] = (
    "GenericWorkload",
    "GangScheduling",
    "TopologyAwareWorkloadScheduling",
    "WorkloadAwarePreemption",
)
RUNTIME_CONFIG: tuple[str, ...] = ("scheduling.k8s.io/v1alpha2",)


def feature_gates_flag() -> str:
    """``--feature-gates=A=true,B=true`` from :data:`FEATURE_GATES`."""
    return "--feature-gates=" + ",".join(f"{gate}=true" for gate in FEATURE_GATES)


#: Prefix of every directory a cluster creates, followed by the owner's pid, so stale ones can be swept.
_DIR_PREFIX = "kopf-scheduler-cluster-"

Mode = Literal["full", "light"]


# --------------------------------------------------------------------------------------------------------
# Versions and binaries
# --------------------------------------------------------------------------------------------------------


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """Parse ``tools/versions.env`` (KEY=VALUE lines), the single place where upstream versions are pinned."""
    versions: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        versions[key.strip()] = value.strip().strip("'\"")
    return versions


def kube_version() -> str:
    """The pinned Kubernetes release without the leading ``v`` (e.g. ``1.36.3``)."""
    return read_versions()["KUBE_VERSION"]


def default_bin_dir() -> Path:
    """Where the upstream binaries live: ``$KOPF_SCHEDULER_BIN_DIR``, else the build script's cache dir."""
    explicit = os.environ.get("KOPF_SCHEDULER_BIN_DIR")
    if explicit:
        return Path(explicit).expanduser()
    cache = os.environ.get("KOPF_SCHEDULER_CACHE") or str(Path.home() / ".cache" / "kopf-scheduler")
    return Path(cache).expanduser() / kube_version() / "bin"


# --------------------------------------------------------------------------------------------------------
# Process hygiene
# --------------------------------------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1
try:  # Loaded in the parent: nothing non-trivial may happen between fork and exec in the child.
    _libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
except OSError:  # pragma: no cover - exotic libc
    _libc = None


def child_preexec(parent_pid: int) -> None:
    """Runs in the forked child before exec: die with the parent, even if the parent is SIGKILLed.

    PR_SET_PDEATHSIG fires when the *thread* that forked us exits; clusters are started from the main
    thread in pytest and the demo. The getppid check closes the race where the parent died before prctl.
    """
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:
            os._exit(1)


#: Old private name, still used by tests/e2e/operator_process.py.
_child_preexec = child_preexec

_LIVE_CLUSTERS: weakref.WeakSet[LocalCluster] = weakref.WeakSet()
_HOOKS_INSTALLED = False


def _stop_all_clusters() -> None:
    for cluster in list(_LIVE_CLUSTERS):
        cluster.stop()


def _sigterm_to_keyboard_interrupt(signum: int, frame: object) -> None:
    # KeyboardInterrupt (not SystemExit): pytest treats it as "stop the session" and still runs fixture
    # teardown, whereas a SystemExit inside a test would merely fail that test and carry on.
    raise KeyboardInterrupt(f"signal {signum}")


def _install_process_hooks() -> None:
    """atexit stops every live cluster; SIGTERM unwinds like Ctrl-C (only if nobody else handles it)."""
    global _HOOKS_INSTALLED
    if _HOOKS_INSTALLED:
        return
    _HOOKS_INSTALLED = True
    atexit.register(_stop_all_clusters)
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _sigterm_to_keyboard_interrupt)
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # e.g. started with nohup-like wrappers
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_dirs() -> list[Path]:
    """Remove directories left by clusters whose owner process no longer exists (e.g. it was SIGKILLed).

    Their components died with the owner (PDEATHSIG), but etcd's data on /dev/shm would keep using RAM.
    """
    removed: list[Path] = []
    for root in {Path("/dev/shm"), Path(tempfile.gettempdir())}:
        if not root.is_dir():
            continue
        for path in root.glob(_DIR_PREFIX + "*"):
            pid_text = path.name[len(_DIR_PREFIX) :].split("-", 1)[0]
            if pid_text.isdigit() and not _pid_alive(int(pid_text)):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def free_port() -> int:
    """An unused TCP port on 127.0.0.1 (the OS picks it; the tiny race until the component binds is accepted)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------------------------------------
# The cluster
# --------------------------------------------------------------------------------------------------------


class ClusterError(RuntimeError):
    """A component failed to start or become ready; the message carries the relevant log tails."""


@dataclass
class Component:
    """One running upstream process, its log file and the ports it listens on."""

    name: str
    args: list[str]
    log_path: Path
    process: subprocess.Popen[bytes]
    ports: dict[str, int] = field(default_factory=dict)
    _log_file: IO[bytes] | None = None
    #: Extra environment variables it was started with (kept for :meth:`LocalCluster.restart_component`).
    env: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None


class LocalCluster:
    """etcd + kube-apiserver (+ kube-controller-manager + kwok in full mode) on 127.0.0.1.

    Args:
        mode: ``"full"`` (default) or ``"light"`` (etcd + apiserver only; see the module docstring).
        bin_dir: where the upstream binaries are; defaults to :func:`default_bin_dir`.
        work_dir: where certs, kubeconfig and component logs go. If given, it is kept after :meth:`stop`
            (useful for debugging and for the demo); otherwise a temp dir is created and removed.
        unlimited: benchmark mode: no in-flight request limits and no API Priority and Fairness.
        apiserver_args / controller_manager_args / kwok_args: extra flags appended to the defaults.
        start_timeout: seconds to wait for each component to become ready.
    """

    def __init__(
        self,
        mode: Mode = "full",
        *,
        bin_dir: Path | str | None = None,
        work_dir: Path | str | None = None,
        unlimited: bool = False,
        apiserver_args: Sequence[str] = (),
        controller_manager_args: Sequence[str] = (),
        kwok_args: Sequence[str] = (),
        start_timeout: float = 90.0,
    ) -> None:
        if mode not in ("full", "light"):
            raise ValueError(f"mode must be 'full' or 'light', not {mode!r}")
        self.mode: Mode = mode
        self.bin_dir = Path(bin_dir) if bin_dir else default_bin_dir()
        self._own_work_dir = work_dir is None
        self._requested_work_dir = Path(work_dir) if work_dir else None
        self.unlimited = unlimited
        self.extra_args = {
            "kube-apiserver": list(apiserver_args),
            "kube-controller-manager": list(controller_manager_args),
            "kwok": list(kwok_args),
        }
        self.start_timeout = start_timeout
        self.components: dict[str, Component] = {}
        self.token = secrets.token_hex(16)
        self.work_dir: Path = Path()
        self.etcd_dir: Path = Path()
        self.apiserver_port = 0
        #: The client and front-proxy CAs and certificates (tools/aggregation.py), made at start.
        self.pki = Pki(Path())
        self._started = False
        self._stopping = False
        self._lock = threading.RLock()

    # ---- public surface ---------------------------------------------------------------------------------

    @property
    def server(self) -> str:
        """The API server URL, e.g. ``https://127.0.0.1:38123``."""
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        """A kubeconfig for the admin user (works for kubectl, kopf, the Python client and kwok)."""
        return self.work_dir / "kubeconfig"

    @property
    def ca_file(self) -> Path:
        """The apiserver's self-signed serving certificate bundle (serving cert + its CA)."""
        return self.work_dir / "pki" / "apiserver.crt"

    @property
    def kubectl(self) -> Path:
        """kubectl built from the same k8s.io/kubernetes release as the server."""
        return self.bin_dir / "kubectl"

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalCluster:
        """Start every component of the mode and wait until the API is usable. Idempotent."""
        with self._lock:
            if self._started:
                return self
            self._started = True
        _install_process_hooks()
        _LIVE_CLUSTERS.add(self)
        sweep_stale_dirs()
        try:
            self._check_binaries()
            self._prepare_dirs()
            self._write_credentials()
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfig()
            self._wait_apiserver()
            if self.mode == "full":
                self._start_controller_manager()
                self._start_kwok()
                self._wait_full_mode()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Terminate components in reverse start order (whole process groups), then remove temp dirs."""
        with self._lock:
            if self._stopping or not self._started:
                return
            self._stopping = True
        for component in reversed(list(self.components.values())):
            self._terminate(component)
        for component in self.components.values():
            if component._log_file is not None:
                component._log_file.close()
        if self.etcd_dir != Path():
            shutil.rmtree(self.etcd_dir, ignore_errors=True)
        if self._own_work_dir and self.work_dir != Path():
            shutil.rmtree(self.work_dir, ignore_errors=True)
        _LIVE_CLUSTERS.discard(self)

    def api_client(self) -> ApiClient:
        """A fresh synchronous ``kubernetes`` ApiClient for this cluster (imported lazily)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def log_tails(self, lines: int = 40) -> str:
        """The last ``lines`` lines of every component's log, for failing tests and crash reports."""
        chunks = []
        for component in self.components.values():
            state = "running" if component.alive() else f"exited rc={component.process.returncode}"
            chunks.append(f"===== {component.name} (pid {component.pid}, {state}) {component.log_path}")
            chunks.append(_tail(component.log_path, lines))
        return "\n".join(chunks)

    def dead_components(self) -> list[str]:
        """Names of components that have exited (a healthy cluster returns an empty list)."""
        return [c.name for c in self.components.values() if not c.alive()]

    def start_kube_scheduler(
        self,
        config: Path | str | Mapping[str, Any] | None = None,
        *,
        name: str = "kube-scheduler",
        extra_args: Sequence[str] = (),
        wait: bool = True,
    ) -> Component:
        """Start upstream kube-scheduler (the conformance/benchmark oracle) against this cluster.

        ``config`` is a KubeSchedulerConfiguration as a mapping or a file path. A mapping gets
        ``clientConnection.kubeconfig`` (this cluster's) and ``leaderElection.leaderElect: false`` filled in
        when absent; a file is used as it is (then it must name a kubeconfig itself). ``None`` means the
        default profile with client QPS/burst raised to 5000/10000 as scheduler_perf does.
        Stop it with :meth:`stop_component`; :meth:`stop` stops it too.
        """
        if name in self.components and self.components[name].alive():
            raise ClusterError(f"{name} is already running")
        if config is None:
            config = {"profiles": [{"schedulerName": "default-scheduler"}]}
        if isinstance(config, Mapping):
            doc: dict[str, Any] = {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                **config,
            }
            client = dict(doc.get("clientConnection") or {})
            client.setdefault("kubeconfig", str(self.kubeconfig))
            client.setdefault("qps", 5000)
            client.setdefault("burst", 10000)
            doc["clientConnection"] = client
            doc.setdefault("leaderElection", {"leaderElect": False})
            config_path = self.work_dir / f"{name}.config.yaml"
            config_path.write_text(yaml.safe_dump(doc, sort_keys=False))
        else:
            config_path = Path(config)
        port = free_port()
        args = [
            str(self.bin_dir / "kube-scheduler"),
            f"--config={config_path}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            # No delegated authn/authz (it would look up a client CA configmap we do not have); health and
            # metrics stay readable anonymously on 127.0.0.1.
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            *extra_args,
        ]
        component = self._spawn(name, args, ports={"secure": port})
        if wait:
            self._wait_https_ok(component, f"https://127.0.0.1:{port}/healthz", token=None)
        return component

    def stop_component(self, name: str) -> None:
        """Stop one component (e.g. kube-scheduler between benchmark runs) and forget it."""
        component = self.components.pop(name)
        self._terminate(component)
        if component._log_file is not None:
            component._log_file.close()

    def restart_component(self, name: str, *, downtime: float = 0.0) -> Component:
        """Stop one component and start it again with the same command line, ports and environment.

        For tests of how clients live through an outage (e.g. an API server restart). ``downtime`` seconds
        pass between the stop and the start. Returns once the component is running again; for the API
        server, once it is ready (``/readyz``, then a GET) as at cluster start.
        """
        old = self.components[name]
        self.stop_component(name)
        if downtime > 0:
            time.sleep(downtime)
        component = self._spawn(name, list(old.args), ports=dict(old.ports), env=old.env)
        if name == "kube-apiserver":
            self._wait_apiserver()
        else:
            self._ensure_alive(component)
        return component

    # ---- setup ------------------------------------------------------------------------------------------

    def _needed_binaries(self) -> list[str]:
        names = ["etcd", "kube-apiserver"]
        if self.mode == "full":
            names += ["kube-controller-manager", "kwok"]
        return names

    def _check_binaries(self) -> None:
        missing = [n for n in self._needed_binaries() if not os.access(self.bin_dir / n, os.X_OK)]
        if self.mode == "full" and not (self.bin_dir / KWOK_STAGES_FILE).is_file():
            missing.append(KWOK_STAGES_FILE)
        if missing:
            raise ClusterError(
                f"missing upstream binaries in {self.bin_dir}: {', '.join(missing)}. "
                "Run `make binaries` (tools/build-upstream.sh) or set KOPF_SCHEDULER_BIN_DIR."
            )

    def _prepare_dirs(self) -> None:
        prefix = f"{_DIR_PREFIX}{os.getpid()}-"
        if self._requested_work_dir is not None:
            self.work_dir = self._requested_work_dir.resolve()
            if self.work_dir.exists():
                shutil.rmtree(self.work_dir)
            self.work_dir.mkdir(parents=True)
        else:
            self.work_dir = Path(tempfile.mkdtemp(prefix=prefix))
        (self.work_dir / "pki").mkdir()
        (self.work_dir / "logs").mkdir()
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else self.work_dir
        self.etcd_dir = Path(tempfile.mkdtemp(prefix=prefix + "etcd-", dir=base))

    def _write_credentials(self) -> None:
        pki = self.work_dir / "pki"
        # Static token file: user,uid,"group". system:masters bypasses RBAC (and APF) for the admin.
        (pki / "tokens.csv").write_text(f'{self.token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
        (pki / "tokens.csv").chmod(0o600)
        _generate_rsa_key(pki / "sa.key")
        self.pki = write_pki(pki)

    def _spawn(
        self, name: str, args: list[str], *, ports: dict[str, int] | None = None, env: Mapping[str, str] | None = None
    ) -> Component:
        log_path = self.work_dir / "logs" / f"{name}.log"
        log_file = open(log_path, "ab")  # noqa: SIM115 - lives as long as the component
        log_file.write(f"$ {' '.join(args)}\n".encode())
        log_file.flush()
        parent = os.getpid()
        process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=self.work_dir,
            env={**os.environ, **(env or {})},
            start_new_session=True,  # its own process group: the terminal's Ctrl-C does not hit it
            preexec_fn=lambda: child_preexec(parent),  # only a prctl call (see child_preexec)
        )
        component = Component(name, args, log_path, process, dict(ports or {}), log_file, dict(env or {}))
        self.components[name] = component
        return component

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        args = [
            str(self.bin_dir / "etcd"),
            "--name=node0",
            f"--data-dir={self.etcd_dir}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=node0={peer_url}",
            "--auto-compaction-retention=1",
            "--quota-backend-bytes=8589934592",
            "--unsafe-no-fsync",  # throwaway data on tmpfs: durability buys nothing here
            "--log-level=warn",
        ]
        component = self._spawn("etcd", args, ports={"client": client, "peer": peer})
        deadline = time.monotonic() + self.start_timeout
        while True:
            self._ensure_alive(component)
            try:
                with urllib.request.urlopen(f"{client_url}/health", timeout=2) as resp:
                    if json.load(resp).get("health") == "true":
                        return
            except (OSError, ValueError):
                pass
            self._check_deadline(deadline, component, "etcd /health")
            time.sleep(0.1)

    def _start_apiserver(self) -> None:
        pki = self.work_dir / "pki"
        self.apiserver_port = free_port()
        etcd_url = f"http://127.0.0.1:{self.components['etcd'].ports['client']}"
        args = [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",  # no default route on CI machines: must be explicit
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={pki}",  # generates a self-signed apiserver.crt/key for 127.0.0.1 and localhost
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.key'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",  # no kubernetes Service endpoints pointing at 127.0.0.1
            # The aggregation layer (APIServices): client certificates, the front proxy (tools/aggregation.py).
            *self.pki.apiserver_args(),
            feature_gates_flag(),
            "--runtime-config=" + ",".join(f"{version}=true" for version in RUNTIME_CONFIG),
        ]
        if self.mode == "light":
            # No controller-manager: nobody creates default ServiceAccounts or lifts the not-ready taint.
            args.append("--disable-admission-plugins=ServiceAccount,TaintNodesByCondition")
        if self.unlimited:
            args += [
                "--max-requests-inflight=0",
                "--max-mutating-requests-inflight=0",
                "--enable-priority-and-fairness=false",
            ]
        args += self.extra_args["kube-apiserver"]
        self._spawn("kube-apiserver", args, ports={"secure": self.apiserver_port})

    def _write_kubeconfig(self) -> None:
        # The serving cert does not exist until the apiserver generated it; wait for the file.
        component = self.components["kube-apiserver"]
        deadline = time.monotonic() + self.start_timeout
        while not (self.ca_file.exists() and self.ca_file.stat().st_size > 0):
            self._ensure_alive(component)
            self._check_deadline(deadline, component, "the generated serving certificate")
            time.sleep(0.05)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "local", "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)}}
            ],
            "users": [{"name": ADMIN_USER, "user": {"token": self.token}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": ADMIN_USER}}],
            "current-context": "local",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def _wait_apiserver(self) -> None:
        component = self.components["kube-apiserver"]
        self._wait_https_ok(component, f"{self.server}/readyz", token=self.token)
        self._wait_https_ok(component, f"{self.server}/api/v1/namespaces/default", token=self.token)

    def _start_controller_manager(self) -> None:
        pki = self.work_dir / "pki"
        port = free_port()
        args = [
            str(self.bin_dir / "kube-controller-manager"),
            f"--kubeconfig={self.kubeconfig}",
            # No delegated authn/authz (it would look up a client CA configmap we do not have); health and
            # metrics stay readable anonymously on 127.0.0.1.
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={self.ca_file}",
            "--cluster-name=kopf-scheduler-local",
            # Tests create and delete many objects quickly; the default client QPS 20/burst 30 would lag.
            "--kube-api-qps=1000",
            "--kube-api-burst=2000",
            # React to kwok's heartbeats quickly (kwok renews leases every ~10 s with a 40 s lease).
            "--node-monitor-period=1s",
            "--node-monitor-grace-period=60s",
            feature_gates_flag(),
        ]
        args += self.extra_args["kube-controller-manager"]
        self._spawn("kube-controller-manager", args, ports={"secure": port})

    def _start_kwok(self) -> None:
        port = free_port()
        args = [
            str(self.bin_dir / "kwok"),
            f"--config={self.bin_dir / KWOK_STAGES_FILE}",
            f"--kubeconfig={self.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
            "--manage-nodes-with-label-selector=",
            "--manage-single-node=",
            # Node and pod IPs only ever appear in status fields, but should anything dial them (kubectl
            # logs/exec), it must stay on loopback.
            "--node-ip=127.0.0.1",
            "--cidr=127.128.0.0/10",
            "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{port}",
        ]
        args += self.extra_args["kwok"]
        # HOME is the work dir so that a user's ~/.kwok/kwok.yaml (loaded implicitly) cannot add stages.
        self._spawn("kwok", args, ports={"server": port}, env={"HOME": str(self.work_dir)})

    def _wait_full_mode(self) -> None:
        """Ready means: KCM created the default ServiceAccount (pods can be admitted) and kwok is healthy."""
        kcm = self.components["kube-controller-manager"]
        self._wait_https_ok(kcm, f"{self.server}/api/v1/namespaces/default/serviceaccounts/default", token=self.token)
        kwok = self.components["kwok"]
        url = f"http://127.0.0.1:{kwok.ports['server']}/healthz"
        deadline = time.monotonic() + self.start_timeout
        while True:
            self._ensure_alive(kwok)
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            self._check_deadline(deadline, kwok, "kwok /healthz")
            time.sleep(0.1)

    # ---- helpers ----------------------------------------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _wait_https_ok(self, component: Component, url: str, *, token: str | None) -> None:
        """Poll ``url`` until it answers 200, failing fast if ``component`` dies."""
        ctx = self._ssl_context() if url.startswith(self.server) else ssl._create_unverified_context()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        deadline = time.monotonic() + self.start_timeout
        while True:
            self._ensure_alive(component)
            with contextlib.suppress(OSError, urllib.error.HTTPError):
                req = urllib.request.Request(url, headers=headers)
                with urllib.request.urlopen(req, timeout=5, context=ctx) as resp:
                    if resp.status == 200:
                        return
            self._check_deadline(deadline, component, url)
            time.sleep(0.1)

    def _ensure_alive(self, component: Component) -> None:
        if not component.alive():
            raise ClusterError(
                f"{component.name} exited with rc={component.process.returncode} during start-up\n" + self.log_tails()
            )

    def _check_deadline(self, deadline: float, component: Component, what: str) -> None:
        if time.monotonic() > deadline:
            raise ClusterError(
                f"timed out after {self.start_timeout:.0f}s waiting for {what} ({component.name})\n" + self.log_tails()
            )

    @staticmethod
    def _terminate(component: Component, grace: float = 10.0) -> None:
        """SIGTERM the component's process group, SIGKILL it after ``grace`` seconds, reap it.

        The group is only signalled while its leader is unreaped, so a recycled pid is never hit.
        """
        if component.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(component.pid, signal.SIGTERM)
        try:
            component.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(component.pid, signal.SIGKILL)
            component.process.wait()


def _tail(path: Path, lines: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * lines))
            data = f.read().decode(errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(data.splitlines()[-lines:])


def _generate_rsa_key(path: Path) -> None:
    """An RSA key for signing service-account tokens: openssl if present, else Python ``cryptography``."""
    openssl = shutil.which("openssl")
    if openssl:
        subprocess.run([openssl, "genrsa", "-out", str(path), "2048"], check=True, capture_output=True)
        path.chmod(0o600)
        return
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
    except ImportError as exc:
        raise ClusterError("need `openssl` on PATH or the Python `cryptography` package to create keys") from exc
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


# --------------------------------------------------------------------------------------------------------
# kwok nodes
# --------------------------------------------------------------------------------------------------------


def kwok_node(
    name: str,
    *,
    cpu: str | int = "32",
    memory: str = "256Gi",
    pods: int = 110,
    ephemeral_storage: str | None = "100Gi",
    extra_resources: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    taints: Iterable[Mapping[str, str]] = (),
    unschedulable: bool = False,
) -> dict[str, Any]:
    """The manifest of a Node that our kwok instance manages, with capacity == allocatable.

    kwok keeps the node's status (Ready condition, heartbeats) and moves pods bound to it to Running.
    The well-known labels (hostname, os, arch) are set like a kubelet would so plugins see realistic nodes.
    """
    resources: dict[str, str] = {"cpu": str(cpu), "memory": memory, "pods": str(pods)}
    if ephemeral_storage is not None:
        resources["ephemeral-storage"] = ephemeral_storage
    resources.update(extra_resources or {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE, **(annotations or {})},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **(labels or {}),
            },
        },
        "spec": {"taints": [dict(t) for t in taints], "unschedulable": unschedulable},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def create_kwok_nodes(core: CoreV1Api, nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """Create the given node manifests (see :func:`kwok_node`); returns their names."""
    names = []
    for node in nodes:
        core.create_node(body=dict(node))
        names.append(node["metadata"]["name"])
    return names


def node_is_ready(node: Any, *, untainted: bool = True) -> bool:
    """Ready=True, and (by default) no ``node.kubernetes.io/not-ready`` taint left by admission."""
    conditions = (node.status.conditions or []) if node.status else []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    if not ready:
        return False
    if untainted:
        taints = node.spec.taints or []
        return not any(t.key.startswith("node.kubernetes.io/") for t in taints)
    return True


def wait_nodes_ready(core: CoreV1Api, names: Iterable[str], *, timeout: float = 60.0, untainted: bool = True) -> None:
    """Block until every named node is Ready (and free of the not-ready taint, by default)."""
    pending = set(names)
    deadline = time.monotonic() + timeout
    while pending:
        for node in core.list_node().items:
            if node.metadata.name in pending and node_is_ready(node, untainted=untainted):
                pending.discard(node.metadata.name)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"nodes not Ready after {timeout:.0f}s: {sorted(pending)}")
        time.sleep(0.2)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.localcluster [--light]``: run a cluster until Ctrl-C (the demo adds more)."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--light", action="store_true", help="etcd + kube-apiserver only")
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    with LocalCluster("light" if args.light else "full", work_dir=args.work_dir) as cluster:
        print(f"export KUBECONFIG={cluster.kubeconfig}", flush=True)
        try:
            while not cluster.dead_components():
                time.sleep(1)
            print(cluster.log_tails(), file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
