"""The operator as a real process, plus the Kubernetes helpers e2e tests need around it.

Why a real process: the acceptance bar for kopf-scheduler is what a user gets from ``kopf-scheduler run``
(kopf's watches, peering, daemons, signal handling, the metrics and health servers), so e2e tests start
exactly that command against a kubeconfig and observe it only from outside: the API server, its log file,
``/metrics`` and ``/healthz``. Nothing here imports the operator's internals.

Process hygiene follows ``tools/localcluster.py``: the operator runs in its own session (so a terminal's
Ctrl-C or a test's signals reach only what we aim at) and with ``PR_SET_PDEATHSIG=SIGKILL`` (it dies with
the test process even if that is SIGKILLed). Each process gets a known peering identity (kopf reads it
from ``POD_ID``) so readiness can be checked in the ClusterKopfPeering object, and free ports for
``/metrics`` and ``/healthz`` so several replicas and several test sessions can run at once.

Usage::

    with OperatorProcess(kubeconfig, peering_name="t-abc") as op:   # started and ready
        create_profile(api, "my-scheduler", {})
        ...
        print(op.log_tail())
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tools.localcluster import _child_preexec, default_bin_dir, free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = REPO_ROOT / "crds"

GROUP, VERSION, PLURAL = "kopf-scheduler.io", "v1alpha1", "schedulerprofiles"
PEERING_GROUP, PEERING_VERSION, PEERING_PLURAL = "kopf.dev", "v1", "clusterkopfpeerings"
#: The finalizer the operator puts on SchedulerProfiles (kopf's persistence finalizer, renamed).
PROFILE_FINALIZER = "kopf-scheduler.io/profile-cleanup"

T = TypeVar("T")


class OperatorError(RuntimeError):
    """The operator died or did not become ready; the message carries the log tail."""


def operator_command() -> list[str]:
    """The ``kopf-scheduler`` console script of the running interpreter's environment (the repo's .venv)."""
    script = Path(sys.executable).parent / "kopf-scheduler"
    if script.exists():
        return [str(script)]
    found = shutil.which("kopf-scheduler")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from kopf_scheduler.cli import main; sys.exit(main())"]


def wait_for(
    predicate: Callable[[], T], *, timeout: float, interval: float = 0.2, message: str | Callable[[], str] = ""
) -> T:
    """Poll ``predicate`` until it returns something truthy (returned) or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            text = message() if callable(message) else message
            raise TimeoutError(f"timed out after {timeout:.0f}s: {text}")
        time.sleep(interval)


