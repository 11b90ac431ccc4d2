"""SchedulerApp: the composition root of the operator, with no kopf in sight.

``handlers.py`` turns kopf callbacks into calls on one SchedulerApp, so the behaviour can be unit-tested with
a fake client and the e2e tests drive the same code through the real process. The app builds the parts and
wires each with the few collaborators it needs (upstream's ``scheduler.New`` in ``pkg/scheduler/scheduler.go``):

- one :class:`ClusterCache` (nodes, assigned pods, workload selectors, namespaces, storage objects), shared by
  all profiles, and :class:`UnassignedPods` (``unassigned_pods.py``), every unassigned pod, whatever its
  schedulerName, so a profile created later finds its pods at once;
- the profiles registry: one :class:`ProfileRuntime` per live SchedulerProfile, its built framework, its
  extenders and its scheduling queue (``live_profiles.py``). A profile change swaps the framework in place; the
  queue and its pods stay. Building and swapping happens here, in :meth:`SchedulerApp.apply_profile`;
- one :class:`PodNominator` shared by every profile's framework (upstream's one queue holds one nominator:
  a pod nominated by one profile's preemption holds its place against every profile's pods), and the
  plugins' :class:`BackgroundJobs` (asynchronous preemption), cancelled at :meth:`SchedulerApp.shutdown`;
- :class:`EventHandlers` (``eventhandlers.py``, ``app.watch``): watch events and the reconciling LIST into the cache
  and queues;
- :class:`ScheduleOne` (``schedule_one.py``): the scheduling and binding cycles of one pod, failure handling,
  around the algorithm of ``algorithm.py``;
- :class:`Reporter` (``reporting.py``): events, the PodScheduled condition, ``/explain``;
- the per-profile loop (:meth:`SchedulerApp.run_profile`, upstream's ``Scheduler.Run``) that ties them together.

The API client is the one I/O seam (:class:`kopf_scheduler.client.Client`); kopf's login hook replaces it, so
parts read it through ``lambda: app.client`` at each call.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import logging
import math
import random
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kopf_scheduler.api.profile import SchedulerProfileSpec
from kopf_scheduler.client import Client
from kopf_scheduler.decisions import account_from_annotations
from kopf_scheduler.eventhandlers import EventHandlers
from kopf_scheduler.explain import Explanations, coscheduling_group_section, pod_group_section
from kopf_scheduler.framework.builder import resolve_profile
from kopf_scheduler.framework.enqueue import events_for_framework
from kopf_scheduler.framework.events import ActionType, ClusterEvent, EventResource
from kopf_scheduler.framework.extender import Extender, ExtenderTransport, build_extenders
from kopf_scheduler.framework.interface import PodGroupPreemption
from kopf_scheduler.framework.profile import ResolvedProfile
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.framework.runtime import Framework, SearchStart
from kopf_scheduler.framework.status import Status
from kopf_scheduler.framework.waiting_pods import WaitingPod
from kopf_scheduler.health import HEALTHY, PING, Health, HealthCheck, HealthChecks
from kopf_scheduler.live_profiles import (
    BackgroundJobs,
    ProfileHandle,
    ProfileOutcome,
    ProfileRuntime,
    pipeline_status,
)
from kopf_scheduler.metrics import SchedulerMetrics
from kopf_scheduler.plugins.coscheduling import NAME as COSCHEDULING
from kopf_scheduler.plugins.coscheduling import Coscheduling
from kopf_scheduler.plugins.coscheduling.core import KIND as COSCHEDULING_POD_GROUP
from kopf_scheduler.plugins.coscheduling.core import check_cluster_resource
from kopf_scheduler.plugins.gang_scheduling import POD_GROUP
from kopf_scheduler.plugins.registry import default_registry
from kopf_scheduler.pod_group_status import CoschedulingStatus
from kopf_scheduler.queue import PodNominator, QueueClosedError, SchedulingQueue
from kopf_scheduler.reporting import Reporter
from kopf_scheduler.schedule_one import ScheduleOne
from kopf_scheduler.schedule_one_pod_group import PodGroupCycle
from kopf_scheduler.settings import RunSettings
from kopf_scheduler.standby import PauseToggle, WarmStandby
from kopf_scheduler.standing import PeeringRenewer, Standing, Timings
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.pod_group_state import PodGroupState, PodGroupStateNotFound
from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.unassigned_pods import UnassignedPods
from kopf_scheduler.watched import WATCHED_KINDS, WORKLOAD_API_KINDS, Feed

logger = logging.getLogger("kopf_scheduler")

#: A profile's pipeline changed: every parked pod of it deserves another try.
PROFILE_CHANGED = ClusterEvent(EventResource.WILDCARD, ActionType.ALL, "SchedulerProfileChanged")

#: The Ready message's note for a profile with a workload-aware plugin (GangScheduling) on an API server without
#: upstream's workload API: no PodGroup is ever seen, so the pods of a group wait at PreEnqueue.
WORKLOAD_API_NOT_SERVED = (
    "; the API server does not serve scheduling.k8s.io/v1alpha2 (Workload, PodGroup): pods with "
    "spec.schedulingGroup wait at PreEnqueue for their PodGroup"
)

#: kopf hands the objects of a LIST (its initial one, or a re-LIST after an expired watch) to the handlers with
#: event type None, and while it lists it yields the event loop once per object it has not seen yet (a worker
#: is spawned for each). Interleaved one to one with scheduling cycles, a LIST of 50000 pods outlasts the
#: continue token of the API server's paginated LIST (410 Gone, and kopf stops the operator): while listed
#: pods or nodes keep arriving (none for this long ends it), a loop runs one cycle per fifth of this, so that
#: kopf has the event loop almost to itself and the first pods still bind before its LIST is in.
LISTING_QUIET_SECONDS = 0.25

#: The kinds whose listed objects count as kopf listing (see LISTING_QUIET_SECONDS).
_LISTED_KINDS = frozenset(watched.kind for watched in WATCHED_KINDS if watched.feed in (Feed.POD, Feed.NODE))


def in_a_new_window(previous: float, now: float) -> bool:
    """Whether ``now`` is in a later whole second than ``previous``: backoffQ is flushed once per window, at its
    start, as upstream's ticker does (``backoffQueue.waitUntilAlignedWithOrderingWindow``: expiries are aligned down
    to whole seconds, and each window is flushed as one, so a pod that backed off until second S is in activeQ at S,
    not up to a second later at the loop's own phase)."""
    return math.floor(now) > math.floor(previous)


