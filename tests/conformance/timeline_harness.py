"""Timeline conformance of workload-aware (gang) scheduling: each scheduler on its own cluster, binding for real.

Why not :mod:`tests.conformance.runner`'s design: it compares one pod at a time on one cluster, upstream's
bindings denied so that both decide on the same state. A gang cannot be judged like that: its members wait at
PreEnqueue for each other, its pod-group cycle places all of them at once, and what a gang does next depends on
what was really bound before (a late member joins a scheduled gang; a node added wakes an unschedulable one).
So here (issue 37, item 1: multi-step timelines) each side gets a light control plane of its own (etcd +
kube-apiserver serving scheduling.k8s.io/v1alpha2 with the four gates, ``tools/localcluster.py``), and one
scheduler that binds for real:

- upstream: kube-scheduler v1.36.3 started with ``--feature-gates=GenericWorkload=true,GangScheduling=true,
  TopologyAwareWorkloadScheduling=true,WorkloadAwarePreemption=true`` (gates are process-wide there), with one
  profile per compared SchedulerProfile written out so both sides run the same plugin set
  (:func:`oracle_profile`: with the gates on, upstream's default profile gains GangScheduling,
  TopologyPlacementGenerator and PodGroupPodsCount; the ones our profile does not enable are disabled);
- ours: ``kopf-scheduler run`` as a real process hosting the same profiles as SchedulerProfiles.

A :class:`~tests.conformance.gang_timelines.Timeline` is played step by step, the same API actions on both
clusters in the same order. After each step the harness waits until both clusters are quiet (no change of the
compared state for :data:`QUIET` seconds) and compares the state (:meth:`Side.snapshot`; timeline_state.py): for
every pod, bound where or waiting with which PodScheduled condition (status, reason, message byte for byte) and
which nomination; for every PodGroup, its conditions. A step that adds nodes first waits until both schedulers' caches
hold exactly the cluster's nodes (a probe pod's ``0/N nodes are available``), so no pod meets a cache that lags.

Determinism. Pods of one class (the members of one gang) are interchangeable: their outcomes are compared as a
multiset, and so are the pods gone on one side only. Upstream breaks score ties at random; its per-node scores
(``-v=2 --vmodule=schedule_one=10``) give, for each pod it bound, its highest-score set, and its placement scores
(``schedule_one_podgroup=10``) the placements it scored alike for a gang (gang_ties.py). When the step's first
differing pod (in creation order) only went to another node of upstream's highest-score set, or its gang into
another of the tied placements, the step diverged on a tie broken the other way (what follows in a burst may
follow from it), not a disagreement: the timeline is then not compared further (its states may rightly differ
from there on) and counts as ``diverged on a tie``. Nor after a disagreement: later steps would only echo it.
Upstream also tries a gang's placements in random order and words an unschedulable gang's members after the
first one, and may retry such a gang without end: a step where only pods' messages keep changing settles after
:data:`~tests.conformance.gang_ties.CHURN` seconds, and ours must show one of the states upstream cycled
through. A difference is judged after
a second quiet period :data:`RECHECK` seconds later (longer than the longest backoff), so a pod that a backoff
holds a moment longer on one side is not reported.

When the timeline preempts, a kubelet stand-in gives pods bound in a step distinct start times, in name order
on both sides (preemption's tie-breaks read start times), and each action of a step waits for quiet: a
preemptor's victims go asynchronously, so a pod created right after it may or may not meet them gone, upstream
against itself as well (seen on seed 336099 with the switches on).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from kopf_scheduler.api.profile import SchedulerProfileSpec
from kopf_scheduler.framework.builder import resolve_profile
from kopf_scheduler.plugins.registry import default_registry
from tests.conformance import gang_known, timeline_objects, timeline_replay
from tests.conformance.gang_ties import (
    CHURN,
    churn_explains,
    structure_key,
    tied_placements,
    top_placements_from_log,
)
from tests.conformance.gang_timelines import (
    GANG_PRIORITY_CLASSES,
    Action,
    Step,
    Timeline,
)
from tests.conformance.oracle import LOG_FLAGS, LogCursor, scheduler_config
from tests.conformance.runner import ProfileDef, example_profiles
from tests.conformance.timeline_state import (
    Problem,
    State,
    changes,
    compare,
    state_of,
    tie_explains,
    top_sets_from_log,
)
from tests.e2e.operator_process import (
    OperatorProcess,
    apply_crds,
    create_profile,
    metric_value,
    unverified_tls,
    wait_profile_status,
)
from tools.localcluster import LocalCluster, feature_gates_flag

#: The plugins upstream's default profile gains with the gates on (apis/config/v1/default_plugins.go).
GATED_DEFAULTS = ("GangScheduling", "TopologyPlacementGenerator", "PodGroupPodsCount")
#: A profile enabling one of these is workload-aware (upstream with the four gates is its oracle).
WORKLOAD_PLUGINS = frozenset(GATED_DEFAULTS)
#: Upstream's log: per-node scores (schedule_one.go), bindings, and its placements' scores (gang_ties.py).
UPSTREAM_FLAGS = (LOG_FLAGS[0], f"{LOG_FLAGS[1]},default_binder=3,schedule_one_podgroup=10", feature_gates_flag())
#: Upstream for the default profile (default_timelines.py): v1.36.3's own feature gates, nothing turned on.
DEFAULT_UPSTREAM_FLAGS = UPSTREAM_FLAGS[:2]
#: The sub-queues of ``scheduler_pending_pods`` a settled scheduler has emptied (every pod retried is done).
BUSY_QUEUES = ("active", "backoff")
#: Seconds without any change of the compared state (both sides) before a step counts as settled.
QUIET = 2.5
#: The same for default-profile timelines, which also wait for both schedulers' active and backoff queues to empty.
DEFAULT_QUIET = 1.5
#: A step never waits longer than this to settle (a scheduler that never settles is reported).
SETTLE_TIMEOUT = 60.0
#: Before a difference is reported: one more settle after this long (upstream's longest backoff is 10 s).
RECHECK = 11.0
POLL = 0.25
#: Upstream's log is emptied between timelines beyond this size (bytes).
LOG_LIMIT = 50 * 2**20
PODGROUPS = ("scheduling.k8s.io", "v1alpha2", "podgroups")
PROBE_SELECTOR = {"conformance.kopf-scheduler.io/probe": "nowhere"}
#: Seconds a probe may take to read the cluster's node count before a fresh probe replaces it.
PROBE_PATIENCE = 5.0
#: Seconds until the schedulers must hold the cluster's nodes (through fresh probes).
SYNC_TIMEOUT = 60.0

Log = Callable[[str], None]


# -- profiles ---------------------------------------------------------------------------------------------
def is_workload_aware(profile: ProfileDef) -> bool:
    spec = SchedulerProfileSpec.model_validate(dict(profile.spec))
    return bool(WORKLOAD_PLUGINS & set(resolve_profile(profile.name, spec, default_registry()).plugin_names()))


def workload_aware_profiles() -> list[ProfileDef]:
    """The examples' workload-aware SchedulerProfiles (e.g. examples/gang-scheduling.yaml)."""
    return [p for p in example_profiles() if is_workload_aware(p)]


