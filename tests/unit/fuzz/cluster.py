"""A model of the API server for the fuzzed event orders, and the SchedulerApp it feeds.

:class:`ApiModel` is the cluster as the API server holds it (pods by uid, nodes by name) and the Client the app
writes through: a Binding sets the pod's node (404 for a pod that is gone, 409 for one already bound, as the API
server answers), a pods/status patch changes its status, a preemption's DELETE removes it; each such write
becomes a watch event that waits in :attr:`ApiModel.undelivered` until the test delivers it, in any order across
objects and in order for one object (a watch stream is ordered per object; streams of different objects are not
ordered against each other). Changes the test makes as "the user" (or another scheduler, or a kubelet) go to the
app at once, after the object's own undelivered events.

:class:`Cluster` wires an ApiModel to a SchedulerApp with a fake clock, checks every scheduler-made assumption as
it happens (no node over its allocatable: :meth:`Cluster.check_assume`), records every task's exception and every
logged error (nothing may escape or be swallowed with a traceback), and drives the cycles.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import random
import traceback
from collections.abc import Coroutine, Generator, Iterator
from typing import Any
from unittest import mock

from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.framework import APIError
from kopf_scheduler.framework.extension_points import ExtensionPoint
from kopf_scheduler.framework.runtime import common as runtime_common
from kopf_scheduler.framework.runtime import framework as runtime_framework
from kopf_scheduler.framework.runtime import scoring as runtime_scoring
from kopf_scheduler.framework.status import Status
from kopf_scheduler.settings import RunSettings
from kopf_scheduler.state.pod_info import PodInfo, is_extended_resource_name
from kopf_scheduler.watched import WATCHED_KINDS
from tests.unit.app_harness import FakeClient, FakeClock

Event = tuple[str, str, dict[str, Any]]  # (kind, event type, object)


class ApiModel(FakeClient):
    """The API server's pods and nodes, and the Client the app writes to them through (see the module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self.pods: dict[str, dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        #: Every other kind's objects, by (kind, namespace, name).
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.undelivered: list[Event] = []
        #: uid → node of every Binding the app posted that the API server accepted.
        self.bound_by_us: dict[str, str] = {}
        #: Bindings posted for a pod the app had bound already (a double booking); must stay empty.
        self.double_binds: list[tuple[str, str]] = []
        #: Faults of the next Bindings, popped in order: an HTTP status the API server answers instead (500, 429,
        #: 503: nothing is bound), or 0 for a Binding that is made but whose answer is lost (a connection reset
        #: after the commit: the client sees an error, the watch then brings the bound pod).
        self.bind_faults: list[int] = []
        #: Pods whose Binding was made but answered with an error (their next Binding meets a 409: not a double).
        self.unacknowledged: set[str] = set()
        self._version = 0

    def next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["resourceVersion"] = self.next_version()
        return obj

    def _pod_by_name(self, namespace: str, name: str) -> dict[str, Any] | None:
        for pod in self.pods.values():
            if pod["metadata"]["name"] == name and pod["metadata"]["namespace"] == namespace:
                return pod
        return None

    def _changed(self, pod: dict[str, Any], event_type: str = "MODIFIED") -> None:
        self.stamp(pod)
        self.undelivered.append(("Pod", event_type, copy.deepcopy(pod)))

    async def bind(self, *, namespace: str, name: str, uid: str, node_name: str) -> None:
        fault = self.bind_faults.pop(0) if self.bind_faults else None
        if fault:
            raise APIError(fault, f"injected {fault}")
        pod = self.pods.get(uid)
        if pod is None:
            raise APIError(404, f'pods "{name}" not found')
        if pod["spec"].get("nodeName"):
            if uid in self.bound_by_us and uid not in self.unacknowledged:
                self.double_binds.append((uid, node_name))
            raise APIError(
                409, f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned'
            )
        pod["spec"]["nodeName"] = node_name
        self.bound_by_us[uid] = node_name
        self.bindings.append((namespace, name, node_name))
        self._changed(pod)
        if fault == 0:
            self.unacknowledged.add(uid)
            raise APIError(500, "the connection was reset after the Binding was made")

    async def patch_pod_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> Any:
        self.status_patches.append((name, patch))
        pod = self._pod_by_name(namespace, name)
        if pod is None:
            raise APIError(404, f'pods "{name}" not found')
        status = pod.setdefault("status", {})
        for key, value in (patch.get("status") or {}).items():
            if key == "conditions":
                kept = [c for c in status.get("conditions", []) if c["type"] not in {v["type"] for v in value}]
                status["conditions"] = kept + copy.deepcopy(value)
            elif value is None:
                status.pop(key, None)
            else:
                status[key] = value
        self._changed(pod)
        return copy.deepcopy(pod)

    async def delete_pod(self, *, namespace: str, name: str, uid: str) -> None:
        self.deleted.append((namespace, name, uid))
        pod = self.pods.pop(uid, None)
        if pod is None:
            raise APIError(404, f'pods "{name}" not found')
        self._changed(pod, "DELETED")

    async def list_all(self, path: str) -> list[dict[str, Any]]:
        """The reconciling LIST: what the API server holds now (every watch event before it is superseded)."""
        kind = _KIND_OF_PATH.get(path)
        if kind == "Node":
            return [copy.deepcopy(n) for n in self.nodes.values()]
        if kind == "Pod":
            return [copy.deepcopy(p) for p in self.pods.values()]
        return [copy.deepcopy(o) for (k, _, _), o in self.objects.items() if k == kind]

    def take_event(self, index: int) -> Event | None:
        """The ``index``-th (modulo) object's oldest undelivered event, taken off the list."""
        if not self.undelivered:
            return None
        uid = _uid(self.undelivered[index % len(self.undelivered)])
        for position, event in enumerate(self.undelivered):
            if _uid(event) == uid:
                return self.undelivered.pop(position)
        raise AssertionError("unreachable")

    def take_events_of(self, uid: str) -> list[Event]:
        mine = [e for e in self.undelivered if _uid(e) == uid]
        self.undelivered = [e for e in self.undelivered if _uid(e) != uid]
        return mine


