"""One small interface per extension point, as upstream's ``framework/interface.go``.

A plugin is a class deriving from :class:`Plugin` and from the interfaces of the extension points it
implements; the registry reads which ones from the class (``issubclass``), so a profile can only enable
a plugin where it can run.

The hot interfaces are *vectorised*: Filter, PreScore and Score receive ``nodes``, an int64 array of node
table slots (see :mod:`kopf_scheduler.state.node_table`), and answer for all of them at once. Filter answers
with a :class:`FilterResult` (which nodes fail, with which Status); Score with an int64 array aligned with
``nodes``. Plugins that are simpler to write one node at a time derive from :class:`NodeFilterPlugin` /
:class:`NodeScorePlugin` and the adapter loops for them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
from pydantic import BaseModel

from kopf_scheduler.framework.cycle_state import CycleState
from kopf_scheduler.framework.extension_points import ExtensionPoint
from kopf_scheduler.framework.placement import Placement, PlacementScore, PodGroupAssignments, PodGroupInfo
from kopf_scheduler.framework.status import SUCCESS, Status
from kopf_scheduler.framework.verdicts import FilterOutcome, PostFilterResult

if TYPE_CHECKING:
    from kopf_scheduler.framework.events import ClusterEventWithHint
    from kopf_scheduler.framework.extender import Extender
    from kopf_scheduler.state.cache import NodeInfo, Snapshot
    from kopf_scheduler.state.pod_info import PodInfo

#: Upstream score bounds: every Score plugin's output, after NormalizeScore, is in [0, 100].
MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0


# -- what plugins get from the runtime -----------------------------------------------------------------
class APIClient(Protocol):
    """The narrow I/O seam plugins may use (implemented in ``kopf_scheduler.kube``; fakes in tests)."""

    async def bind(
        self, *, namespace: str, name: str, uid: str, node_name: str, annotations: dict[str, str] | None = None
    ) -> None:
        """POST ``pods/<name>/binding``; raises :class:`APIError` on a non-2xx answer."""
        ...

    async def get_pod(self, *, namespace: str, name: str) -> dict[str, Any]:
        """GET a pod (DefaultBinder learns whether a Binding whose answer was lost took effect)."""
        ...

    async def replace_persistent_volume(self, *, body: dict[str, Any]) -> dict[str, Any]:
        """PUT a PersistentVolume (VolumeBinding's PreBind); the object as stored. 409 if ``body`` is stale."""
        ...

    async def replace_persistent_volume_claim(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT a PersistentVolumeClaim (VolumeBinding's PreBind); the object as stored. 409 if stale."""
        ...

    async def patch_pod_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """Strategic-merge PATCH of ``pods/<name>/status`` (preemption: the victim's DisruptionTarget condition,
        clearing a lower-priority pod's ``nominatedNodeName``); ``patch`` is the whole body (``{"status": ...}``)."""
        ...

    async def delete_pod(self, *, namespace: str, name: str, uid: str) -> None:
        """DELETE a pod with a UID precondition (preemption's victims); a 404 is not an error."""
        ...

    async def get_resource_claim(self, *, namespace: str, name: str) -> dict[str, Any]:
        """GET a ResourceClaim (DynamicResources' PreBind re-reads it after a conflict, as upstream's retry)."""
        ...

    async def update_resource_claim(self, *, namespace: str, name: str, claim: dict[str, Any]) -> dict[str, Any]:
        """PUT a ResourceClaim (DynamicResources' PreBind adds the ``resource.kubernetes.io/delete-protection``
        finalizer in a normal update before it writes the allocation); the updated claim."""
        ...

    async def update_resource_claim_status(self, *, namespace: str, name: str, claim: dict[str, Any]) -> dict[str, Any]:
        """PUT ``resourceclaims/<name>/status`` with the whole claim (DynamicResources' PreBind writes
        status.allocation and status.reservedFor, as upstream's UpdateStatus); the updated claim."""
        ...

    async def patch_resource_claim_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Strategic-merge PATCH of ``resourceclaims/<name>/status`` (DynamicResources' rollback and
        deallocation, as upstream's Patch(..., "status")); the updated claim."""
        ...

    async def create_resource_claim(self, *, namespace: str, claim: dict[str, Any]) -> dict[str, Any]:
        """POST a ResourceClaim (DynamicResources' PreBind creates the claim for DRA-backed extended resources,
        named by ``metadata.generateName``); the created claim."""
        ...

    async def delete_resource_claim(self, *, namespace: str, name: str) -> None:
        """DELETE a ResourceClaim (DynamicResources removes its extended-resource claim after a failure)."""
        ...


class APIError(Exception):
    """An API server answer that is not a success; ``status`` is the HTTP code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class StandingLostError(RuntimeError):
    """A Bind refused by the renew-deadline gate (``standing.py``; at the last moment, by the API client): this
    replica's standing in the peering is not confirmed. Nothing was written; the pod goes back to its queue with
    no event (nothing about it was decided)."""


class Handle(Protocol):
    """What the framework hands every plugin at construction (upstream ``framework.Handle``)."""

    @property
    def profile_name(self) -> str: ...

    @property
    def client(self) -> APIClient | None: ...

    def snapshot(self) -> Snapshot: ...

    def pod_exists(self, pod: PodInfo) -> bool:
        """Upstream's pod lister lookup by namespace and name: whether the watches still know the pod (pending,
        assumed or bound); False once its deletion was watched."""
        ...

    def get_pod(self, uid: str) -> PodInfo | None:
        """The latest watched version of a pod (pending, assumed or bound), by uid; None once deleted."""
        ...

    @property
    def nominator(self) -> Nominator:
        """The pods nominated onto nodes, across every profile (upstream's PodNominator of the one queue)."""
        ...

    def activate(self, pods: Iterable[PodInfo]) -> None:
        """Move these pending pods to the active queue now, whichever profile's queue holds them (upstream
        ``Handle.Activate``); unknown or in-flight pods are ignored."""
        ...

    def reject_waiting_pod(self, uid: str, plugin: str = "", message: str = "removed") -> bool:
        """Reject a pod waiting at Permit in any profile (upstream ``RejectWaitingPod``, or with ``plugin`` and
        ``message`` ``GetWaitingPod(uid).Reject(plugin, message)``); True if one waited."""
        ...

    def allow_waiting_pod(self, uid: str, plugin: str) -> bool:
        """Let ``plugin`` release a pod waiting at Permit in any profile (upstream ``GetWaitingPod(uid).Allow``):
        it binds once no plugin holds it any more; True if one waited."""
        ...

    def preempt_waiting_pod(self, uid: str, plugin: str) -> bool:
        """Preempt a pod waiting at Permit in any profile (upstream ``GetWaitingPod(uid).Preempt``): it fails with
        an Error and is retried after backoff, without an API call; True if one waited."""
        ...

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
        """Post an event about a pod (``related``: a second object it involves, a pod or a PodGroup), reported by
        this profile's scheduler name (upstream ``EventRecorder``); fire and forget: a failed POST is logged,
        never raised."""
        ...

    def spawn(self, job: Coroutine[Any, Any, None], *, name: str) -> None:
        """Run API work off the scheduling cycle (upstream's goroutine, e.g. asynchronous preemption); the
        runtime keeps the task, logs an exception it raises, and cancels it at shutdown."""
        ...

    async def pod_status_settled(self, uid: str) -> None:
        """Return once the status writes the scheduler has sent for this pod (its PodScheduled condition and
        ``status.nominatedNodeName``, patched when its attempt failed) are answered; at once if none is pending.
        Preemption evicts its victims after the preemptor's nomination is written (``executor.py``)."""
        ...

    @property
    def metrics(self) -> PluginMetrics:
        """Where plugins record the metrics upstream's plugins record themselves."""
        ...

    @property
    def plugins_runner(self) -> PluginsRunner:
        """The profile's framework as a runner of its plugins (upstream's Handle embeds ``PluginsRunner``):
        preemption's dry run re-runs the profile's filters through it. Set when the pipeline is built."""
        ...

    @property
    def extenders(self) -> Sequence[Extender]:
        """The profile's HTTP extenders, ignorable ones last (upstream ``Handle.Extenders()``); set when the
        pipeline is built."""
        ...


class PipelineHandle(Handle, Protocol):
    """The Handle as the framework sees it: the framework completes it with its runners and extenders once, when
    it builds the profile's pipeline, before it constructs the plugins (upstream's framework *is* the Handle)."""

    def attach_pipeline(self, runner: PluginsRunner, extenders: Sequence[Extender]) -> None: ...


class PluginsRunner(Protocol):
    """What plugins may run of their profile's pipeline (upstream ``PluginsRunner``, which the Handle embeds):
    the Filter step with nominated pods and the PreFilter extensions, for preemption's dry runs."""

    #: Whether the profile enables a workload-aware plugin: it then behaves as upstream with GenericWorkload,
    #: GangScheduling, TopologyAwareWorkloadScheduling and WorkloadAwarePreemption on (our per-profile gates).
    workload_aware: bool

    def run_filter_plugins_with_nominated_pods(
        self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot
    ) -> FilterOutcome:
        """Filter ``nodes`` (slots) with the pods nominated onto them counted (upstream
        ``RunFilterPluginsWithNominatedPods``)."""
        ...

    def pre_filter_extensions_idle(self, state: CycleState) -> bool:
        """Whether no PreFilter extension (AddPod/RemovePod) runs in this cycle, so that pods added to or removed
        from one node change only that node's Filter verdict."""
        ...

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo
    ) -> Status: ...

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo
    ) -> Status: ...


class Nominator(Protocol):
    """Pods nominated onto nodes by preemption (upstream ``PodNominator``), seen by Filter as if running there.

    The scheduling queue implements it (:class:`kopf_scheduler.queue.nominator.PodNominator`, one for every
    profile); :class:`NoNominator` answers that nothing is nominated, and the Filter step then takes its single
    vectorised pass.
    """

    def nodes_with_nominated_pods(self) -> Collection[str]:
        """Names of nodes with at least one nominated pod (cheap: checked every cycle)."""
        ...

    def nominated_pods_for_node(self, node_name: str) -> Sequence[PodInfo]: ...

    def add_nominated_pod(self, pod: PodInfo, node_name: str) -> None:
        """Record (or move) ``pod``'s nomination onto ``node_name`` (upstream ``AddNominatedPod`` with a
        PostFilter's ``Override``); the pod's ``status.nominatedNodeName`` is written separately."""
        ...

    def delete_nominated_pod_if_exists(self, pod: PodInfo) -> None: ...


class NoNominator:
    """The empty nominator: no pod is nominated anywhere."""

    def nodes_with_nominated_pods(self) -> Collection[str]:
        return ()

    def nominated_pods_for_node(self, node_name: str) -> Sequence[PodInfo]:
        return ()

    def add_nominated_pod(self, pod: PodInfo, node_name: str) -> None:
        return None

    def delete_nominated_pod_if_exists(self, pod: PodInfo) -> None:
        return None


class PluginMetrics(Protocol):
    """The metrics upstream's plugins observe directly (``pkg/scheduler/metrics``); ``kopf_scheduler.metrics``
    implements it, tests pass a recorder."""

    def preemption_attempt(self) -> None:
        """``scheduler_preemption_attempts_total``: one DefaultPreemption PostFilter call."""
        ...

    def preemption_victims(self, count: int) -> None:
        """``scheduler_preemption_victims``: the victims of one executed preemption."""
        ...

    def resource_claim_create(self, status: str) -> None:
        """``scheduler_resourceclaim_creates_total{status}``: DynamicResources created an extended-resource
        claim ("success") or failed to ("failure")."""
        ...


# -- results -------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FilterResult:
    """Which of the candidate nodes a Filter plugin rejects, and why.

    ``rejected`` is a bool mask aligned with the ``nodes`` the plugin was given. ``statuses`` is a small
    palette of verdicts and ``status_index`` picks one per node (aligned with ``nodes``; only rejected
    positions matter). With a single status ``status_index`` may be ``None``.
    """

    rejected: np.ndarray
    statuses: tuple[Status, ...]
    status_index: np.ndarray | None = None

    @classmethod
    def uniform(cls, rejected: np.ndarray, status: Status) -> FilterResult:
        return cls(rejected, (status,), None)

    def status_at(self, position: int) -> Status:
        if self.status_index is None:
            return self.statuses[0]
        return self.statuses[int(self.status_index[position])]


@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """Upstream ``PreFilterResult``: ``node_names`` None means all nodes; otherwise only these."""

    node_names: frozenset[str] | None = None


#: Node name → the Status that rejected it; what PostFilter plugins read (upstream ``NodeToStatus``).
NodeToStatus = Mapping[str, Status]


# -- plugins -------------------------------------------------------------------------------------------
class Plugin:
    """Base of every plugin. ``name`` is the registry/config name; ``args_model`` the pydantic args type."""

    name: ClassVar[str]
    args_model: ClassVar[type[BaseModel] | None] = None
    #: A workload-aware plugin (upstream's gated GangScheduling & co.): a profile that enables one schedules the
    #: pods of a PodGroup (``spec.schedulingGroup``) in pod-group cycles; any other profile ignores the field,
    #: as upstream does with its workload gates off.
    workload_aware: ClassVar[bool] = False
    #: The gang API a gang plugin serves (its PodGroup kind); a profile may enable plugins of one gang API only, so
    #: that no pod is held by two gang machineries at once. "" for every other plugin.
    gang_api: ClassVar[str] = ""

    def __init__(self, *, handle: Handle, args: BaseModel | None = None) -> None:
        self.handle = handle
        self.args = args

    def events_to_register(self) -> list[ClusterEventWithHint] | None:
        """Upstream ``EnqueueExtensions.EventsToRegister``: the cluster events that could undo this plugin's
        rejection of a pod, each with an optional QueueingHint judging it for one pod.

        Asked once per built pipeline, for plugins enabled at an extension point that can reject a pod
        (PreEnqueue, PreFilter, Filter, Reserve, Permit); read the plugin's args from ``self``. ``None``
        (this default) means "not implemented": the plugin is registered for every event with an
        always-Queue hint (``events.ALL_EVENTS``), as upstream does for plugins without EnqueueExtensions.
        ``[]`` registers nothing: no event requeues a pod this plugin rejected (only the periodic flush).
        """
        return None

    @classmethod
    def extension_points(cls) -> frozenset[ExtensionPoint]:
        """The extension points this class implements, read off its interface bases."""
        return frozenset(point for point, iface in INTERFACES.items() if issubclass(cls, iface))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class PreEnqueuePlugin(Plugin):
    def pre_enqueue(self, pod: PodInfo) -> Status:
        raise NotImplementedError


class QueueSortPlugin(Plugin):
    def less(self, a: QueuedPod, b: QueuedPod) -> bool:
        """True if ``a`` should be popped before ``b``."""
        raise NotImplementedError


class QueuedPod(Protocol):
    """What QueueSort compares: the pod and when it (re)entered the queue."""

    @property
    def pod(self) -> PodInfo: ...

    @property
    def timestamp(self) -> float: ...

    @property
    def initial_attempt_timestamp(self) -> float | None:
        """When it first entered activeQ (the queue's clock); None before that (upstream's is nil too)."""
        ...


class PreFilterExtensions(Protocol):
    """Incremental updates of PreFilter state for nominated pods and preemption dry runs."""

    def add_pod(self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo) -> Status: ...

    def remove_pod(self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo) -> Status: ...


class PreFilterPlugin(Plugin):
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        raise NotImplementedError

    def pre_filter_extensions(self) -> PreFilterExtensions | None:
        return None


class FilterPlugin(Plugin):
    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        """Judge every node in ``nodes`` (slots); ``None`` means all pass."""
        raise NotImplementedError


class NodeFilterPlugin(FilterPlugin):
    """A Filter written one node at a time; the vectorised ``filter`` loops over ``filter_node``."""

    def filter_node(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        raise NotImplementedError

    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        rejected = np.zeros(len(nodes), dtype=bool)
        palette: dict[Status, int] = {}
        index = np.zeros(len(nodes), dtype=np.int64)
        for position, slot in enumerate(nodes):
            status = self.filter_node(state, pod, snapshot.node_info(int(slot)))
            if not status.is_success:
                rejected[position] = True
                index[position] = palette.setdefault(status, len(palette))
        if not palette:
            return None
        return FilterResult(rejected, tuple(palette), index)


class PostFilterPlugin(Plugin):
    def post_filter(
        self, state: CycleState, pod: PodInfo, filtered: NodeToStatus
    ) -> tuple[PostFilterResult | None, Status]:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class PodGroupPreemption:
    """What a PodGroupPostFilter plugin last evicted for a pod group (``kopf-scheduler explain``; ours)."""

    #: When (epoch seconds).
    at: float
    #: The victims, most important first: (``namespace/name``, uid).
    victims: tuple[tuple[str, str], ...]


class PodGroupPostFilterPlugin(Plugin):
    """Upstream ``PodGroupPostFilterPlugin`` (WorkloadAwarePreemption): what the pod-group cycle runs for a whole
    PodGroup that did not fit. Not an extension point of the profile API: the framework of a workload-aware
    profile offers the profile's plugins that implement it (upstream: DefaultPreemption, the only one)."""

    def pod_group_post_filter(
        self, pod_group: Mapping[str, Any], pods: Sequence[PodInfo], schedule: Callable[[], Status]
    ) -> Status:
        """Make room for ``pods`` (the group's members being scheduled) of ``pod_group`` (the PodGroup object);
        ``schedule`` runs the group's algorithm (without PostFilter) on the cache as the plugin left it and says
        whether the group fits. The cache must be as before when it returns."""
        raise NotImplementedError

    def last_preemption(self, namespace: str, name: str) -> PodGroupPreemption | None:
        """The victims this plugin last chose for the pod group ``namespace/name``, if any (explain)."""
        return None


class PreScorePlugin(Plugin):
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> Status:
        """``nodes`` are the feasible nodes; return Skip to have this plugin's Score skipped."""
        raise NotImplementedError


class ScorePlugin(Plugin):
    def score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> np.ndarray:
        """int64 scores aligned with ``nodes``."""
        raise NotImplementedError

    #: Upstream ``ScoreExtensions() != nil``: only then is :meth:`normalize_score` called.
    has_normalize: ClassVar[bool] = False

    def normalize_score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, scores: np.ndarray) -> np.ndarray:
        return scores


class NodeScorePlugin(ScorePlugin):
    """A Score written one node at a time."""

    def score_node(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        raise NotImplementedError

    def score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> np.ndarray:
        return np.fromiter(
            (self.score_node(state, pod, snapshot.node_info(int(slot))) for slot in nodes),
            dtype=np.int64,
            count=len(nodes),
        )


class ReservePlugin(Plugin):
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        raise NotImplementedError

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        raise NotImplementedError


class PermitPlugin(Plugin):
    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        """(status, timeout seconds); a Wait status parks the pod until allowed or timed out."""
        raise NotImplementedError


class PreBindPlugin(Plugin):
    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Upstream ``PreBindPreFlight``: Success if PreBind has work for this pod, Skip if not, or Error.

        Lightweight and side-effect free. Skip also spares the plugin its PreBind this cycle. The default says
        "has work", so a plugin that does not answer keeps its PreBind (and the pod gets nominatedNodeName).
        """
        return SUCCESS

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        raise NotImplementedError


class BindPlugin(Plugin):
    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Bind the pod; return Skip to let the next Bind plugin try."""
        raise NotImplementedError


class PostBindPlugin(Plugin):
    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        raise NotImplementedError


class PlacementGeneratePlugin(Plugin):
    """Upstream ``PlacementGeneratePlugin``: splits the nodes a pod group may use into placements (at most one such
    plugin per profile). Runs in a workload-aware profile's pod-group cycle only."""

    def generate_placements(
        self, state: CycleState, pod_group: PodGroupInfo, parent: Placement
    ) -> tuple[list[Placement] | None, Status]:
        """The placements carved out of ``parent`` (upstream ``GeneratePlacements``); ``state`` is the pod-group
        cycle's own state."""
        raise NotImplementedError


class PlacementScorePlugin(Plugin):
    """Upstream ``PlacementScorePlugin``: ranks the placements a pod group fits in."""

    def score_placement(
        self, state: CycleState, pod_group: PodGroupInfo, assignments: PodGroupAssignments
    ) -> tuple[int, Status]:
        """The placement's raw score from the members its trial placed (upstream ``ScorePlacement``)."""
        raise NotImplementedError

    def placement_score_bound(self, state: CycleState, pod_group: PodGroupInfo, placement: Placement) -> int | None:
        """The (normalized) score this plugin would give ``placement`` if its trial placed every member of the
        cycle, among placements one of which holds every member; fewer members never score more there. None: not
        known. Knowing every plugin's bound lets the pod-group cycle try the placements best first and stop at a
        placement that holds the group whole (``pod_group_placement.py``)."""
        return None

    #: Upstream ``PlacementScoreExtensions() != nil``: only then is :meth:`normalize_placement_score` called (its own
    #: flag: a plugin may be a Score plugin too, with or without NormalizeScore).
    has_placement_normalize: ClassVar[bool] = False

    def normalize_placement_score(
        self, state: CycleState, pod_group: PodGroupInfo, scores: list[PlacementScore]
    ) -> Status:
        """Rewrite ``scores`` in place into [MIN_NODE_SCORE, MAX_NODE_SCORE] (upstream ``NormalizePlacementScore``)."""
        return SUCCESS


INTERFACES: dict[ExtensionPoint, type[Plugin]] = {
    ExtensionPoint.PRE_ENQUEUE: PreEnqueuePlugin,
    ExtensionPoint.QUEUE_SORT: QueueSortPlugin,
    ExtensionPoint.PRE_FILTER: PreFilterPlugin,
    ExtensionPoint.FILTER: FilterPlugin,
    ExtensionPoint.POST_FILTER: PostFilterPlugin,
    ExtensionPoint.PRE_SCORE: PreScorePlugin,
    ExtensionPoint.SCORE: ScorePlugin,
    ExtensionPoint.RESERVE: ReservePlugin,
    ExtensionPoint.PERMIT: PermitPlugin,
    ExtensionPoint.PRE_BIND: PreBindPlugin,
    ExtensionPoint.BIND: BindPlugin,
    ExtensionPoint.POST_BIND: PostBindPlugin,
    ExtensionPoint.PLACEMENT_GENERATE: PlacementGeneratePlugin,
    ExtensionPoint.PLACEMENT_SCORE: PlacementScorePlugin,
}

__all__ = [
    "MAX_NODE_SCORE",
    "MIN_NODE_SCORE",
    "SUCCESS",
    "APIClient",
    "APIError",
    "BindPlugin",
    "CycleState",
    "FilterPlugin",
    "FilterResult",
    "Handle",
    "NoNominator",
    "NodeFilterPlugin",
    "NodeScorePlugin",
    "NodeToStatus",
    "Nominator",
    "PermitPlugin",
    "PipelineHandle",
    "PlacementGeneratePlugin",
    "PlacementScorePlugin",
    "Plugin",
    "PluginsRunner",
    "PostBindPlugin",
    "PostFilterPlugin",
    "PostFilterResult",
    "PreBindPlugin",
    "PreEnqueuePlugin",
    "PreFilterExtensions",
    "PreFilterPlugin",
    "PreFilterResult",
    "PreScorePlugin",
    "QueueSortPlugin",
    "QueuedPod",
    "ReservePlugin",
    "ScorePlugin",
    "Status",
]