class OperatorProcess:
    """``kopf-scheduler run`` as a subprocess against ``kubeconfig``.

    Args:
        kubeconfig: the cluster's kubeconfig file.
        peering_priority / peering_name: the replica's peering settings (``--peering-*``).
        extra_args: more ``kopf-scheduler run`` flags (e.g. ``["--pod-max-backoff-seconds", "2"]``).
        env: extra environment variables for the process.
        log_dir: where ``<name>.log`` goes (default: a fresh temp dir, kept for post-mortems).
        name: a label for the log file and messages (default ``operator-<priority>``).
        identity: the kopf peering identity (``POD_ID``); unique by default.
        create_peering: create the ClusterKopfPeering before starting, if missing. The operator creates it
            itself too, but kopf's first keep-alive then finds nothing and the next one comes 5-10 s later,
            which would slow every test down; pass False to exercise the operator's own creation.
    """

    def __init__(
        self,
        kubeconfig: str | os.PathLike[str],
        *,
        peering_priority: int = 0,
        peering_name: str = "kopf-scheduler",
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        name: str | None = None,
        identity: str | None = None,
        create_peering: bool = True,
    ) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.peering_priority = peering_priority
        self.peering_name = peering_name
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        self.name = name or f"operator-{peering_priority}"
        self.identity = identity or f"{self.name}-{secrets.token_hex(4)}"
        self.create_peering = create_peering
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="kopf-scheduler-operator-"))
        self.log_path = self.log_dir / f"{self.name}.log"
        self.metrics_port = 0
        self.health_port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self._log_file: IO[bytes] | None = None
        self._api: client.ApiClient | None = None

    # ---- lifecycle ----------------------------------------------------------------------------------

    @property
    def args(self) -> list[str]:
        return [
            *operator_command(),
            "run",
            "--kubeconfig",
            str(self.kubeconfig),
            "--peering-name",
            self.peering_name,
            "--peering-priority",
            str(self.peering_priority),
            "--metrics-port",
            str(self.metrics_port),
            "--health-port",
            str(self.health_port),
            "--bind-address",
            "127.0.0.1",
            # HTTPS with delegated auth, as kube-scheduler; /metrics readable anonymously on 127.0.0.1, as
            # tools/localcluster.py runs kube-scheduler (tests/e2e/test_secure_serving.py tests the auth).
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            *self.extra_args,
        ]

    def start(self, *, wait: bool = True, timeout: float = 60.0) -> OperatorProcess:
        """Start the process (and by default wait until :meth:`wait_ready`)."""
        if self.alive():
            raise OperatorError(f"{self.name} is already running (pid {self.pid})")
        if self.create_peering:
            ensure_peering(self.api(), self.peering_name)
        self.metrics_port, self.health_port = free_port(), free_port()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        args = self.args
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self._log_file.write(f"$ POD_ID={self.identity} {' '.join(args)}\n".encode())
        self._log_file.flush()
        parent = os.getpid()
        self.started_at = time.monotonic()
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            cwd=self.log_dir,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "POD_ID": self.identity, **self.env},
            start_new_session=True,
            preexec_fn=lambda: _child_preexec(parent),  # only a prctl call
        )
        if wait:
            self.wait_ready(timeout=timeout)
        return self

    def __enter__(self) -> OperatorProcess:
        if not self.alive():
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        return self.process.pid if self.process else 0

    @property
    def returncode(self) -> int | None:
        return self.process.poll() if self.process else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (kopf shuts down gracefully and leaves the peering), SIGKILL after ``timeout``; the rc."""
        return self._signal_and_wait(signal.SIGTERM, timeout)

    def kill(self) -> int | None:
        """SIGKILL at once: no graceful shutdown, the peering entry stays until its lifetime runs out."""
        return self._signal_and_wait(signal.SIGKILL, 10.0)

    def _signal_and_wait(self, sig: signal.Signals, timeout: float) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:  # only signal an unreaped leader: its pid cannot be recycled
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._api is not None:
            self._api.close()
            self._api = None
        return self.process.returncode

    # ---- observation --------------------------------------------------------------------------------

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        state = "running" if self.alive() else f"exited rc={self.returncode}"
        tail = "\n".join(self.log_text().splitlines()[-lines:])
        return f"===== {self.name} (pid {self.pid}, {state}, identity {self.identity}) {self.log_path}\n{tail}"

    def log_lines(self, pattern: str | re.Pattern[str]) -> list[str]:
        regex = re.compile(pattern)
        return [line for line in self.log_text().splitlines() if regex.search(line)]

    def wait_log(self, pattern: str | re.Pattern[str], *, timeout: float = 30.0) -> str:
        """Wait until a log line matches ``pattern``; returns the first matching line."""

        def found() -> str | None:
            self._ensure_alive()
            lines = self.log_lines(pattern)
            return lines[0] if lines else None

        return wait_for(found, timeout=timeout, message=lambda: f"no log line matching {pattern!r}\n{self.log_tail()}")

    def _ensure_alive(self) -> None:
        if not self.alive():
            raise OperatorError(f"{self.name} exited with rc={self.returncode}\n{self.log_tail()}")

    def api(self) -> client.ApiClient:
        if self._api is None:
            self._api = config.new_client_from_config(config_file=str(self.kubeconfig))
        return self._api

    def healthz(self) -> tuple[int, str]:
        """(HTTP status, body) of kopf's liveness endpoint; (0, error) when it does not answer."""
        url = f"http://127.0.0.1:{self.health_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.status, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")
        except OSError as e:
            return 0, str(e)

    def peering_status(self) -> dict[str, Any]:
        """The ClusterKopfPeering's status: {identity: {priority, lifetime, lastseen}}; {} if it is missing."""
        return peering_status(self.api(), self.peering_name)

    def in_peering(self) -> bool:
        return self.identity in self.peering_status()

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Ready = ``/healthz`` answers 200 and this replica has announced itself in the peering object.

        The liveness endpoint comes up once kopf's startup handlers ran; the peering entry appears once
        kopf found (or, on first login, the operator created) the ClusterKopfPeering and sent its first
        keep-alive, i.e. once it takes part in deciding who is active.
        """

        def ready() -> bool:
            self._ensure_alive()
            if self.healthz()[0] != 200:
                return False
            try:
                return self.in_peering()
            except ApiException:
                return False

        wait_for(ready, timeout=timeout, interval=0.25, message=lambda: f"{self.name} not ready\n{self.log_tail()}")

    def metrics_text(self) -> str:
        url = f"https://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5, context=unverified_tls()) as resp:
            return str(resp.read().decode())

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples named ``name`` whose labels include ``labels`` (0.0 if none)."""
        return metric_value(self.metrics_text(), name, **labels)

    def scheduled_count(self, profile: str | None = None) -> float:
        """``scheduler_schedule_attempts_total{result="scheduled"}``: the binds this process made."""
        labels = {"result": "scheduled", **({"profile": profile} if profile else {})}
        return self.metric("scheduler_schedule_attempts_total", **labels)