def oracle_profile(profile: ProfileDef, scheduler_name: str | None = None) -> dict[str, Any]:
    """Upstream's profile (gates on) with the plugin set of ours: the gated defaults ours lacks disabled."""
    spec = SchedulerProfileSpec.model_validate(dict(profile.spec))
    ours = set(resolve_profile(profile.name, spec, default_registry()).plugin_names())
    body = profile.upstream()
    body["schedulerName"] = scheduler_name or profile.name
    missing = [name for name in GATED_DEFAULTS if name not in ours]
    if missing:
        disabled = body.setdefault("plugins", {}).setdefault("multiPoint", {}).setdefault("disabled", [])
        present = {entry.get("name") for entry in disabled}
        disabled.extend({"name": name} for name in missing if name not in present)
    return body


# -- one side ---------------------------------------------------------------------------------------------
class Side:
    """One light control plane and the scheduler that binds on it."""

    def __init__(self, name: str, work_dir: Path | None) -> None:
        self.name = name
        self.work_dir = work_dir
        self.cluster: LocalCluster | None = None
        self.started_pods = 0

    def start_cluster(self) -> None:
        self.cluster = LocalCluster("light", work_dir=self.work_dir / "cluster" if self.work_dir else None).start()
        self.api = self.cluster.api_client()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        for name, value in GANG_PRIORITY_CLASSES.items():
            body = {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
            with contextlib.suppress(ApiException):
                client.SchedulingV1Api(self.api).create_priority_class(body)

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None

    def alive(self) -> bool:
        return self.cluster is not None and not self.cluster.dead_components()

    # -- actions ---------------------------------------------------------------------------------------
    def ensure_namespace(self, namespace: str) -> None:
        with contextlib.suppress(ApiException):
            self.core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})

    def apply(self, action: Action, namespace: str) -> str | None:
        """Perform one action; the API server's refusal, if any, as text (both sides must refuse alike)."""
        try:
            if action.verb == "create":
                assert action.body is not None
                self._create(action.kind, action.body, namespace)
            elif action.verb == "patch":
                assert action.body is not None
                timeline_objects.patch(self.api, action.kind, action.name, action.body["operations"], namespace)
            else:
                self._delete(action.kind, action.name, namespace)
        except ApiException as e:
            return f"{action.describe()}: {e.status} {e.reason}"
        return None

    def _create(self, kind: str, body: dict[str, Any], namespace: str) -> None:
        if kind == "Node":
            self.core.create_node(body)
        elif kind == "Pod":
            self.core.create_namespaced_pod(namespace, body)
        elif kind == "PodGroup":
            self.custom.create_namespaced_custom_object(*PODGROUPS[:2], namespace, PODGROUPS[2], body)
        else:
            timeline_objects.create(self.api, kind, body, namespace)

    def _delete(self, kind: str, name: str, namespace: str) -> None:
        if kind == "Node":
            self.core.delete_node(name)
        elif kind == "Pod":
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        elif kind == "PodGroup":
            self.custom.patch_namespaced_custom_object(
                *PODGROUPS[:2], namespace, PODGROUPS[2], name, {"metadata": {"finalizers": None}}
            )
            self.custom.delete_namespaced_custom_object(*PODGROUPS[:2], namespace, PODGROUPS[2], name)
        else:
            timeline_objects.delete(self.api, kind, name, namespace)

    # -- state -----------------------------------------------------------------------------------------
    def snapshot(self, namespace: str) -> State:
        pods = json.loads(self.core.list_namespaced_pod(namespace, _preload_content=False).data)["items"]
        groups = self.custom.list_namespaced_custom_object(*PODGROUPS[:2], namespace, PODGROUPS[2])["items"]
        return state_of(pods, groups)

    def node_count(self) -> int:
        return len(self.core.list_node().items)

    def metrics_text(self) -> str:
        raise NotImplementedError

    def queues_busy(self) -> int:
        """Pods in the scheduler's active and backoff queues (``scheduler_pending_pods``): 0 once settled."""
        text = self.metrics_text()
        return round(sum(metric_value(text, "scheduler_pending_pods", queue=q) for q in BUSY_QUEUES))

    def give_start_times(self, namespace: str) -> None:
        """The kubelet stand-in: bound pods without a start time get the next one, in name order."""
        pods = json.loads(self.core.list_namespaced_pod(namespace, _preload_content=False).data)["items"]
        base = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
            if (pod.get("spec") or {}).get("nodeName") and not (pod.get("status") or {}).get("startTime"):
                self.started_pods += 1
                stamp = (base + datetime.timedelta(seconds=self.started_pods)).strftime("%Y-%m-%dT%H:%M:%SZ")
                with contextlib.suppress(ApiException):
                    self.core.patch_namespaced_pod_status(
                        pod["metadata"]["name"], namespace, {"status": {"startTime": stamp}}
                    )

    def cleanup(self, timeline: Timeline) -> None:
        namespace = timeline.namespace
        with contextlib.suppress(ApiException):
            self.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        with contextlib.suppress(ApiException):
            for group in self.custom.list_namespaced_custom_object(*PODGROUPS[:2], namespace, PODGROUPS[2])["items"]:
                self._delete("PodGroup", group["metadata"]["name"], namespace)
        timeline_objects.cleanup(self.api, timeline.seed, namespace)
        for node in self.core.list_node().items:
            with contextlib.suppress(ApiException):
                self.core.delete_node(node.metadata.name)


