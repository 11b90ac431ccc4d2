"""SchedulerApp: the operator's state and decisions, with no kopf in sight.

``handlers.py`` turns kopf callbacks into calls on one SchedulerApp; everything that decides lives here,
so the behaviour can be unit-tested with a fake client, and the e2e tests drive the same code through the
real process.

What it holds:
- one :class:`ClusterCache` (nodes, assigned pods, workload selectors, namespaces), shared by all profiles;
- every unassigned pod, whatever its schedulerName, so a profile created later finds its pods at once;
- one :class:`ProfileRuntime` per live SchedulerProfile: its built framework and its scheduling queue.
  A profile change swaps the framework in place; the queue and its pods stay.

Why the authoritative LIST (:meth:`ensure_reconciled`): kopf stops the watches while a replica is paused
by peering and re-lists on resume, but never purges objects deleted meanwhile. Before any profile loop
schedules after a (re)start or a takeover, the cache is rebuilt from a fresh LIST, with watch deletions
that race the LIST remembered as tombstones so a stale LIST cannot resurrect them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kopf_scheduler.api.profile import SchedulerProfileSpec
from kopf_scheduler.explain import Explanations, explain_fit_error
from kopf_scheduler.framework import APIError, CycleState, Status
from kopf_scheduler.framework.builder import effective_plugins, resolve_profile
from kopf_scheduler.framework.enqueue import events_for_framework
from kopf_scheduler.framework.events import ActionType, ClusterEvent, EventResource, node_events, pod_events
from kopf_scheduler.framework.profile import ResolvedProfile
from kopf_scheduler.framework.registry import Registry, default_registry
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.kube.events import event_body
from kopf_scheduler.metrics import ERROR, SCHEDULED, UNSCHEDULABLE, SchedulerMetrics
from kopf_scheduler.queue import QueueClosedError, QueuedPodInfo, SchedulingQueue
from kopf_scheduler.scheduler import FitError, Scheduler, ScheduleResult, SchedulingError
from kopf_scheduler.settings import RunSettings
from kopf_scheduler.state.cache import TERMINAL_PHASES, ClusterCache, Snapshot
from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.state.selectors import LabelSelector

logger = logging.getLogger("kopf_scheduler")

#: Kinds whose selectors feed PodTopologySpread's system default constraints.
WORKLOAD_KINDS = ("Service", "ReplicationController", "ReplicaSet", "StatefulSet")
_LIST_PATHS = {
    "Service": "/api/v1/services",
    "ReplicationController": "/api/v1/replicationcontrollers",
    "ReplicaSet": "/apis/apps/v1/replicasets",
    "StatefulSet": "/apis/apps/v1/statefulsets",
}
#: A profile's pipeline changed: every parked pod of it deserves another try.
PROFILE_CHANGED = ClusterEvent(EventResource.WILDCARD, ActionType.ALL, "SchedulerProfileChanged")


class Client(Protocol):
    """The calls the app makes (``kube.KubeClient``; a fake in unit tests)."""

    async def bind(self, *, namespace: str, name: str, uid: str, node_name: str) -> None: ...

    async def patch_pod_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> None: ...

    async def create_event(self, *, namespace: str, body: dict[str, Any]) -> None: ...

    def list_pages(self, path: str) -> AsyncIterator[list[dict[str, Any]]]: ...


@dataclass(frozen=True, slots=True)
class ProfileOutcome:
    """The result of applying a SchedulerProfile: what its status and events should say."""

    ready: bool
    reason: str
    message: str
    #: Status fields describing the serving pipeline (effectivePlugins, scorePlugins, omittedDefaultPlugins).
    pipeline_status: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class ProfileRuntime:
    """One live profile: its pipeline (swapped on every valid change) and its queue (kept across changes)."""

    name: str
    framework: Framework
    resolved: ResolvedProfile
    scheduler: Scheduler
    queue: SchedulingQueue = field(init=False)
    generation: int = 0

    # The queue calls these; they read ``self.framework`` each time, so a hot reload takes effect at once.
    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return self.framework.queue_sort_less(a, b)

    def pre_enqueue(self, pod: PodInfo) -> Status:
        return self.framework.run_pre_enqueue_plugins(pod)


class _ProfileHandle:
    """The framework Handle of one profile: its name, the API client, the cache snapshot."""

    def __init__(self, app: SchedulerApp, name: str) -> None:
        self._app = app
        self._name = name

    @property
    def profile_name(self) -> str:
        return self._name

    @property
    def client(self) -> Client | None:
        return self._app.client

    def snapshot(self) -> Snapshot:
        return self._app.cache.snapshot()


def _uid(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _slim(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without ``metadata.managedFields``: nothing reads them, and they are a large share of every
    pod's and node's size (kube-scheduler's informers drop them too).

    (Interning every key and short string of cached objects as well was measured: it saved ~40 MiB of Python
    heap at 10000 pods but cost ~8% of the operator's CPU in the e2e benchmark, and no measurable RSS.)
    """
    meta = obj.get("metadata")
    if not meta or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def _same_version(known: dict[str, Any] | None, obj: dict[str, Any]) -> bool:
    """The cache already holds exactly this version (a LIST and a watch both delivered it)."""
    if known is None:
        return False
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return bool(version) and version == (known.get("metadata") or {}).get("resourceVersion")