_KIND_OF_PATH = {watched.path: watched.kind for watched in WATCHED_KINDS}


def _uid(event: Event) -> str:
    meta = event[2]["metadata"]
    return str(meta.get("uid") or meta["name"])


#: Python's own exceptions: a plugin or part that raises one has a bug, even where a safety net turns it into an
#: Error status (upstream's plugins return errors; a Go panic would crash kube-scheduler).
BUG_EXCEPTIONS = (
    AttributeError,
    AssertionError,
    IndexError,
    KeyError,
    NameError,
    RecursionError,
    TypeError,
    ValueError,
    ZeroDivisionError,
)
#: ERROR records upstream logs at the same level in the same situation (not bugs): PostFilter's Error status,
#: e.g. DynamicResources reading the cycle state its PreFilter never wrote because an earlier PreFilter rejected
#: the pod (upstream ``schedulingCycle``: "Status after running PostFilter plugins for pod", "not found").
UPSTREAM_ERROR_LOGS = ("PostFilter failed for pod ",)


class ErrorLog(logging.Handler):
    """ERROR records and swallowed exceptions: a traceback logged by a safety net, an ERROR that upstream would
    not log, and every Python exception turned into an Error status (``Status.as_error``, ``wrapped_error``)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []
        self.swallowed: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or not record.getMessage().startswith(UPSTREAM_ERROR_LOGS):
            self.records.append(record)

    def _note(self, error: BaseException) -> None:
        if isinstance(error, BUG_EXCEPTIONS):
            self.swallowed.append("".join(traceback.format_exception(error)))

    @contextlib.contextmanager
    def capturing(self) -> Iterator[None]:
        root = logging.getLogger()
        root.addHandler(self)
        as_error, text_of = Status.as_error.__func__, runtime_common.error_text  # type: ignore[attr-defined]

        def noting_as_error(cls: type[Status], error: BaseException, *, plugin: str = "") -> Status:
            self._note(error)
            return as_error(cls, error, plugin=plugin)  # type: ignore[no-any-return]

        def noting_error_text(error: BaseException) -> str:
            self._note(error)
            return text_of(error)

        try:
            with contextlib.ExitStack() as patches:
                patches.enter_context(mock.patch.object(Status, "as_error", classmethod(noting_as_error)))
                for module in (runtime_common, runtime_framework, runtime_scoring):  # each imported it by name
                    patches.enter_context(mock.patch.object(module, "error_text", noting_error_text))
                yield
        finally:
            root.removeHandler(self)

    def texts(self) -> list[str]:
        logged = [f"{r.name}: {r.getMessage()}\n{self.format(r) if r.exc_info else ''}" for r in self.records]
        return logged + [f"swallowed: {text}" for text in self.swallowed]


class Cluster:
    """A SchedulerApp fed by an :class:`ApiModel`, with the checks made as the app works."""

    def __init__(self) -> None:
        self.api = ApiModel()
        self.clock = FakeClock()
        self.app = SchedulerApp(
            settings=RunSettings(), client=self.api, rng=random.Random(7), hostname="fuzz", clock=self.clock
        )
        #: Exceptions of the app's tasks (binding cycles, reports, plugin jobs) and failed assume checks.
        self.failures: list[str] = []
        self.errors = ErrorLog()
        self._assume = self.app.cache.assume
        self.app.cache.assume = self.check_assume  # type: ignore[method-assign]

    # -- checks made as the app works ----------------------------------------------------------------------
    def check_assume(self, pod: PodInfo, node_name: str, *, dry_run: bool = False) -> PodInfo:
        """The cache's assume, then: a profile that filters with NodeResourcesFit never leaves the node over its
        allocatable in a resource the pod requests, nor over its pod count (upstream Fit's rule)."""
        assumed = self._assume(pod, node_name, dry_run=dry_run)
        runtime = self.app.profiles.get(pod.scheduler_name)
        if dry_run or runtime is None:
            return assumed
        filters = {ref.name for ref in runtime.resolved.enabled(ExtensionPoint.FILTER)}
        if "NodeResourcesFit" not in filters:
            return assumed
        ignored = _ignored_resources(runtime.resolved.plugin_args.get("NodeResourcesFit"))
        info = self.app.cache.node(node_name)
        assert info is not None
        table = self.app.cache.table
        slot = info.slot
        if table.pod_count[slot] > info.allocatable.get("pods", 0):
            self.failures.append(f"{pod.key} assumed on {node_name} beyond its pod count")
        for name, value in pod.requests.items():
            if value <= 0 or _ignored(name, ignored):
                continue
            column = table.resource_index[name]
            used, allocatable = int(table.requested[slot, column]), info.allocatable.get(name, 0)
            if used > allocatable:
                self.failures.append(f"{pod.key} assumed on {node_name}: {name} {used} > allocatable {allocatable}")
        return assumed

    def task_factory(
        self, loop: asyncio.AbstractEventLoop, coro: Generator[Any, None, Any] | Coroutine[Any, Any, Any], **kw: Any
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **kw)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.failures.append(f"task {task.get_coro()!r} raised {task.exception()!r}")

    # -- the user's (and other components') changes, delivered at once --------------------------------------
    def deliver(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        if kind == "Node":
            self.app.on_node_event(event_type, copy.deepcopy(obj))
        else:
            self.app.on_pod_event(event_type, copy.deepcopy(obj))

    def flush_events_of(self, uid: str) -> None:
        for kind, event_type, obj in self.api.take_events_of(uid):
            self.deliver(kind, event_type, obj)

    def put_node(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        event_type = "MODIFIED" if name in self.api.nodes else "ADDED"
        self.api.nodes[name] = self.api.stamp(copy.deepcopy(obj))
        self.deliver("Node", event_type, self.api.nodes[name])

    def delete_node(self, name: str) -> None:
        found = self.api.nodes.pop(name, None)
        if found is not None:
            self.deliver("Node", "DELETED", found)

    def add_pod(self, obj: dict[str, Any]) -> None:
        uid = obj["metadata"]["uid"]
        self.api.pods[uid] = self.api.stamp(copy.deepcopy(obj))
        self.deliver("Pod", "ADDED", self.api.pods[uid])

    def update_pod(self, uid: str, change: str, value: Any) -> None:
        """A change the API server allows on a live pod (see :func:`apply_change`), by whoever makes it."""
        pod = self.api.pods.get(uid)
        if pod is None:
            return
        self.flush_events_of(uid)
        if not apply_change(pod, change, value):
            return
        self.api.stamp(pod)
        self.deliver("Pod", "MODIFIED", pod)

    def delete_pod(self, uid: str) -> None:
        pod = self.api.pods.pop(uid, None)
        if pod is None:
            return
        self.flush_events_of(uid)
        self.api.stamp(pod)
        self.deliver("Pod", "DELETED", pod)

    def put_object(self, kind: str, obj: dict[str, Any], *, deleted: bool = False) -> None:
        """Any other watched kind (storage, workloads, PDBs, namespaces), created, updated or deleted."""
        body = self.api.stamp(copy.deepcopy(obj))
        key = (kind, body["metadata"].get("namespace", ""), body["metadata"]["name"])
        if deleted:
            self.api.objects.pop(key, None)
        else:
            self.api.objects[key] = body
        self.app.on_watch_event(kind, "DELETED" if deleted else "MODIFIED", copy.deepcopy(body))

    async def relist(self) -> None:
        """kopf paused and resumed the replica: its watches stopped (the events meanwhile are lost), and the
        cache is rebuilt from a reconciling LIST of what the API server holds now."""
        self.app.watch.invalidate()
        self.api.undelivered.clear()
        await self.app.ensure_reconciled()

    def deliver_one(self, index: int) -> None:
        event = self.api.take_event(index)
        if event is not None:
            self.deliver(*event)

    # -- the scheduler's side ------------------------------------------------------------------------------
    def cycles(self, profile: str, count: int) -> None:
        runtime = self.app.profiles.get(profile)
        for _ in range(count):
            if runtime is None or (qpod := runtime.queue.pop_nowait()) is None:
                return
            cycle = self.app.cycles.schedule_one(runtime, qpod)
            assert cycle is None  # no extenders in these profiles

    def tick(self, seconds: float) -> None:
        self.clock.now += seconds
        for runtime in self.app.profiles.values():
            runtime.queue.flush_backoff_completed()
            runtime.queue.flush_unschedulable_leftover()


def apply_change(pod: dict[str, Any], change: str, value: Any) -> bool:
    """Apply one allowed change to ``pod`` in place; whether it applied. Allowed by the API server on a live pod:
    labels, removing scheduling gates, adding tolerations, (while gated) node selector and affinity, a kubelet's
    phase, a graceful deletion's timestamp, another scheduler's (or the user's) binding of a pending pod."""
    spec, meta, status = pod["spec"], pod["metadata"], pod.setdefault("status", {})
    if change == "labels":
        meta["labels"] = value
    elif change == "ungate":
        if not spec.get("schedulingGates"):
            return False
        spec["schedulingGates"] = spec["schedulingGates"][1:] or None
        if spec["schedulingGates"] is None:
            del spec["schedulingGates"]
    elif change == "tolerate":
        spec["tolerations"] = [*spec.get("tolerations", ()), value]
    elif change == "select":
        if not spec.get("schedulingGates"):
            return False
        spec["nodeSelector"] = value
    elif change == "phase":
        if not spec.get("nodeName"):
            return False
        status["phase"] = value
    elif change == "terminate":
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    elif change == "foreign-bind":
        if spec.get("nodeName") or spec.get("schedulingGates"):
            return False
        spec["nodeName"] = value
    else:
        raise ValueError(change)
    return True


def _ignored_resources(args: Any) -> tuple[set[str], set[str]]:
    """NodeResourcesFit's ignoredResources and ignoredResourceGroups, from its typed args (if any)."""
    return set(getattr(args, "ignored_resources", ()) or ()), set(getattr(args, "ignored_resource_groups", ()) or ())


def _ignored(name: str, ignored: tuple[set[str], set[str]]) -> bool:
    if not is_extended_resource_name(name):
        return False
    names, groups = ignored
    return name in names or name.split("/")[0] in groups