class UpstreamSide(Side):
    def start(self, profiles: Sequence[ProfileDef], workload_aware: bool = True) -> None:
        """``workload_aware``: the four gates on (gang timelines); else v1.36.3's defaults, profiles as written."""
        self.start_cluster()
        assert self.cluster is not None
        if workload_aware:
            config = scheduler_config(oracle_profile(p) for p in profiles)
        else:
            config = scheduler_config({**p.upstream(), "schedulerName": p.name} for p in profiles)
        flags = UPSTREAM_FLAGS if workload_aware else DEFAULT_UPSTREAM_FLAGS
        self.component = self.cluster.start_kube_scheduler(config, extra_args=flags)
        self.log = LogCursor(self.component.log_path)

    def metrics_text(self) -> str:
        url = f"https://127.0.0.1:{self.component.ports['secure']}/metrics"
        with urllib.request.urlopen(url, timeout=5, context=unverified_tls()) as response:
            return str(response.read().decode())


class OurSide(Side):
    def start(self, profiles: Sequence[ProfileDef], operator_args: Sequence[str] = ()) -> None:
        self.start_cluster()
        assert self.cluster is not None
        apply_crds(self.api)
        log_dir = (self.work_dir / "logs") if self.work_dir else self.cluster.work_dir / "logs"
        self.operator = OperatorProcess(
            self.cluster.kubeconfig,
            peering_name="conformance",
            log_dir=log_dir,
            name="kopf-scheduler",
            extra_args=operator_args,
        ).start()
        for profile in profiles:
            create_profile(self.api, profile.name, profile.spec)
        for profile in profiles:
            wait_profile_status(self.api, profile.name, ready=True, timeout=60)

    def alive(self) -> bool:
        return super().alive() and self.operator.alive()

    def metrics_text(self) -> str:
        return self.operator.metrics_text()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.operator.stop()
        super().stop()