def unverified_tls() -> ssl.SSLContext:
    """A client context that accepts the operator's self-signed serving certificate."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def metric_value(text: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def kubectl(
    kubeconfig: str | os.PathLike[str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run kubectl (the pinned build if present, else the one on PATH); never raises on a non-zero exit."""
    binary = default_bin_dir() / "kubectl"
    exe = str(binary) if binary.exists() else (shutil.which("kubectl") or "kubectl")
    return subprocess.run(
        [exe, "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True, text=True, timeout=60
    )


def kubectl_apply(kubeconfig: str | os.PathLike[str], manifest: Mapping[str, Any]) -> subprocess.CompletedProcess[str]:
    """``kubectl apply -f -`` of one manifest (kubectl validates strictly on the server, as users get it)."""
    return kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(dict(manifest)))


# ---- CRDs and peering -----------------------------------------------------------------------------------


def apply_crds(api: client.ApiClient, crd_dir: Path = CRD_DIR, *, timeout: float = 60.0) -> list[str]:
    """Create or update every CRD in ``crd_dir`` and wait until each is Established; their names."""
    ext = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted(crd_dir.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            name = doc["metadata"]["name"]
            names.append(name)
            try:
                ext.create_custom_resource_definition(doc)
            except ApiException as e:
                if e.status != 409:
                    raise
                current = ext.read_custom_resource_definition(name)
                doc["metadata"]["resourceVersion"] = current.metadata.resource_version
                ext.replace_custom_resource_definition(name, doc)

    def established() -> bool:
        for name in names:
            crd = ext.read_custom_resource_definition(name)
            conditions = (crd.status.conditions or []) if crd.status else []
            if not any(c.type == "Established" and c.status == "True" for c in conditions):
                return False
        return True

    wait_for(established, timeout=timeout, message=f"CRDs not Established: {names}")
    return names


def peering_status(api: client.ApiClient, name: str) -> dict[str, Any]:
    try:
        obj = client.CustomObjectsApi(api).get_cluster_custom_object(
            PEERING_GROUP, PEERING_VERSION, PEERING_PLURAL, name
        )
    except ApiException as e:
        if e.status == 404:
            return {}
        raise
    return dict(obj.get("status") or {})


def ensure_peering(api: client.ApiClient, name: str) -> bool:
    """Create the ClusterKopfPeering ``name`` if it is missing; True if this call created it."""
    body = {
        "apiVersion": f"{PEERING_GROUP}/{PEERING_VERSION}",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": name},
    }
    try:
        client.CustomObjectsApi(api).create_cluster_custom_object(PEERING_GROUP, PEERING_VERSION, PEERING_PLURAL, body)
    except ApiException as e:
        if e.status == 409:
            return False
        raise
    return True


def delete_peering(api: client.ApiClient, name: str) -> None:
    with contextlib.suppress(ApiException):
        client.CustomObjectsApi(api).delete_cluster_custom_object(PEERING_GROUP, PEERING_VERSION, PEERING_PLURAL, name)


# ---- SchedulerProfiles ----------------------------------------------------------------------------------


def profile_body(name: str, spec: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SchedulerProfile",
        "metadata": {"name": name},
        "spec": dict(spec or {}),
    }


def create_profile(api: client.ApiClient, name: str, spec: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return client.CustomObjectsApi(api).create_cluster_custom_object(  # type: ignore[no-any-return]
        GROUP, VERSION, PLURAL, profile_body(name, spec)
    )


def get_profile(api: client.ApiClient, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(api).get_cluster_custom_object(GROUP, VERSION, PLURAL, name)  # type: ignore[no-any-return]


def replace_profile_spec(api: client.ApiClient, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """Replace the whole spec (what ``kubectl apply`` of a new manifest amounts to for the spec)."""
    custom = client.CustomObjectsApi(api)
    current = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    current["spec"] = dict(spec)
    return custom.replace_cluster_custom_object(GROUP, VERSION, PLURAL, name, current)  # type: ignore[no-any-return]


def ready_condition(profile: Mapping[str, Any]) -> dict[str, Any] | None:
    for condition in (profile.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return dict(condition)
    return None


def wait_profile_status(
    api: client.ApiClient, name: str, *, ready: bool = True, generation: int | None = None, timeout: float = 30.0
) -> dict[str, Any]:
    """Wait until the profile's Ready condition is ``ready`` for ``generation`` (default: the current one)."""
    last: dict[str, Any] = {}

    def check() -> dict[str, Any] | None:
        nonlocal last
        last = get_profile(api, name)
        want = generation if generation is not None else last["metadata"].get("generation")
        condition = ready_condition(last)
        if (
            condition is not None
            and (last.get("status") or {}).get("observedGeneration") == want
            and condition.get("status") == ("True" if ready else "False")
        ):
            return last
        return None

    return wait_for(check, timeout=timeout, message=lambda: f"profile {name} status: {last.get('status')}")


def delete_profile(api: client.ApiClient, name: str, *, wait: float = 0.0, force: bool = False) -> None:
    """Delete a profile; ``force`` first drops the operator's finalizer (for when no operator runs)."""
    custom = client.CustomObjectsApi(api)
    if force:
        with contextlib.suppress(ApiException):
            custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, name, {"metadata": {"finalizers": None}})
    try:
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    except ApiException as e:
        if e.status != 404:
            raise
        return
    if wait:

        def gone() -> bool:
            try:
                get_profile(api, name)
            except ApiException as e:
                if e.status == 404:
                    return True
                raise
            return False

        wait_for(gone, timeout=wait, message=f"profile {name} not deleted")


def list_profiles(api: client.ApiClient) -> list[dict[str, Any]]:
    return list(client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, PLURAL).get("items") or [])


# ---- pods ----------------------------------------------------------------------------------------------


def pod_manifest(
    name: str,
    scheduler_name: str,
    *,
    cpu: str | None = None,
    memory: str | None = None,
    labels: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A minimal pod for ``scheduler_name`` (pause image; kwok never pulls it) with optional requests."""
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    container: dict[str, Any] = {"name": "c", "image": "registry.k8s.io/pause:3.10"}
    if requests:
        container["resources"] = {"requests": requests}
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {
            "schedulerName": scheduler_name,
            "containers": [container],
            "terminationGracePeriodSeconds": 0,
            # kwok nodes carry no taints besides what tests add; tolerate nothing extra by default.
        },
    }
    if node_selector:
        body["spec"]["nodeSelector"] = dict(node_selector)
    body["spec"].update(spec or {})
    return body


def create_pods(core: client.CoreV1Api, namespace: str, pods: Iterable[Mapping[str, Any]]) -> list[str]:
    names = []
    for pod in pods:
        core.create_namespaced_pod(namespace, dict(pod))
        names.append(pod["metadata"]["name"])
    return names


def create_pods_parallel(
    core: client.CoreV1Api, namespace: str, pods: Sequence[Mapping[str, Any]], *, workers: int = 8
) -> list[str]:
    """Create many pods concurrently (a burst the scheduler has to keep up with); their names, in order."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda pod: core.create_namespaced_pod(namespace, dict(pod)), pods))
    return [pod["metadata"]["name"] for pod in pods]


def pod_nodes(core: client.CoreV1Api, namespace: str) -> dict[str, str | None]:
    """name → spec.nodeName (None while unbound) of every pod in the namespace."""
    return {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(namespace).items}


def wait_pods_bound(
    core: client.CoreV1Api, namespace: str, names: Iterable[str] | None = None, *, timeout: float = 60.0
) -> dict[str, str]:
    """Wait until the named pods (default: all in the namespace) have a node; name → node."""
    wanted = set(names) if names is not None else None
    last: dict[str, str | None] = {}

    def check() -> dict[str, str] | None:
        nonlocal last
        last = pod_nodes(core, namespace)
        selected = {n: last.get(n) for n in wanted} if wanted is not None else dict(last)
        if selected and all(selected.values()):
            return {n: str(node) for n, node in selected.items()}
        return None

    def describe() -> str:
        unbound = sorted(n for n, node in last.items() if not node and (wanted is None or n in wanted))
        return f"{len(unbound)} pods unbound in {namespace}: {unbound[:10]}"

    return wait_for(check, timeout=timeout, interval=0.25, message=describe)


def pod_condition(pod: Any, type_: str = "PodScheduled") -> Any | None:
    for condition in (pod.status.conditions or []) if pod.status else []:
        if condition.type == type_:
            return condition
    return None


# ---- events --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectRef:
    kind: str = ""
    name: str = ""
    namespace: str = ""
    uid: str = ""


@dataclass(frozen=True)
class Event:
    """One events.k8s.io/v1 Event, decoded by hand: the generated client model requires ``eventTime``, which
    events recorded through the core/v1 API (controller-manager, kwok) do not have, so its LIST fails."""

    name: str
    type: str
    reason: str
    action: str
    note: str
    reporting_controller: str
    reporting_instance: str
    regarding: ObjectRef
    event_time: str
    count: int
    #: The second object the event involves (a preemption's preemptor), if any.
    related: ObjectRef | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Event:
        regarding = raw.get("regarding") or {}
        related = raw.get("related")
        return cls(
            name=(raw.get("metadata") or {}).get("name", ""),
            type=raw.get("type") or "",
            reason=raw.get("reason") or "",
            action=raw.get("action") or "",
            note=raw.get("note") or "",
            reporting_controller=raw.get("reportingController") or "",
            reporting_instance=raw.get("reportingInstance") or "",
            regarding=ObjectRef(**{k: regarding.get(k) or "" for k in ("kind", "name", "namespace", "uid")}),
            event_time=raw.get("eventTime") or raw.get("deprecatedFirstTimestamp") or "",
            count=1 + int((raw.get("series") or {}).get("count") or 0),
            related=None
            if not related
            else ObjectRef(**{k: related.get(k) or "" for k in ("kind", "name", "namespace", "uid")}),
        )


def namespace_events(api: client.ApiClient, namespace: str) -> list[Event]:
    """Every events.k8s.io/v1 Event of the namespace (one LIST)."""
    response = client.EventsV1Api(api).list_namespaced_event(namespace, _preload_content=False)
    return [Event.from_dict(item) for item in json.loads(response.data).get("items") or ()]


def object_events(
    api: client.ApiClient,
    namespace: str,
    kind: str,
    name: str,
    *,
    reason: str | None = None,
    events: list[Event] | None = None,
) -> list[Event]:
    """The events regarding one object, oldest first, optionally of one reason."""
    items = events if events is not None else namespace_events(api, namespace)
    selected = [
        e
        for e in items
        if e.regarding.kind == kind and e.regarding.name == name and (reason is None or e.reason == reason)
    ]
    return sorted(selected, key=lambda e: (e.event_time, e.name))


def pod_events(
    api: client.ApiClient,
    namespace: str,
    pod_name: str,
    *,
    reason: str | None = None,
    events: list[Event] | None = None,
) -> list[Event]:
    """The events regarding one pod, oldest first, optionally of one reason."""
    return object_events(api, namespace, "Pod", pod_name, reason=reason, events=events)


def wait_scheduled_events(
    api: client.ApiClient, namespace: str, pod_names: Iterable[str], *, timeout: float = 30
) -> list[Event]:
    """Every event of the namespace, once each of ``pod_names`` has its ``Scheduled`` event.

    The operator posts the event after the Binding lands (kube-scheduler's recorder is asynchronous too), so a
    pod can be seen bound a moment before its event exists; asserting on events right after
    :func:`wait_pods_bound` is a race.
    """
    wanted = set(pod_names)

    def complete() -> list[Event] | None:
        events = namespace_events(api, namespace)
        have = {e.regarding.name for e in events if e.reason == "Scheduled"}
        return events if have >= wanted else None

    return wait_for(complete, timeout=timeout, message=lambda: f"no Scheduled event yet for some of {sorted(wanted)}")


def scheduled_events_per_pod(api: client.ApiClient, namespace: str) -> Counter[str]:
    """How many ``Scheduled`` events each pod of the namespace got (a pod bound twice would show 2)."""
    return Counter(
        e.regarding.name
        for e in namespace_events(api, namespace)
        if e.reason == "Scheduled" and e.regarding.kind == "Pod"
    )


# ---- capacity ------------------------------------------------------------------------------------------

_SUFFIXES = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
}  # fmt: skip


def parse_quantity(text: str | int | float) -> float:
    """A resource quantity as a float in base units ('500m' → 0.5, '1Gi' → 1073741824)."""
    value = str(text)
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * _SUFFIXES[suffix]
    return float(value)


def overcommitted_nodes(core: client.CoreV1Api, node_names: Iterable[str]) -> dict[str, dict[str, tuple[float, float]]]:
    """Nodes whose non-terminal pods request more than allocatable: node → {resource: (requested, allocatable)}.

    Counts cpu, memory and the pod count, as NodeResourcesFit does; an empty dict means nothing is over.
    """
    wanted = set(node_names)
    allocatable: dict[str, dict[str, float]] = {}
    for node in core.list_node().items:
        if node.metadata.name in wanted:
            alloc = node.status.allocatable or {}
            allocatable[node.metadata.name] = {r: parse_quantity(alloc.get(r, "0")) for r in ("cpu", "memory", "pods")}
    requested: dict[str, dict[str, float]] = {n: {"cpu": 0.0, "memory": 0.0, "pods": 0.0} for n in allocatable}
    for pod in core.list_pod_for_all_namespaces().items:
        node = pod.spec.node_name
        if node not in requested or (pod.status and pod.status.phase in ("Succeeded", "Failed")):
            continue
        requested[node]["pods"] += 1
        for container in pod.spec.containers:
            reqs = (container.resources.requests or {}) if container.resources else {}
            for resource in ("cpu", "memory"):
                if resource in reqs:
                    requested[node][resource] += parse_quantity(reqs[resource])
    over: dict[str, dict[str, tuple[float, float]]] = {}
    for node, reqs in requested.items():
        for resource, amount in reqs.items():
            if amount > allocatable[node][resource] + 1e-9:
                over.setdefault(node, {})[resource] = (amount, allocatable[node][resource])
    return over
