"""The live SchedulerProfiles at run time: each one's pipeline, queue and framework Handle, and what applying it
reports. (``api/profile.py`` is the SchedulerProfile resource's pydantic models; ``framework/profile.py`` the
profile resolved to plugin lists, which the runtime instantiates.)

Upstream keeps a ``profile.Map`` of frameworks (``pkg/scheduler/profile/profile.go``) and one scheduling queue
for all of them; here each profile has its own queue (a profile is a kopf object with its own daemon), so a
:class:`ProfileRuntime` pairs the two. A valid profile change swaps the framework and the extenders in place
and keeps the queue with its pods; the queue reads the framework through :meth:`ProfileRuntime.less` and
:meth:`ProfileRuntime.pre_enqueue`, so the swap takes effect at once. Building and swapping is the composition
root's job (``app.py``); the event handlers and the scheduling cycle only read these.

:class:`ProfileHandle` is each profile's framework Handle (upstream ``frameworkImpl`` as ``framework.Handle``):
what the watches know about pods, the one nominator of all profiles, ``activate`` and ``reject_waiting_pod``
across every profile (upstream's queue and waiting pods are shared by the profiles), events through the
reporter, and :class:`BackgroundJobs`, where plugins run API work off the cycle (asynchronous preemption).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kopf_scheduler.client import Client, ClientRef
from kopf_scheduler.framework import Status
from kopf_scheduler.framework.builder import effective_plugins
from kopf_scheduler.framework.extender import Extender
from kopf_scheduler.framework.interface import Nominator, NoNominator, PluginMetrics, PluginsRunner
from kopf_scheduler.framework.profile import ResolvedProfile
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.queue import QueuedPodInfo, SchedulingQueue
from kopf_scheduler.state.cache import ClusterCache, Snapshot
from kopf_scheduler.state.pod_info import PodInfo

logger = logging.getLogger("kopf_scheduler")

#: Posts an event about a pod: ``(pod, profile, event_type, reason, action, note)``; fire and forget.
RecordEvent = Callable[[PodInfo, str, str, str, str, str, PodInfo | Mapping[str, Any] | None], None]
#: Awaits a pod's pending status writes (``Reporter.status_settled``), by uid.
StatusSettled = Callable[[str], Awaitable[None]]


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
    #: The profile's HTTP extenders (ignorable ones last); empty for most profiles, whose cycles never await.
    extenders: tuple[Extender, ...] = ()
    queue: SchedulingQueue = field(init=False)
    generation: int = 0
    #: ``spec.explain.successes``: each bound pod's scores are kept for ``/explain``.
    explain_successes: bool = False
    #: ``spec.explain.annotations``: each attempt's account is also written onto the pod (``decisions.py``).
    explain_annotations: bool = False

    # The queue calls these; they read ``self.framework`` each time, so a hot reload takes effect at once.
    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return self.framework.queue_sort_less(a, b)

    def pre_enqueue(self, pod: PodInfo) -> Status:
        return self.framework.run_pre_enqueue_plugins(pod)


class BackgroundJobs:
    """The plugins' API work off the scheduling cycle (upstream's goroutines, e.g. preemption's deletions).

    Each job is a task kept until it ends; an exception it raises is logged (a goroutine's error goes to
    the log too), and :meth:`cancel` ends what is left at shutdown. :meth:`wait` lets tests see them through.
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, job: Coroutine[Any, Any, None], *, name: str) -> None:
        task = asyncio.ensure_future(job)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("background job %s failed", task.get_name(), exc_info=task.exception())

    @property
    def pending(self) -> int:
        """Jobs not finished yet."""
        return len(self._tasks)

    async def wait(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def cancel(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class _NoMetrics:
    """Where plugin metrics go when the handle has no SchedulerMetrics (tests that do not read them)."""

    def preemption_attempt(self) -> None:
        return None

    def preemption_victims(self, count: int) -> None:
        return None

    def resource_claim_create(self, status: str) -> None:
        return None


class ProfileHandle:
    """The framework Handle of one profile: its name, the API client, the cache snapshot, the known pods, and
    the services every profile shares (nominator, queues and waiting pods, events, background jobs, metrics)."""

    def __init__(
        self,
        name: str,
        *,
        client: ClientRef,
        cache: ClusterCache,
        unassigned: Mapping[str, PodInfo] | None = None,
        profiles: Mapping[str, ProfileRuntime] | None = None,
        nominator: Nominator | None = None,
        record_event: RecordEvent | None = None,
        status_settled: StatusSettled | None = None,
        jobs: BackgroundJobs | None = None,
        metrics: PluginMetrics | None = None,
    ) -> None:
        self._name = name
        self._client = client
        self._cache = cache
        #: The pending pods as watched (the app's map by uid); assigned and assumed ones are in the cache.
        self._unassigned: Mapping[str, PodInfo] = {} if unassigned is None else unassigned
        #: Every live profile (the app's registry): their queues and their waiting pods.
        self._profiles: Mapping[str, ProfileRuntime] = {} if profiles is None else profiles
        self._nominator: Nominator = NoNominator() if nominator is None else nominator
        self._record_event = record_event
        self._status_settled = status_settled
        self._jobs = BackgroundJobs() if jobs is None else jobs
        self._metrics: PluginMetrics = _NoMetrics() if metrics is None else metrics
        self._runner: PluginsRunner | None = None
        self._extenders: tuple[Extender, ...] = ()

    def attach_pipeline(self, runner: PluginsRunner, extenders: Sequence[Extender]) -> None:
        """The framework built on this handle, with its extenders (called once, by the framework)."""
        self._runner = runner
        self._extenders = tuple(extenders)

    @property
    def plugins_runner(self) -> PluginsRunner:
        if self._runner is None:
            raise RuntimeError(f"the handle of profile {self._name} has no framework yet")
        return self._runner

    @property
    def extenders(self) -> Sequence[Extender]:
        return self._extenders

    @property
    def profile_name(self) -> str:
        return self._name

    @property
    def client(self) -> Client | None:
        return self._client()

    def snapshot(self) -> Snapshot:
        return self._cache.snapshot()

    def pod_exists(self, pod: PodInfo) -> bool:
        """By uid first (the common case, O(1)); a pod of that namespace and name under another uid counts
        too, as upstream's lister looks pods up by name."""
        if pod.uid in self._unassigned or self._cache.pod(pod.uid) is not None:
            return True
        known = (*self._unassigned.values(), *self._cache.pods_in_namespace(pod.namespace))
        return any(p.namespace == pod.namespace and p.name == pod.name for p in known)

    def get_pod(self, uid: str) -> PodInfo | None:
        """The pending version if the pod is pending (assumed ones too: the watch has not bound them yet),
        else the bound one the cache holds."""
        pending = self._unassigned.get(uid)
        return pending if pending is not None else self._cache.pod(uid)

    @property
    def nominator(self) -> Nominator:
        return self._nominator

    def activate(self, pods: Iterable[PodInfo]) -> None:
        """To the queue of each pod's profile (a pod lives in the queue its schedulerName names)."""
        by_profile: dict[str, list[str]] = {}
        for pod in pods:
            by_profile.setdefault(pod.scheduler_name, []).append(pod.uid)
        for profile, uids in by_profile.items():
            runtime = self._profiles.get(profile)
            if runtime is not None:
                runtime.queue.activate(uids)

    def reject_waiting_pod(self, uid: str, plugin: str = "", message: str = "removed") -> bool:
        runtimes = list(self._profiles.values())
        return any(runtime.framework.reject_waiting_pod(uid, plugin, message) for runtime in runtimes)

    def allow_waiting_pod(self, uid: str, plugin: str) -> bool:
        return any(runtime.framework.allow_waiting_pod(uid, plugin) for runtime in list(self._profiles.values()))

    def preempt_waiting_pod(self, uid: str, plugin: str) -> bool:
        return any(runtime.framework.preempt_waiting_pod(uid, plugin) for runtime in list(self._profiles.values()))

    def record_event(
        self,
        regarding: PodInfo,
        *,
        event_type: str,
        reason: str,
        action: str,
        note: str,
        related: PodInfo | Mapping[str, Any] | None = None,
    ) -> None:
        if self._record_event is not None:
            self._record_event(regarding, self._name, event_type, reason, action, note, related)

    def spawn(self, job: Coroutine[Any, Any, None], *, name: str) -> None:
        self._jobs.spawn(job, name=name)

    async def pod_status_settled(self, uid: str) -> None:
        if self._status_settled is not None:
            await self._status_settled(uid)

    @property
    def metrics(self) -> PluginMetrics:
        return self._metrics


def pipeline_status(resolved: ResolvedProfile) -> dict[str, Any]:
    """The status fields that describe a serving pipeline, in the CRD's JSON shape."""
    plugins = effective_plugins(resolved)
    score = ",".join(f"{p.name}:{p.weight}" for p in plugins.score)
    return {
        "effectivePlugins": plugins.model_dump(by_alias=True, exclude_none=True),
        "scorePlugins": score or "(none)",
        "omittedDefaultPlugins": list(resolved.omitted_defaults),
    }