# -- results ----------------------------------------------------------------------------------------------
@dataclass
class StepResult:
    index: int
    label: str
    problems: list[str]
    upstream: dict[str, Any]
    ours: dict[str, Any]
    #: The difference is a tie upstream broke the other way (the timeline stops being compared there).
    tie: bool = False
    #: The API server refused an action (the same on both sides, or that is a problem too).
    refused: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: Differences a feature not yet on main explains ("[Feature] text"; gang_known.py).
    pending: list[str] = field(default_factory=list)
    #: The first run's differences, when upstream, replayed alone from the start, reached our states up to this
    #: step on replay :attr:`upstream_replay` (timeline_replay.py): its own outcome, so no disagreement.
    replayed: list[str] = field(default_factory=list)
    upstream_replay: int | None = None

    @property
    def agree(self) -> bool:
        return not self.problems


@dataclass
class TimelineResult:
    seed: int
    profile: str
    features: list[str]
    description: str
    steps: list[StepResult]
    seconds: float
    diverged_on_tie: int | None = None
    error: str | None = None

    @property
    def agree(self) -> bool:
        return self.error is None and all(s.agree for s in self.steps)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["agree"] = self.agree
        return data


# -- the harness ------------------------------------------------------------------------------------------
class TimelineHarness:
    """Two light control planes, upstream (gates on) on one and the operator on the other; plays timelines."""

    def __init__(
        self,
        profiles: Sequence[ProfileDef],
        *,
        work_dir: Path | None = None,
        log: Log = print,
        operator_args: Sequence[str] = (),
        pending: frozenset[str] = gang_known.PENDING,
        recheck: bool = True,
        workload_aware: bool = True,
        replays: int = timeline_replay.REPLAYS,
    ) -> None:
        if not profiles:
            raise ValueError("no profiles to compare")
        #: Gang timelines: upstream with the four workload-aware gates; else (default_timelines.py) without,
        #: and a step settles only once both schedulers' active and backoff queues are empty too.
        self.workload_aware = workload_aware
        #: The seed whose PVs the PV controller stand-in binds while settling (None: the timeline has none).
        self._volumes_seed: int | None = None
        #: The features whose absence explains a difference (gang_known.PENDING unless a test says otherwise).
        self.pending = pending
        #: Judge a disagreement again after :data:`RECHECK` seconds (off: a quick run reports it at once).
        self.recheck = recheck
        self.recheck_seconds = RECHECK
        #: How often upstream is replayed alone when a step disagrees (timeline_replay.py; 0: never).
        self.replays = replays
        self.profiles = list(profiles)
        self.log = log
        self.upstream = UpstreamSide("upstream", work_dir / "upstream" if work_dir else None)
        self.ours = OurSide("ours", work_dir / "ours" if work_dir else None)
        self.operator_args = tuple(operator_args)
        self._probes = 0
        #: The states upstream cycled through in the last settle whose messages never settled (gang_ties.py).
        self.upstream_variants: list[State] = []
        #: The last step's settled states (upstream, ours).
        self.last_states: tuple[State, ...] = ()
        #: Our settled state after each step of the last timeline played (timeline_replay.py compares with them).
        self.ours_states: list[State] = []

    def __enter__(self) -> TimelineHarness:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        started = time.monotonic()
        # One after the other, in this thread: the children die with the thread that spawned them
        # (PR_SET_PDEATHSIG), so a helper thread would take its control plane with it when it ends.
        try:
            self.upstream.start(self.profiles, self.workload_aware)
            self.ours.start(self.profiles, self.operator_args)
        except BaseException:
            self.stop()
            raise
        self.log(
            f"timeline harness ready in {time.monotonic() - started:.1f}s: profiles "
            f"{', '.join(p.name for p in self.profiles)}; upstream log {self.upstream.component.log_path}; "
            f"operator log {self.ours.operator.log_path}"
        )

    def stop(self) -> None:
        for side in (self.ours, self.upstream):
            with contextlib.suppress(Exception):
                side.stop()

    @property
    def sides(self) -> tuple[Side, Side]:
        return self.upstream, self.ours

    # -- playing a timeline ----------------------------------------------------------------------------
    def run_timeline(self, timeline: Timeline) -> TimelineResult:
        started = time.monotonic()
        result = TimelineResult(timeline.seed, timeline.profile, timeline.features, timeline.describe(), [], 0.0)
        for side in self.sides:
            side.ensure_namespace(timeline.namespace)
        self._volumes_seed = timeline.seed if "volumes" in timeline.features else None
        ours: list[State] = []
        self.ours_states = ours
        try:
            for index, step in enumerate(timeline.steps):
                step_result = self._play(timeline, index, step)
                result.steps.append(step_result)
                ours.append(self.last_states[1])
                if step_result.tie:
                    result.diverged_on_tie = index
                    break
                if step_result.problems and not timeline_replay.explain(self, timeline, step_result, ours):
                    break  # the states differ from here on: later steps would only echo it
        except Exception as e:  # one broken timeline must not end the run
            result.error = f"{type(e).__name__}: {e}"
        finally:
            for side in self.sides:
                with contextlib.suppress(Exception):
                    side.cleanup(timeline)
            # The next timeline's first step waits until both caches hold exactly its nodes (no probe here: with
            # no node at all the probe's text is another one).
            self._trim_upstream_log()
        result.seconds = round(time.monotonic() - started, 1)
        return result

    def _play(self, timeline: Timeline, index: int, step: Step) -> StepResult:
        started = time.monotonic()
        mark = self.upstream.log.mark()
        refused = self.apply_step(timeline, step, self.sides)
        upstream, ours = self.settle(timeline.namespace)
        problems = self.differences(upstream, ours)
        if any(not p.pending for p in problems) and self.recheck:
            time.sleep(RECHECK)  # judged again after the longest backoff, so timing alone is not reported
            upstream, ours = self.settle(timeline.namespace)
            problems = self.differences(upstream, ours)
        self.last_states = (upstream, ours)
        if refused["upstream"] != refused["ours"]:
            problems.append(Problem(f"the API servers refused differently: {refused}"))
        tie = False
        if any(not p.pending for p in problems):
            self.upstream.log.offset = mark
            created = [a.name for a in step.actions if a.kind == "Pod" and a.verb == "create"]
            lines = list(self.upstream.log.since())
            tops = top_sets_from_log(lines, timeline.namespace)
            placements = tied_placements(timeline, index, top_placements_from_log(lines, timeline.namespace))
            tie = tie_explains(upstream, ours, problems, tops, created, placements)
        if timeline.needs_start_times:
            for side in self.sides:
                side.give_start_times(timeline.namespace)
        return StepResult(
            index,
            step.label,
            [] if tie else [p.text for p in problems if not p.pending],
            upstream.summary(),
            ours.summary(),
            tie=tie,
            refused=refused["upstream"],
            seconds=round(time.monotonic() - started, 1),
            pending=[f"[{', '.join(p.pending)}] {p.text}" for p in problems if p.pending],
        )

    def apply_step(self, timeline: Timeline, step: Step, sides: Sequence[Side]) -> dict[str, list[str]]:
        """Perform a step's actions on ``sides`` (then sync their nodes if the step asks); the refusals per side."""
        refused: dict[str, list[str]] = {side.name: [] for side in self.sides}
        for number, action in enumerate(step.actions):
            if number and timeline.needs_start_times:
                # A preempting pod's victims go asynchronously, and a pod created meanwhile may or may not meet
                # them gone, even upstream against itself: with preemption, every action waits for quiet.
                self.settle(timeline.namespace, sides)
            for side in sides:
                error = side.apply(action, timeline.namespace)
                if error:
                    refused[side.name].append(error)
        if step.node_sync:
            self._sync_nodes(timeline.namespace, timeline.profile, sides)
        return refused

    def differences(self, upstream: State, ours: State) -> list[Problem]:
        """The differences, but for a class whose outcomes upstream showed while its messages never settled."""
        variants = self.upstream_variants
        if variants:
            self.log(f"upstream's messages did not settle: {len(variants)} states in {CHURN:.0f}s (gang_ties.py)")
        return [p for p in compare(upstream, ours, self.pending) if not churn_explains(p, ours, variants)]

    def _trim_upstream_log(self) -> None:
        """Empty upstream's log between timelines once it is big: a gang upstream retries in a loop (see the
        report) writes megabytes a second at these verbosities. The file is open for appending, so it goes on."""
        path = Path(self.upstream.component.log_path)
        with contextlib.suppress(OSError):
            if path.stat().st_size > LOG_LIMIT:
                os.truncate(path, 0)
                self.upstream.log.offset = 0

    def settle(self, namespace: str, sides: Sequence[Side] | None = None) -> tuple[State, ...]:
        """The states of ``sides`` (default both, upstream first) once none has changed for :data:`QUIET`
        seconds, or once only pods' PodScheduled messages have changed for
        :data:`~tests.conformance.gang_ties.CHURN` seconds (upstream's random order of placements, gang_ties.py;
        the states upstream cycled through are kept in :attr:`upstream_variants`)."""
        sides = self.sides if sides is None else tuple(sides)
        deadline = time.monotonic() + SETTLE_TIMEOUT
        last: tuple[State, ...] | None = None
        changing: dict[str, list[str]] = {side.name: [] for side in sides}
        stable_since = structure_since = time.monotonic()
        variants: dict[str, State] = {}
        while True:
            states = tuple(side.snapshot(namespace) for side in sides)
            now = time.monotonic()
            if last is None or [s.key() for s in states] != [s.key() for s in last]:
                if last is None or [structure_key(s) for s in states] != [structure_key(s) for s in last]:
                    structure_since, variants = now, {}
                if last is not None:
                    for name, old, new in zip((side.name for side in sides), last, states, strict=True):
                        if old.key() != new.key():
                            changing[name] = changes(old, new)
                last, stable_since = states, now
            variants.setdefault(states[0].key(), states[0])
            if now - stable_since >= (QUIET if self.workload_aware else DEFAULT_QUIET) and self._queues_idle(sides):
                self.upstream_variants = []
                return states
            if now - structure_since >= CHURN:
                self.upstream_variants = list(variants.values())
                return states
            if now > deadline:
                raise TimeoutError(
                    f"the state of {namespace} did not settle within {SETTLE_TIMEOUT:.0f}s; last changes: "
                    + ", ".join(f"{name} {recent[:3]}" for name, recent in changing.items())
                )
            for side in sides:
                if not side.alive():
                    raise RuntimeError(f"{side.name}'s scheduler or control plane died")
                if self._volumes_seed is not None:
                    timeline_objects.stand_in(side.api, self._volumes_seed)
            time.sleep(POLL)

    def _queues_idle(self, sides: Sequence[Side]) -> bool:
        """Default-profile timelines: no pod is active or backing off on ``sides`` (it would be retried yet).
        Gang timelines do not wait so (a gang upstream retries in a loop never leaves the queues)."""
        return self.workload_aware or all(side.queues_busy() == 0 for side in sides)

    def _sync_nodes(self, namespace: str, profile: str, sides: Sequence[Side]) -> None:
        """Wait until the schedulers of ``sides`` hold exactly their cluster's nodes in their caches: a probe pod
        that fits nowhere must be told ``0/N nodes are available`` with N the cluster's node count.

        A probe is judged once against the nodes the scheduler holds at that moment; a node added a moment later
        does not wake it (its node selector matches no node, so the queueing hint skips it), and its message keeps
        the old count until the five-minute flush. So a probe that does not read right within
        :data:`PROBE_PATIENCE` seconds is replaced by a fresh one (seen: upstream judged a probe between the second
        and third node of a step, 0/2 for good)."""
        deadline = time.monotonic() + SYNC_TIMEOUT
        waiting = list(sides)
        said: dict[str, str] = {}
        while waiting:
            self._probes += 1
            name = f"probe-{self._probes}"
            probed = list(waiting)
            for side in probed:
                side.ensure_namespace(namespace)
                side.core.create_namespaced_pod(namespace, _probe(name, profile))
            try:
                for side in probed:
                    message = self._probe_message(side, namespace, name)
                    if message is None:
                        waiting.remove(side)
                    else:
                        said[side.name] = message
            finally:
                for side in probed:
                    with contextlib.suppress(ApiException):
                        side.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            if waiting and time.monotonic() > deadline:
                names = ", ".join(side.name for side in waiting)
                raise TimeoutError(f"{names}'s scheduler did not see the cluster's nodes: probes say {said}")

    def _probe_message(self, side: Side, namespace: str, name: str) -> str | None:
        """None once the probe reads ``0/N nodes are available`` (N: the cluster's nodes); else, after
        :data:`PROBE_PATIENCE` seconds, what it read."""
        deadline = time.monotonic() + PROBE_PATIENCE
        message = ""
        while time.monotonic() < deadline:
            want = f"0/{side.node_count()} nodes are available"
            pod = side.core.read_namespaced_pod(name, namespace)
            for cond in (pod.status.conditions or ()) if pod.status else ():
                if cond.type == "PodScheduled":
                    message = cond.message or ""
            if message.startswith(want):
                return None
            time.sleep(POLL)
        return message