def _key(obj: dict[str, Any]) -> str:
    """``namespace/name`` by PodInfo.key's rule (explanations are recorded under that key)."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


def _rv(obj: dict[str, Any]) -> int:
    """resourceVersion as a number for 'is this newer' checks (etcd revisions); 0 if not numeric."""
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def pipeline_status(resolved: ResolvedProfile) -> dict[str, Any]:
    """The status fields that describe a serving pipeline, in the CRD's JSON shape."""
    plugins = effective_plugins(resolved)
    score = ",".join(f"{p.name}:{p.weight}" for p in plugins.score)
    return {
        "effectivePlugins": plugins.model_dump(by_alias=True, exclude_none=True),
        "scorePlugins": score or "(none)",
        "omittedDefaultPlugins": list(resolved.omitted_defaults),
    }


class SchedulerApp:
    def __init__(
        self,
        *,
        settings: RunSettings,
        client: Client | None = None,
        metrics: SchedulerMetrics | None = None,
        registry: Registry | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        hostname: str | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.metrics = metrics or SchedulerMetrics()
        self.registry = registry or default_registry()
        self.rng = rng or random.Random()
        self.clock = clock
        self.hostname = hostname or socket.gethostname()
        self.cache = ClusterCache()
        self.profiles: dict[str, ProfileRuntime] = {}
        self.unassigned: dict[str, PodInfo] = {}
        self._reconciled = False
        self._reconcile_lock = asyncio.Lock()
        self._running_loops = 0
        #: While a reconciling LIST is in flight: uids the watches changed or deleted meanwhile. The LIST is
        #: older than those events, so it must neither resurrect the deleted nor delete the newly seen.
        self._listing = False
        self._watched_during_list: set[str] = set()
        self._deleted_during_list: set[str] = set()
        self._last_failure: dict[str, tuple[str, float]] = {}
        #: The latest failed attempt of each pending pod, node by node (``/explain``).
        self.explanations = Explanations()
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- profiles ------------------------------------------------------------------------------------
    def apply_profile(self, *, name: str, spec: dict[str, Any] | None, generation: int = 0) -> ProfileOutcome:
        """Validate and build a profile's pipeline and swap it in; on error the old pipeline keeps serving."""
        try:
            model = SchedulerProfileSpec.model_validate(spec or {})
            resolved = resolve_profile(name, model, self.registry)
            framework = Framework(resolved, registry=self.registry, handle=_ProfileHandle(self, name))
        except Exception as e:  # nothing a user applies may crash the operator
            message = str(e) or type(e).__name__
            kept = " (the previous valid pipeline keeps serving)" if name in self.profiles else ""
            logger.warning("SchedulerProfile %s is invalid: %s%s", name, message, kept)
            return ProfileOutcome(False, "InvalidProfile", message + kept)
        runtime = self.profiles.get(name)
        if runtime is None:
            runtime = self._new_runtime(name, framework, resolved)
            self.profiles[name] = runtime
            for pod in self.unassigned.values():
                if pod.scheduler_name == name and not self.cache.is_assumed(pod.uid):
                    runtime.queue.add(pod)
        else:
            runtime.framework = framework
            runtime.resolved = resolved
            runtime.scheduler = Scheduler(framework, rng=self.rng)
            # New PreEnqueue and event registrations; and a new pipeline may accept pods the old one
            # rejected, so every parked pod gets another try.
            runtime.queue.reconfigure(pre_enqueue=runtime.pre_enqueue, plugin_events=events_for_framework(framework))
            runtime.queue.move_all_to_active_or_backoff(PROFILE_CHANGED)
        runtime.generation = generation
        omitted = getattr(resolved, "omitted_defaults", ())
        note = f"; default plugins not implemented yet, left out: {', '.join(omitted)}" if omitted else ""
        return ProfileOutcome(
            True, "PipelineBuilt", f"pipeline built from generation {generation}{note}", pipeline_status(resolved)
        )

    def _new_runtime(self, name: str, framework: Framework, resolved: ResolvedProfile) -> ProfileRuntime:
        runtime = ProfileRuntime(name, framework, resolved, Scheduler(framework, rng=self.rng))
        runtime.queue = SchedulingQueue(
            less=runtime.less,
            pre_enqueue=runtime.pre_enqueue,
            plugin_events=events_for_framework(framework),
            initial_backoff=self.settings.pod_initial_backoff_seconds,
            max_backoff=self.settings.pod_max_backoff_seconds,
            max_in_unschedulable=self.settings.pod_max_in_unschedulable_pods_duration,
            clock=self.clock,
        )
        return runtime

    def remove_profile(self, name: str) -> None:
        """The pipeline goes; its pending pods stay pending (and stay known, should it come back)."""
        runtime = self.profiles.pop(name, None)
        if runtime is not None:
            runtime.queue.close()

    # -- watch events --------------------------------------------------------------------------------
    def on_node_event(self, event_type: str | None, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        old = self.cache.node(name)
        old_obj = old.obj if old is not None else None
        self._note_watch(event_type, obj)
        if event_type != "DELETED" and _same_version(old_obj, obj):
            return  # kopf's initial LIST repeats what our reconciling LIST already applied
        obj = _slim(obj)
        if event_type == "DELETED":
            self.cache.remove_node(name)
            self._broadcast(node_events(old_obj, None), old_obj, None)
            return
        if old_obj is not None and _rv(obj) and _rv(obj) < _rv(old_obj):
            return
        self.cache.add_or_update_node(obj)
        self._broadcast(node_events(old_obj, obj), old_obj, obj)

    def on_pod_event(self, event_type: str | None, obj: dict[str, Any]) -> None:
        uid = _uid(obj)
        old_assigned = self.cache.pod(uid)
        old_unassigned = self.unassigned.get(uid)
        self._note_watch(event_type, obj)
        if event_type != "DELETED" and (
            _same_version(old_unassigned.obj if old_unassigned is not None else None, obj)
            or _same_version(old_assigned.obj if old_assigned is not None else None, obj)
        ):
            return  # a version we hold already (kopf's LIST after ours); upstream's informers never repeat one
        obj = _slim(obj)
        spec = obj.get("spec") or {}
        phase = (obj.get("status") or {}).get("phase")
        deleted = event_type == "DELETED" or phase in TERMINAL_PHASES
        if deleted:
            self._last_failure.pop(uid, None)
            self.explanations.forget(_key(obj))
            if old_unassigned is not None:
                del self.unassigned[uid]
                self._queue_for(old_unassigned.scheduler_name, lambda q: q.delete(uid))
            if old_assigned is not None:
                self.cache.remove_pod(uid)
                self._broadcast(pod_events(old_assigned.obj, None), old_assigned.obj, None)
            return
        if spec.get("nodeName"):
            if old_unassigned is not None:
                del self.unassigned[uid]
                self._queue_for(old_unassigned.scheduler_name, lambda q: q.delete(uid))
            self._last_failure.pop(uid, None)
            self.explanations.forget(_key(obj))
            old_obj = old_assigned.obj if old_assigned is not None else None
            self.cache.add_or_update_pod(obj)
            self._broadcast(pod_events(old_obj, obj), old_obj, obj)
            return
        pod = PodInfo.from_obj(obj)
        self.unassigned[uid] = pod
        if self.cache.is_assumed(uid):
            return  # its Binding is in flight; the bound pod's own event settles it
        runtime = self.profiles.get(pod.scheduler_name)
        if runtime is None:
            return
        if old_unassigned is None:
            runtime.queue.add(pod)
        else:
            runtime.queue.update(old_unassigned, pod)

    def _note_watch(self, event_type: str | None, obj: dict[str, Any]) -> None:
        if self._listing:
            target = self._deleted_during_list if event_type == "DELETED" else self._watched_during_list
            target.add(_uid(obj))

    def on_workload_event(self, kind: str, event_type: str | None, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        selector: LabelSelector | None = None
        if event_type != "DELETED":
            raw = (obj.get("spec") or {}).get("selector")
            if raw:
                # Services and ReplicationControllers select by a plain label map; the apps kinds by LabelSelector.
                as_selector = {"matchLabels": raw} if kind in ("Service", "ReplicationController") else raw
                selector = LabelSelector.parse(as_selector)
        self.cache.set_workload_selector(kind, namespace, name, selector)

    def on_namespace_event(self, event_type: str | None, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        labels = None if event_type == "DELETED" else dict(meta.get("labels") or {})
        self.cache.set_namespace_labels(meta.get("name", ""), labels)

    def _queue_for(self, scheduler_name: str, action: Callable[[SchedulingQueue], None]) -> None:
        runtime = self.profiles.get(scheduler_name)
        if runtime is not None:
            action(runtime.queue)

    def _broadcast(self, events: Iterable[ClusterEvent], old: Any, new: Any) -> None:
        events = list(events)
        if not events:
            return
        for runtime in self.profiles.values():
            for event in events:
                runtime.queue.move_all_to_active_or_backoff(event, old, new)

    # -- authoritative re-list -----------------------------------------------------------------------
    async def ensure_reconciled(self) -> None:
        """Make the cache equal to a fresh LIST, except for what the watches changed while it was in flight.

        Each page is applied as it arrives and then dropped (a cluster's pods as raw dicts are the largest
        thing this process would ever hold at once); objects known before but absent from the LIST are
        deleted once their kind's last page is in.
        """
        async with self._reconcile_lock:
            if self._reconciled or self.client is None:
                return
            self._listing = True
            try:
                nodes = await self._relist(["/api/v1/nodes"], self._apply_node_page)
                self._purge_unlisted_nodes(nodes)
                pods = await self._relist(self._pod_paths(), self._apply_pod_page)
                self._purge_unlisted_pods(pods)
                for kind, path in _LIST_PATHS.items():
                    listed = await self._relist([path], lambda page, kind=kind: self._apply_workload_page(kind, page))
                    self._purge_unlisted_workloads(kind, listed)
                namespaces = await self._relist(["/api/v1/namespaces"], self._apply_namespace_page)
                self._purge_unlisted_namespaces(namespaces)
            finally:
                self._listing = False
                self._watched_during_list.clear()
                self._deleted_during_list.clear()
            self._reconciled = True
            logger.info("cache reconciled: %d nodes, %d pods", self.cache.num_nodes, len(pods))

    def _pod_paths(self) -> list[str]:
        if not self.settings.namespaces:
            return ["/api/v1/pods"]
        return [f"/api/v1/namespaces/{namespace}/pods" for namespace in self.settings.namespaces]

    async def _relist(self, paths: list[str], apply_page: Callable[[list[dict[str, Any]]], Iterable[Any]]) -> set[Any]:
        """LIST every path page by page; ``apply_page`` applies one page and returns the keys it listed."""
        assert self.client is not None
        listed: set[Any] = set()
        for path in paths:
            async for page in self.client.list_pages(path):
                # No await between here and the next page: the application is atomic for the event loop,
                # and our own applying must not count as "watched while listing".
                self._listing = False
                try:
                    listed.update(apply_page(page))
                finally:
                    self._listing = True
        return listed

    def _watched_meanwhile(self, obj: dict[str, Any]) -> bool:
        """A watch changed or deleted the object while the LIST was in flight: its watched state wins."""
        uid = _uid(obj)
        return uid in self._watched_during_list or uid in self._deleted_during_list

    def _apply_node_page(self, page: list[dict[str, Any]]) -> list[str]:
        for node in page:
            if not self._watched_meanwhile(node):
                self.on_node_event(None, node)
        return [(n.get("metadata") or {}).get("name", "") for n in page]

    def _purge_unlisted_nodes(self, listed: set[str]) -> None:
        for name in list(self.cache.node_names()):
            info = self.cache.node(name)
            if name not in listed and info is not None and not self._watched_meanwhile(info.obj):
                self.on_node_event("DELETED", info.obj)

    def _apply_pod_page(self, page: list[dict[str, Any]]) -> list[str]:
        for pod in page:
            if not self._watched_meanwhile(pod):
                self.on_pod_event(None, pod)
        return [_uid(p) for p in page]

    def _purge_unlisted_pods(self, listed: set[str]) -> None:
        known = [p.obj for p in self.cache.pods()] + [p.obj for p in self.unassigned.values()]
        for pod in known:
            uid = _uid(pod)
            if uid not in listed and not self._watched_meanwhile(pod) and not self.cache.is_assumed(uid):
                self.on_pod_event("DELETED", pod)

    def _apply_workload_page(self, kind: str, page: list[dict[str, Any]]) -> list[tuple[str, str]]:
        for item in page:
            self.on_workload_event(kind, None, item)
        metas = [i.get("metadata") or {} for i in page]
        return [(meta.get("namespace", ""), meta.get("name", "")) for meta in metas]

    def _purge_unlisted_workloads(self, kind: str, listed: set[tuple[str, str]]) -> None:
        for key in [k for k in self.cache.workload_selectors if k[0] == kind and (k[1], k[2]) not in listed]:
            self.cache.set_workload_selector(*key, None)

    def _apply_namespace_page(self, page: list[dict[str, Any]]) -> list[str]:
        for namespace in page:
            self.on_namespace_event(None, namespace)
        return [(n.get("metadata") or {}).get("name", "") for n in page]

    def _purge_unlisted_namespaces(self, listed: set[str]) -> None:
        for name in [n for n in self.cache.namespace_labels if n not in listed]:
            self.cache.set_namespace_labels(name, None)

    # -- the scheduling loop -------------------------------------------------------------------------
    async def run_profile(self, name: str, *, stopped: Callable[[], bool], poll: float = 0.5) -> None:
        """One profile's loop; returns when ``stopped()`` (kopf pauses the daemon, or stops it as the profile goes)."""
        self._running_loops += 1
        try:
            await self.ensure_reconciled()
            last_flush = last_leftover = self.clock()
            while not stopped():
                runtime = self.profiles.get(name)
                if runtime is None:
                    # kopf spawns the daemon before the create/resume handler has built the pipeline, and an
                    # invalid new profile has none until it is fixed: wait for it. kopf stops the daemon when
                    # the profile is deleted (returning here would end the loop for good).
                    await asyncio.sleep(poll)
                    continue
                now = self.clock()
                if now - last_flush >= 1.0:
                    runtime.queue.flush_backoff_completed()
                    self._publish_pending()
                    last_flush = now
                if now - last_leftover >= 30.0:
                    runtime.queue.flush_unschedulable_leftover()
                    last_leftover = now
                qpod = runtime.queue.pop_nowait()
                if qpod is None:
                    # QueueClosedError: the profile was deleted meanwhile; kopf is about to stop this daemon.
                    with contextlib.suppress(TimeoutError, QueueClosedError):
                        qpod = await asyncio.wait_for(runtime.queue.pop(), timeout=poll)
                    if qpod is None:
                        continue
                self.schedule_one(runtime, qpod)
                # Let watch events, binds and reports run between cycles (each cycle is short, synchronous).
                await asyncio.sleep(0)
        finally:
            self._running_loops -= 1
            if self._running_loops == 0:
                # Paused or stopped: watches may miss deletions from now on, so the next start re-lists.
                self._reconciled = False

    def _publish_pending(self) -> None:
        """scheduler_pending_pods has no profile label (as upstream): publish the sum over all queues."""
        totals: dict[str, int] = {}
        for runtime in self.profiles.values():
            for queue, count in runtime.queue.pending_pods().items():
                totals[queue] = totals.get(queue, 0) + count
        self.metrics.set_pending(totals)

    def schedule_one(self, runtime: ProfileRuntime, qpod: QueuedPodInfo) -> None:
        """One scheduling cycle (synchronous): filter, score, assume, reserve, permit; binding goes async."""
        uid = qpod.pod.uid
        latest = self.unassigned.get(uid)
        if latest is None or latest.terminating or self.cache.is_assumed(uid) or self.cache.pod(uid) is not None:
            runtime.queue.done(uid)  # deleted, bound or being bound meanwhile
            return
        qpod.pod = pod = latest
        started = time.perf_counter()
        state = CycleState()
        scheduler = runtime.scheduler
        try:
            result = scheduler.schedule_pod(state, pod, self.cache.snapshot())
            self.metrics.scheduling_algorithm_duration.observe(time.perf_counter() - started)
            assumed = scheduler.assume_and_reserve(state, pod, result, self.cache)
        except FitError as fit:
            scheduler.run_post_filter(state, pod, fit)
            self._explain(runtime, fit)
            plugins = fit.diagnosis.all_unschedulable_plugins()
            self._fail(runtime, qpod, message=fit.message, reason="Unschedulable", plugins=plugins, started=started)
            return
        except SchedulingError as e:
            self._fail(runtime, qpod, message=e.status.message, reason="SchedulerError", plugins=set(), started=started)
            return
        except Exception as e:  # a plugin bug must not stop the loop
            logger.exception("scheduling %s failed", pod.key)
            self._fail(runtime, qpod, message=str(e), reason="SchedulerError", plugins=set(), started=started)
            return
        self.spawn(self._bind(runtime, qpod, state, assumed, result, started))

    async def _bind(
        self,
        runtime: ProfileRuntime,
        qpod: QueuedPodInfo,
        state: CycleState,
        pod: PodInfo,
        result: ScheduleResult,
        started: float,
    ) -> None:
        node = result.suggested_host
        try:
            status = await runtime.scheduler.bind_pod(state, pod, result, self.cache)
        except Exception as e:  # the bind task must always settle the pod
            self.cache.forget(pod.uid)
            status = Status.as_error(e)
        if status.is_success:
            runtime.queue.done(pod.uid)
            self.metrics.observe_attempt(result=SCHEDULED, profile=runtime.name, seconds=time.perf_counter() - started)
            first = qpod.initial_attempt_timestamp or qpod.timestamp
            self.metrics.observe_scheduled(attempts=qpod.attempts, seconds_since_first_enqueue=self.clock() - first)
            await self._post_event(
                pod, runtime.name, "Normal", "Scheduled", "Binding", f"Successfully assigned {pod.key} to {node}"
            )
            return
        http_status = getattr(status.error, "status", None)
        if http_status == 409:
            # Already bound (another replica during a peering overlap): its watch event brings the truth.
            logger.info("pod %s was already bound elsewhere (409); dropping our assumption", pod.key)
            runtime.queue.done(pod.uid)
            return
        if http_status == 404:
            logger.info("pod %s disappeared before binding (404)", pod.key)
            self.unassigned.pop(pod.uid, None)
            runtime.queue.done(pod.uid)
            return
        if status.is_rejected:  # Permit rejected while waiting: the message is already the FitError text
            self._fail(
                runtime, qpod, message=status.message, reason="Unschedulable", plugins={status.plugin}, started=started
            )
            return
        self._fail(
            runtime,
            qpod,
            message=f"binding rejected: {status.message}",
            reason="SchedulerError",
            plugins=set(),
            started=started,
        )

    def _explain(self, runtime: ProfileRuntime, fit: FitError) -> None:
        """Keep the per-node account of this failure (read within the cycle: node names are live)."""
        try:
            self.explanations.record(fit.pod.key, explain_fit_error(fit, profile=runtime.name, at=_now_rfc3339()))
        except Exception:  # an explanation must never cost a scheduling decision
            logger.exception("could not explain the failure of %s", fit.pod.key)

    def _fail(
        self,
        runtime: ProfileRuntime,
        qpod: QueuedPodInfo,
        *,
        message: str,
        reason: str,
        plugins: set[str],
        started: float,
    ) -> None:
        """Upstream's handleSchedulingFailure: requeue, then report (event deduplicated, condition patched)."""
        uid = qpod.pod.uid
        qpod.clear_rejector_plugins()
        if reason == "Unschedulable":
            qpod.unschedulable_plugins.update(plugins)
        qpod.last_failure_message = message
        if uid in self.unassigned:
            runtime.queue.add_unschedulable_if_not_present(qpod)
        runtime.queue.done(uid)
        result = UNSCHEDULABLE if reason == "Unschedulable" else ERROR
        self.metrics.observe_attempt(result=result, profile=runtime.name, seconds=time.perf_counter() - started)
        pod = self.unassigned.get(uid, qpod.pod)
        now = self.clock()
        last = self._last_failure.get(uid)
        if last is None or last[0] != message or now - last[1] >= self.settings.pod_max_backoff_seconds:
            self._last_failure[uid] = (message, now)
            self.spawn(self._post_event(pod, runtime.name, "Warning", "FailedScheduling", "Scheduling", message))
        if _needs_condition_patch(pod.obj, reason, message):
            self.spawn(self._patch_condition(pod, reason, message))

    # -- reporting -----------------------------------------------------------------------------------
    async def _post_event(
        self, pod: PodInfo, profile: str, event_type: str, reason: str, action: str, note: str
    ) -> None:
        if self.client is None:
            return
        body = event_body(
            regarding=pod.obj,
            event_type=event_type,
            reason=reason,
            action=action,
            note=note,
            reporting_controller=profile,
            reporting_instance=f"{profile}-{self.hostname}"[:128],
        )
        try:
            await self.client.create_event(namespace=pod.namespace, body=body)
        except Exception as e:  # events are best effort, as client-go's recorder
            logger.warning("could not post %s event for %s: %s", reason, pod.key, e)

    async def _patch_condition(self, pod: PodInfo, reason: str, message: str) -> None:
        if self.client is None:
            return
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": _now_rfc3339(),
        }
        try:
            await self.client.patch_pod_status(
                namespace=pod.namespace, name=pod.name, patch={"status": {"conditions": [condition]}}
            )
        except APIError as e:
            if e.status != 404:
                logger.warning("could not patch PodScheduled of %s: %s", pod.key, e)
        except Exception as e:
            logger.warning("could not patch PodScheduled of %s: %s", pod.key, e)

    def spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for in-flight binds and reports (tests and graceful shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def _needs_condition_patch(obj: dict[str, Any], reason: str, message: str) -> bool:
    """Upstream patches only when the PodScheduled condition would change (ignoring timestamps)."""
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled":
            return not (
                condition.get("status") == "False"
                and condition.get("reason") == reason
                and condition.get("message") == message
            )
    return True


def _now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