def until_next_window(now: float) -> float:
    """Seconds to the next whole second (how long an idle loop may wait before that window's flush is due)."""
    return math.floor(now) + 1.0 - now


__all__ = [
    "GC_THRESHOLDS",
    "LISTING_QUIET_SECONDS",
    "PROFILE_CHANGED",
    "WORKLOAD_API_NOT_SERVED",
    "ProfileOutcome",
    "SchedulerApp",
    "tune_garbage_collector",
]


#: The cyclic collector's thresholds (Python's are 700, 10, 10). The third is what matters: Python runs a full
#: collection, which walks every tracked object (the whole cache: 240 ms at 5000 nodes / 10000 pods), after
#: every 10 collections of the middle generation once objects promoted since the last one exceed a quarter of
#: the old ones; a scheduler promotes each pending pod's objects (they wait in the queue), so that quarter is
#: always reached and the count decides (at 10: 30 full collections, 7.2 of 35.5 s of CPU in SchedulingBasic
#: 5000/10000, a cost per pod that grows with the cache). Pod and node events bypass kopf's per-event
#: processing, so young collections find next to no cyclic garbage (≈ 2500 objects over 10000 pods): a first
#: threshold of 20000 costs a third of the CPU for the same peak RSS (docs/benchmarks.md, "Per-pod cost").
GC_THRESHOLDS = (20000, 10, 100)


#: A running profile loop that has not turned for this long fails the ``scheduling-loops`` health check.
LOOP_STALL_SECONDS = 60.0