def _probe(name: str, profile: str) -> dict[str, Any]:
    """A pod that fits no node (:data:`PROBE_SELECTOR`), for ``profile``'s scheduler to judge."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"probe": "true"}},
        "spec": {
            "schedulerName": profile,
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": PROBE_SELECTOR,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


def summary(results: Sequence[TimelineResult]) -> dict[str, Any]:
    steps = [s for r in results for s in r.steps]
    return {
        "timelines": len(results),
        "agree": sum(r.agree for r in results),
        "disagree": sum(not r.agree for r in results),
        "errors": sum(r.error is not None for r in results),
        "diverged_on_tie": sum(r.diverged_on_tie is not None for r in results),
        #: Timelines that agree because upstream, replayed alone, reached our states (timeline_replay.py).
        "agree_on_replay": sum(any(st.upstream_replay for st in r.steps) for r in results),
        "steps": len(steps),
        "steps_agree": sum(s.agree for s in steps),
        "steps_pending": sum(bool(s.pending) for s in steps),
        "pending_features": dict(
            sorted(Counter(f for s in steps for p in s.pending for f in p[1 : p.index("]")].split(", ")).items())
        ),
        "pods": sum(len(r.steps[-1].upstream["pods"]) for r in results if r.steps),
        "features": dict(sorted(Counter(f for r in results for f in r.features).items())),
        "seeds": [r.seed for r in results],
    }