def tune_garbage_collector() -> None:
    """Keep what start-up created (modules, classes, functions: everything imported) out of every later run of
    the cyclic garbage collector, and run the collections less often (``GC_THRESHOLDS``).

    Start-up's objects live for ever, so walking them is wasted.
    """
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class SchedulerApp:
    """The operator without kopf: the shared state, the live profiles, the parts, and each profile's loop."""

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
        extender_transport: ExtenderTransport | None = None,
        identity: str | None = None,
    ) -> None:
        self.settings = settings
        #: This replica's identity in the peering (kopf's), or None: no renew-deadline gate (unit tests).
        self.identity = identity
        #: The renew-deadline gate (``standing.py``): binds only on a standing confirmed within the renew deadline.
        self.standing = Standing(
            Timings(*settings.leader_election()),
            clock=clock,
            enabled=settings.leader_elect and identity is not None,
        )
        self._renewer: PeeringRenewer | None = None
        self._renewer_task: asyncio.Task[None] | None = None
        #: Replaced on every kopf login; the parts read it through ``lambda: self.client``.
        self.client = client
        self.metrics = metrics or SchedulerMetrics()
        #: leader_election_master_status: kopf peering made this replica the active one and its cache is synced
        #: (with or without profiles to run).
        self.metrics.track_active(settings.peering_name, lambda: not self.standby.paused and self.watch.synced_once)
        self.registry = registry or default_registry()
        self.rng = rng or random.Random()
        self.clock = clock
        self.hostname = hostname or socket.gethostname()
        #: How profiles' HTTP extenders are called (the CLI passes ``kube.extender_http``'s; None: no extenders).
        self.extender_transport = extender_transport
        self.cache = ClusterCache()
        self.profiles: dict[str, ProfileRuntime] = {}
        self.unassigned = UnassignedPods()
        self._running_loops = 0
        #: When each profile's loop last turned (``scheduling-loops`` health check); dropped when the loop ends.
        self._loop_turns: dict[str, float] = {}
        self._shutting_down = False
        #: When kopf last handed over a listed pod or node (event type None); see LISTING_QUIET_SECONDS.
        self._listed_at = -math.inf
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Every profile's nominated pods (upstream's one queue, one nominator).
        self.nominator = PodNominator(self.unassigned.get)
        #: Where the next node search begins, for every profile (upstream's one ``nextStartNodeIndex``).
        self.search_start = SearchStart()
        #: The plugins' work off the scheduling cycle (``Handle.spawn``).
        self.jobs = BackgroundJobs()
        self.reporter = Reporter(
            client=lambda: self.client,
            hostname=self.hostname,
            clock=clock,
            repeat_after=settings.pod_max_backoff_seconds,
            spawn=self.spawn,
            explanations=Explanations(max_bound=settings.explain_bound_pods, history=settings.explain_history),
        )
        #: The watch events' handlers: watch events and the reconciling LIST into the cache and the queues.
        self.watch = EventHandlers(
            cache=self.cache,
            profiles=self.profiles,
            unassigned=self.unassigned,
            client=lambda: self.client,
            namespaces=settings.namespaces or (),
            forget_pod=self.reporter.forget,
            nominator=self.nominator,
        )
        #: A paused replica's cache follows the cluster (``standby.py``); started by :meth:`follow_pauses`.
        self.standby = WarmStandby(self.watch, follow=not settings.delay_cache_until_active)
        self._standby_task: asyncio.Task[None] | None = None
        self.cycles = ScheduleOne(
            cache=self.cache,
            unassigned=self.unassigned,
            reporter=self.reporter,
            metrics=self.metrics,
            clock=clock,
            spawn=self.spawn,
            move_all=self.watch.move_all_to_active_or_backoff,
            nominator=self.nominator,
            rng=self.rng,
            standing=self.standing,
        )
        #: The pod-group cycle, where ScheduleOne sends the pods of a pod group of a workload-aware profile.
        self.pod_group_cycles = PodGroupCycle(
            cycles=self.cycles,
            cache=self.cache,
            reporter=self.reporter,
            metrics=self.metrics,
            spawn=self.spawn,
            rng=self.rng,
        )
        self.cycles.pod_group_cycle = self.pod_group_cycles.schedule
        #: The Coscheduling PodGroups' status, as scheduler-plugins' controller keeps it (the active replica only).
        self.coscheduling_status = CoschedulingStatus(
            client=lambda: self.client, pod_groups=self._coscheduling_pod_groups, spawn=self.spawn
        )
        self.watch.pod_observer = self.coscheduling_status.observe_pod

    def _coscheduling_pod_groups(self) -> dict[tuple[str, str], dict[str, Any]]:
        groups: dict[tuple[str, str], dict[str, Any]] = {}
        for obj in self.cache.objects.all(COSCHEDULING_POD_GROUP):
            meta = obj.get("metadata") or {}
            groups[meta.get("namespace") or "", meta.get("name") or ""] = obj
        return groups

    def _profiles_changed(self) -> None:
        """Keep the Coscheduling PodGroups' status while some live profile enables Coscheduling."""
        self.coscheduling_status.enabled = any(
            COSCHEDULING in runtime.framework.plugins for runtime in self.profiles.values()
        )

    @property
    def explanations(self) -> Explanations:
        """The latest failed attempt of each pending pod, node by node (``/explain``)."""
        return self.reporter.explanations

    def explain(self, key: str) -> dict[str, Any] | None:
        """What ``/explain/<namespace>/<pod>`` answers: the pod's stored account (:class:`Explanations`), and for a
        pod of a pod group the group's live state (``podGroup``, :func:`pod_group_section`), computed now. A pod
        of a group that no cycle has tried (held at PreEnqueue) gets an answer with the group section alone."""
        account = self.explanations.get(key)
        if account is None:
            account = self._account_on_pod(key)
        pod = self._group_member(key)
        if pod is None:
            return account
        if pod.scheduling_group is not None:
            section = self._pod_group_section(pod, pod.scheduling_group)
        elif pod.coscheduling_group is not None:
            section = self._coscheduling_section(pod, pod.coscheduling_group)
        else:
            return account
        return {**(account if account is not None else {"pod": key}), "podGroup": section}

    def _account_on_pod(self, key: str) -> dict[str, Any] | None:
        """The account the pod's own annotations still tell (a profile with ``spec.explain.annotations``; another
        replica's attempt, before a failover), read from the pod as the watch last delivered it."""
        namespace, _, name = key.partition("/")
        for pod in itertools.chain(self.unassigned.values(), self.cache.pods_in_namespace(namespace)):
            if pod.name == name and pod.namespace == namespace:
                annotations = (pod.obj.get("metadata") or {}).get("annotations")
                return account_from_annotations(key, annotations) if annotations else None
        return None

    def _group_member(self, key: str) -> PodInfo | None:
        """The pod ``namespace/name`` if it names a pod group: a pending pod, or a member the cache holds."""
        namespace, _, name = key.partition("/")
        for pod in self.unassigned.values():
            if pod.name == name and pod.namespace == namespace:
                return pod if pod.in_pod_group else None
        for groups in (self.cache.pod_groups, self.cache.coscheduling_groups):
            for group_namespace, group in groups:
                if group_namespace != namespace:
                    continue
                for pod in groups.get(group_namespace, group).all_pods.values():
                    if pod.name == name:
                        return pod
        return None

    def _waiting_members(self, state: PodGroupState | None) -> list[WaitingPod]:
        waiting: list[WaitingPod] = []
        if state is not None:
            for each in self.profiles.values():
                waiting_pods = each.framework.waiting_pods
                waiting += [waiting_pods[uid] for uid in state.all_pods if uid in waiting_pods]
        return waiting

    def _coscheduling_section(self, pod: PodInfo, group: str) -> dict[str, Any]:
        """A Coscheduling pod's group: its PodGroup, the cache's state, minResources judged now against the
        cluster (as PreFilter judges it), and the backoff its profile's plugin keeps."""
        state: PodGroupState | None
        try:
            state = self.cache.coscheduling_groups.get(pod.namespace, group)
        except PodGroupStateNotFound:
            state = None
        pod_group = self.cache.objects.get(COSCHEDULING_POD_GROUP, group, pod.namespace)
        full = f"{pod.namespace}/{group}"
        verdict: str | None = None
        resources = None if pod_group is None else (pod_group.get("spec") or {}).get("minResources")
        if pod_group is not None and resources is not None:
            request = {**resources, "pods": int((pod_group.get("spec") or {}).get("minMember") or 0)}
            verdict = check_cluster_resource(self.cache.snapshot().node_infos(), request, full) or "fits"
        runtime = self.profiles.get(pod.scheduler_name)
        plugin = None if runtime is None else runtime.framework.plugins.get(COSCHEDULING)
        backoff = plugin.manager.backed_off_for(full) if isinstance(plugin, Coscheduling) else 0.0
        return coscheduling_group_section(
            full,
            pod_group,
            state,
            waiting=self._waiting_members(state),
            min_resources=verdict,
            backed_off_seconds=backoff,
        )

    def _pod_group_section(self, pod: PodInfo, group: str) -> dict[str, Any]:
        state: PodGroupState | None
        try:
            state = self.cache.pod_groups.get(pod.namespace, group)
        except PodGroupStateNotFound:
            state = None
        waiting = self._waiting_members(state)
        verdict: Status | None = None
        runtime = self.profiles.get(pod.scheduler_name)
        if runtime is not None and pod.uid in self.unassigned and not self.cache.is_assumed(pod.uid):
            verdict = runtime.pre_enqueue(pod)  # what keeps the pod out of the queue, if anything
        tried = self.pod_group_cycles.placements.get(pod.namespace, group)
        preemption = self._last_preemption(runtime, pod.namespace, group)
        return pod_group_section(
            group,
            self.cache.objects.get(POD_GROUP, group, pod.namespace),
            state,
            waiting=waiting,
            pre_enqueue=verdict,
            placements=tried.to_json() if tried is not None else None,
            preemption=preemption,
            victim_states=[] if preemption is None else [self._victim_state(uid) for _, uid in preemption.victims],
        )

    @staticmethod
    def _last_preemption(runtime: ProfileRuntime | None, namespace: str, group: str) -> PodGroupPreemption | None:
        """The victims of the group's last workload-aware preemption in its profile, if any."""
        if runtime is None:
            return None
        for plugin in runtime.framework.pod_group_post_filter_plugins:
            found = plugin.last_preemption(namespace, group)
            if found is not None:
                return found
        return None

    def _victim_state(self, uid: str) -> str:
        """Where a victim is now: ``gone``, ``terminating`` or ``running`` (still in the way)."""
        victim = self.cache.pod(uid) or self.unassigned.get(uid)
        if victim is None:
            return "gone"
        return "terminating" if victim.terminating else "running"

    # -- profiles ------------------------------------------------------------------------------------
    def apply_profile(self, *, name: str, spec: dict[str, Any] | None, generation: int = 0) -> ProfileOutcome:
        """Validate and build a profile's pipeline and swap it in; on error the old pipeline keeps serving."""
        try:
            model = SchedulerProfileSpec.model_validate(spec or {})
            resolved = resolve_profile(name, model, self.registry)
            extenders = self._build_extenders(model)
            framework = Framework(
                resolved,
                registry=self.registry,
                handle=self._handle(name),
                nominator=self.nominator,
                observe_plugin=self.metrics.observe_plugin,
                extenders=extenders,
                search_start=self.search_start,
            )
        except Exception as e:  # nothing a user applies may crash the operator
            message = str(e) or type(e).__name__
            kept = " (the previous valid pipeline keeps serving)" if name in self.profiles else ""
            logger.warning("SchedulerProfile %s is invalid: %s%s", name, message, kept)
            return ProfileOutcome(False, "InvalidProfile", message + kept)
        runtime = self.profiles.get(name)
        if runtime is None:
            runtime = self._new_runtime(name, framework, resolved, extenders)
            self.profiles[name] = runtime
            self._profiles_changed()
            self.watch.adopt_pending_pods(runtime)
        else:
            runtime.framework = framework
            runtime.resolved = resolved
            runtime.extenders = extenders
            # New PreEnqueue and event registrations; and a new pipeline may accept pods the old one
            # rejected, so every parked pod gets another try.
            runtime.queue.reconfigure(
                pre_enqueue=runtime.pre_enqueue,
                plugin_events=events_for_framework(framework),
                pod_groups=framework.workload_aware,
            )
            runtime.queue.move_all_to_active_or_backoff(PROFILE_CHANGED)
        runtime.generation = generation
        runtime.explain_successes = model.explain.successes
        runtime.explain_annotations = model.explain.annotations
        left_out = resolved.omitted_defaults
        note = f"; default plugins not implemented yet, left out: {', '.join(left_out)}" if left_out else ""
        if framework.workload_aware and not self.workload_api_served:
            note += WORKLOAD_API_NOT_SERVED
        return ProfileOutcome(
            True, "PipelineBuilt", f"pipeline built from generation {generation}{note}", pipeline_status(resolved)
        )

    async def profile_changed(self, *, name: str, spec: dict[str, Any] | None, generation: int = 0) -> ProfileOutcome:
        """A SchedulerProfile created, changed or resumed: :meth:`apply_profile`, once the discovery of the optional
        APIs has run (its Ready message says whether a workload-aware profile finds the workload API served)."""
        await self.watch.discover()
        return self.apply_profile(name=name, spec=spec, generation=generation)

    def _handle(self, name: str) -> ProfileHandle:
        return ProfileHandle(
            name,
            client=lambda: self.client,
            cache=self.cache,
            unassigned=self.unassigned,
            profiles=self.profiles,
            nominator=self.nominator,
            record_event=self.reporter.record_event,
            status_settled=self.reporter.status_settled,
            jobs=self.jobs,
            metrics=self.metrics,
        )

    def _build_extenders(self, model: SchedulerProfileSpec) -> tuple[Extender, ...]:
        """The profile's HTTP extenders over the injected transport (``kube/extender_http.py`` in the operator)."""
        if not model.extenders:
            return ()
        if self.extender_transport is None:
            raise ValueError("extenders: this process has no HTTP transport for extenders")
        return build_extenders(model.extenders, self.extender_transport, on_error=self.metrics.extender_error)

    def _new_runtime(
        self, name: str, framework: Framework, resolved: ResolvedProfile, extenders: tuple[Extender, ...] = ()
    ) -> ProfileRuntime:
        runtime = ProfileRuntime(name, framework, resolved, extenders)
        runtime.queue = SchedulingQueue(
            less=runtime.less,
            pre_enqueue=runtime.pre_enqueue,
            plugin_events=events_for_framework(framework),
            initial_backoff=self.settings.pod_initial_backoff_seconds,
            max_backoff=self.settings.pod_max_backoff_seconds,
            max_in_unschedulable=self.settings.pod_max_in_unschedulable_pods_duration,
            clock=self.clock,
            on_incoming=self.metrics.queue_incoming,
            pod_groups=framework.workload_aware,
        )
        return runtime

    def remove_profile(self, name: str) -> None:
        """The pipeline goes; its pending pods stay pending (and stay known, should it come back), but hold no
        nominated place any more: nothing will schedule them there (a profile that comes back re-reads their
        ``status.nominatedNodeName``); nor are they their pod groups' members (one that comes back adds them)."""
        runtime = self.profiles.pop(name, None)
        if runtime is not None:
            runtime.queue.close()
            self.watch.disown_pending_pods(name)
        self.metrics.forget_profile(name)
        self._profiles_changed()

    # -- watch events and the reconciling LIST (eventhandlers.py) -------------------------------------
    def on_node_event(self, event_type: str | None, obj: dict[str, Any]) -> None:
        if event_type is None:
            self._listed_at = self.clock()
        self.watch.on_node_event(event_type, obj)

    def on_pod_event(self, event_type: str | None, obj: dict[str, Any]) -> None:
        if event_type is None:
            self._listed_at = self.clock()
        self.watch.on_pod_event(event_type, obj)

    def kopf_is_listing(self) -> bool:
        """kopf handed over a listed pod or node within the last LISTING_QUIET_SECONDS."""
        return self.clock() - self._listed_at < LISTING_QUIET_SECONDS

    def on_watch_event(self, kind: str, event_type: str | None, obj: dict[str, Any]) -> None:
        """A watch event of any watched kind (``watched.py``), through the feed its row names. kopf's pod and node
        events take :meth:`on_pod_event` and :meth:`on_node_event` (the hot path: no lookup by kind)."""
        if event_type is None and kind in _LISTED_KINDS:
            self._listed_at = self.clock()
        self.watch.on_watch_event(kind, event_type, obj)
        if kind == COSCHEDULING_POD_GROUP:
            meta = obj.get("metadata") or {}
            self.coscheduling_status.touch(meta.get("namespace") or "", meta.get("name") or "")

    async def ensure_reconciled(self) -> None:
        await self.watch.ensure_reconciled()

    @property
    def workload_api_served(self) -> bool:
        """The API server serves upstream's workload-aware scheduling API (scheduling.k8s.io/v1alpha2 Workload and
        PodGroup), as the discovery before the first reconciling LIST found (``EventHandlers.discover``); False
        until then."""
        served = self.watch.served_optional or frozenset()
        return all(kind in served for kind in WORKLOAD_API_KINDS)

    # -- pauses and kopf's watches (standby.py) ------------------------------------------------------
    def follow_pauses(self, paused: PauseToggle) -> None:
        """From now on the cache follows the cluster whenever ``paused`` is on (once; later calls do nothing)."""
        if self._standby_task is None:
            self._standby_task = asyncio.ensure_future(self.standby.run(paused))

    async def version_for_watch(self, path: str) -> str | None:
        """kopf is about to watch ``path`` (its replica resumed or started): the standby stops following, and the
        watch starts where the cache is, if our LIST or stream can stand in for kopf's LIST
        (``EventHandlers.version_for_watch``)."""
        await self.standby.hand_over()
        if self._renewer is not None:
            self._renewer.nudge()  # confirm the standing now: the loops bind once it is
        return await self.watch.version_for_watch(path)

    # -- the renew-deadline gate (standing.py) ------------------------------------------------------
    def start_standing(self) -> None:
        """Renew this replica's peering record every retry period from now on (once; with peering only)."""
        if self.standing.enabled and self.identity is not None and self._renewer_task is None:
            renewer = PeeringRenewer(
                self.standing,
                client=lambda: self.client,
                name=self.settings.peering_name,
                identity=self.identity,
                priority=self.settings.peering_priority,
                refresh=self._refresh_view,
                clock=self.clock,
            )
            self._renewer = renewer
            self._renewer_task = asyncio.ensure_future(renewer.run())

    async def _refresh_view(self) -> None:
        """The view after a lapse of the standing: a reconciling LIST (what another replica bound meanwhile), unless
        the replica is paused, where the warm standby's streams keep the cache."""
        if self.standby.paused:
            return
        self.watch.invalidate()
        await self.watch.ensure_reconciled()

    # -- the scheduling loop -------------------------------------------------------------------------
    async def run_profile(self, name: str, *, stopped: Callable[[], bool], poll: float = 0.5) -> None:
        """One profile's loop; returns when ``stopped()`` (kopf pauses the daemon, or stops it as the profile goes)."""
        if self._running_loops == 0:
            self.coscheduling_status.resync()  # this replica just became the active one
        self._running_loops += 1
        try:
            await self.watch.ensure_reconciled()
            last_flush = last_leftover = self.clock()
            listing_turn = False
            while not stopped():
                self._loop_turns[name] = self.clock()
                runtime = self.profiles.get(name)
                if runtime is None:
                    # kopf spawns the daemon before the create/resume handler has built the pipeline, and an
                    # invalid new profile has none until it is fixed: wait for it. kopf stops the daemon when
                    # the profile is deleted (returning here would end the loop for good).
                    await asyncio.sleep(poll)
                    continue
                now = self.clock()
                if in_a_new_window(last_flush, now):
                    runtime.queue.flush_backoff_completed()
                    self._publish_pending()
                    self.coscheduling_status.flush()
                    last_flush = now
                if now - last_leftover >= 30.0:
                    runtime.queue.flush_unschedulable_leftover()
                    last_leftover = now
                if self.kopf_is_listing() and not listing_turn:
                    # The loop is kopf's while it hands over a LIST, but for one cycle after each pause: the
                    # cache is complete already (ours was listed first), so the first pods bind at once.
                    await asyncio.sleep(LISTING_QUIET_SECONDS / 5)
                    listing_turn = True
                    continue
                listing_turn = False
                client = self.client
                if client is not None and client.writes_backlogged():
                    # Backpressure: no cycle while its writes would only queue (each waiting binding cycle
                    # holds its pod's cycle state; 1600 of them were +120 MiB at SchedulingBasic 5000).
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(poll):
                            await client.write_room()
                    continue
                if not self.standing.may_bind():
                    # No cycle on a standing that is not confirmed, or on a view not refreshed since it lapsed.
                    await asyncio.sleep(poll)
                    continue
                qpod = runtime.queue.pop_nowait()
                if qpod is None:
                    # QueueClosedError: the profile was deleted meanwhile; kopf is about to stop this daemon.
                    with contextlib.suppress(TimeoutError, QueueClosedError):
                        timeout = min(poll, until_next_window(self.clock()))
                        qpod = await asyncio.wait_for(runtime.queue.pop(), timeout=timeout)
                    if qpod is None:
                        continue
                cycle = self.cycles.schedule_one(runtime, qpod)
                if cycle is not None:  # a profile with extenders: the cycle awaits their HTTP calls
                    await cycle
                # Let watch events, binds and reports run between cycles (each cycle is short, synchronous).
                await asyncio.sleep(0)
        finally:
            # A pause invalidates the cache and the standby follows the cluster from then on (standby.py); a
            # loop stopped for its profile's deletion leaves kopf's watches running and the cache whole.
            self._running_loops -= 1
            self._loop_turns.pop(name, None)

    def _publish_pending(self) -> None:
        """scheduler_pending_pods has no profile label (as upstream): publish the sum over all queues."""
        totals: dict[str, int] = {}
        for runtime in self.profiles.values():
            for queue, count in runtime.queue.pending_pods().items():
                totals[queue] = totals.get(queue, 0) + count
        self.metrics.set_pending(totals)
        self.metrics.set_cache_size(self.cache.sizes())
        now = self.clock()
        for name, runtime in self.profiles.items():
            self.metrics.set_unschedulable(name, runtime.queue.unschedulable_plugins())
            oldest = runtime.queue.oldest_failed_attempt()
            self.metrics.set_longest_waiting(name, 0.0 if oldest is None else now - oldest)

    # -- background tasks (binding cycles, reports) --------------------------------------------------
    def spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for in-flight binds, reports and plugin jobs (shutdown; tests)."""
        while self._tasks or self.jobs.pending:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
            await self.jobs.wait()

    async def shutdown(self) -> None:
        """Graceful shutdown: cancel the plugins' jobs (a preemption cut short is retried by the next
        leader: its victims are still there, or already gone), then wait for binds and reports."""
        self._shutting_down = True
        if self._renewer_task is not None:  # before kopf removes our record: the renewer must not write after it
            self._renewer_task.cancel()
            await asyncio.wait([self._renewer_task])
        if self._standby_task is not None:
            self._standby_task.cancel()
            await asyncio.wait([self._standby_task])
        await self.jobs.cancel()
        await self.drain()

    # -- health (health.py; served on the metrics port) ------------------------------------------------
    def health_checks(self) -> HealthChecks:
        """kube-scheduler's paths and checks, where ours look at what theirs do (see :mod:`kopf_scheduler.health`)."""
        loops = HealthCheck("scheduling-loops", self._loops_turning)
        readyz = [
            HealthCheck("shutdown", self._not_shutting_down),
            HealthCheck("sched-handler-sync", self._handlers_synced),
            loops,
            HealthCheck("peering", self._peering_state),
        ]
        return {"healthz": [PING, loops], "livez": [PING], "readyz": readyz}

    def _not_shutting_down(self) -> Health:
        return Health(False, "process is shutting down") if self._shutting_down else HEALTHY

    def _handlers_synced(self) -> Health:
        """The first reconciling LIST is in the cache (upstream: every informer's initial list delivered). A
        ``delayCacheUntilActive`` standby lists nothing, so it is not ready until it is active, as upstream."""
        return HEALTHY if self.watch.synced_once else Health(False, "handlers are not fully synchronized")

    def _loops_turning(self) -> Health:
        """Every running profile loop turned within LOOP_STALL_SECONDS (a loop turns at least every half second
        when idle; a cycle is milliseconds, an extender's call at most its timeout)."""
        now = self.clock()
        stalled = sorted(name for name, turned in self._loop_turns.items() if now - turned > LOOP_STALL_SECONDS)
        if stalled:
            limit = f"{LOOP_STALL_SECONDS:.0f} s"
            return Health(False, f"the scheduling loop of {', '.join(stalled)} has not turned for {limit}")
        return HEALTHY

    def _peering_state(self) -> Health:
        """Always passes; says whether this replica schedules (active) or stands by."""
        return Health(True, "standby" if self.standby.paused else "active")
