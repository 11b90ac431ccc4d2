"""The framework of one profile: its plugins, constructed once, and the runners of every extension point.

Restates upstream's ``frameworkImpl`` (``framework/runtime/framework.go``): one plugin instance per name, shared by
every extension point it is enabled at; PreEnqueue and QueueSort for the queue; PostFilter until the first
plugin that does not reject. The other extension points' runners are the parts :class:`Framework` is made of:
PreFilter and Filter with nominated pods (:mod:`.filtering`), PreScore and Score (:mod:`.scoring`), Reserve,
Permit and the binding cycle (:mod:`.binding`), PlacementGenerate and PlacementScore (:mod:`.placement`). Error
texts are upstream's, because they end up in events and pod conditions.

Profile validation is not repeated here: :mod:`kopf_scheduler.framework.builder` checks what upstream's
``NewFramework`` checks, and the framework only constructs the plugins of the profile it is given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from kopf_scheduler.framework.cycle_state import CycleState
from kopf_scheduler.framework.extender import Extender, PendingPostFilterResult
from kopf_scheduler.framework.extension_points import ExtensionPoint
from kopf_scheduler.framework.interface import (
    BindPlugin,
    FilterPlugin,
    Handle,
    Nominator,
    NoNominator,
    PermitPlugin,
    PipelineHandle,
    PlacementGeneratePlugin,
    PlacementScorePlugin,
    Plugin,
    PodGroupPostFilterPlugin,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueuedPod,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
)
from kopf_scheduler.framework.profile import ResolvedProfile
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.framework.runtime.binding import BindingRunner
from kopf_scheduler.framework.runtime.common import ObservePlugin, error_text, wrapped_error
from kopf_scheduler.framework.runtime.filtering import FilterRunner
from kopf_scheduler.framework.runtime.placement import PlacementRunner
from kopf_scheduler.framework.runtime.scoring import ScoreRunner
from kopf_scheduler.framework.status import SUCCESS, Code, Status
from kopf_scheduler.framework.verdicts import NodeToStatusMap
from kopf_scheduler.framework.waiting_pods import WaitingPod
from kopf_scheduler.go_format import go_quote

if TYPE_CHECKING:
    from kopf_scheduler.state.pod_info import PodInfo


#: Upstream's status of ``RunPostFilterPlugins`` in a cycle that skips them.
ALL_POST_FILTERS_SKIPPED = "All PostFilter plugins are skipped"


class FrameworkError(Exception):
    """A plugin of a valid profile cannot be constructed (its args do not validate, or its ``__init__`` fails)."""


@dataclasses.dataclass(slots=True)
class SearchStart:
    """Where the next Filter search over the node list begins (upstream ``Scheduler.nextStartNodeIndex``).

    Upstream keeps one index for the whole scheduler, so every profile's cycles move the same start: the
    operator's profiles share one of these; a framework built alone has its own.
    """

    index: int = 0


class Framework(FilterRunner, ScoreRunner, BindingRunner, PlacementRunner):
    """One profile's pipeline: plugin instances per extension point and the ``run_*`` methods over them.

    ``profile`` comes from :func:`kopf_scheduler.framework.builder.resolve_profile` with the same ``registry``,
    which has already checked it as upstream's framework construction does (every plugin exists and implements
    the extension points it is enabled at, no duplicates, exactly one QueueSort, at least one Bind, score weights
    that cannot overflow). The framework trusts that and only constructs the plugins.
    """

    def __init__(
        self,
        profile: ResolvedProfile,
        registry: Registry,
        handle: PipelineHandle,
        *,
        nominator: Nominator | None = None,
        observe_plugin: ObservePlugin | None = None,
        extenders: Sequence[Extender] = (),
        search_start: SearchStart | None = None,
    ) -> None:
        self.profile = profile
        #: ``scheduler_plugin_execution_duration_seconds`` (plugin, extension point, status code, seconds);
        #: called in sampled cycles only (``CycleState.record_plugin_metrics``).
        self.observe_plugin = observe_plugin
        self.profile_name = profile.scheduler_name
        self.percentage_of_nodes_to_score = profile.percentage_of_nodes_to_score
        self.handle = handle
        self.nominator: Nominator = nominator or NoNominator()
        #: Round-robin start of the Filter search over the node list, shared with the other profiles.
        self.search_start = search_start if search_start is not None else SearchStart()
        self.waiting_pods: dict[str, WaitingPod] = {}
        self._borrowed: dict[str, tuple[PodInfo, str, PodInfo]] = {}
        #: The profile's HTTP extenders, ignorable ones last (upstream's ``WithExtenders`` option).
        self.extenders: tuple[Extender, ...] = tuple(extenders)
        # Upstream's plugins get the framework itself as their Handle; ours get the profile's handle, completed
        # here with this framework's runners and extenders before any plugin is constructed.
        handle.attach_pipeline(self, self.extenders)

        self.plugins: dict[str, Plugin] = {
            name: _new_plugin(name, registry[name], handle, profile.plugin_args.get(name))
            for name in profile.plugin_names()
        }
        by_point: dict[ExtensionPoint, list[tuple[str, Any]]] = {
            point: [(ref.name, self.plugins[ref.name]) for ref in profile.enabled(point)] for point in ExtensionPoint
        }
        #: Whether this profile schedules PodGroups in pod-group cycles (a workload-aware plugin is enabled).
        self.workload_aware = any(plugin.workload_aware for plugin in self.plugins.values())
        scores = profile.enabled(ExtensionPoint.SCORE)
        self.score_weights: dict[str, int] = {ref.name: ref.weight or 1 for ref in scores}  # 0 (unset) means 1

        self.pre_enqueue_plugins: tuple[tuple[str, PreEnqueuePlugin], ...] = tuple(by_point[ExtensionPoint.PRE_ENQUEUE])
        self.queue_sort_plugin: QueueSortPlugin = by_point[ExtensionPoint.QUEUE_SORT][0][1]
        self.pre_filter_plugins: tuple[tuple[str, PreFilterPlugin], ...] = tuple(by_point[ExtensionPoint.PRE_FILTER])
        self.filter_plugins: tuple[tuple[str, FilterPlugin], ...] = tuple(by_point[ExtensionPoint.FILTER])
        self.post_filter_plugins: tuple[tuple[str, PostFilterPlugin], ...] = tuple(by_point[ExtensionPoint.POST_FILTER])
        self.pre_score_plugins: tuple[tuple[str, PreScorePlugin], ...] = tuple(by_point[ExtensionPoint.PRE_SCORE])
        self.score_plugins: tuple[tuple[str, ScorePlugin], ...] = tuple(by_point[ExtensionPoint.SCORE])
        self.reserve_plugins: tuple[tuple[str, ReservePlugin], ...] = tuple(by_point[ExtensionPoint.RESERVE])
        self.permit_plugins: tuple[tuple[str, PermitPlugin], ...] = tuple(by_point[ExtensionPoint.PERMIT])
        self.pre_bind_plugins: tuple[tuple[str, PreBindPlugin], ...] = tuple(by_point[ExtensionPoint.PRE_BIND])
        self.bind_plugins: tuple[tuple[str, BindPlugin], ...] = tuple(by_point[ExtensionPoint.BIND])
        self.post_bind_plugins: tuple[tuple[str, PostBindPlugin], ...] = tuple(by_point[ExtensionPoint.POST_BIND])
        self.placement_generate_plugins: tuple[tuple[str, PlacementGeneratePlugin], ...] = tuple(
            by_point[ExtensionPoint.PLACEMENT_GENERATE]
        )
        self.placement_score_plugins: tuple[tuple[str, PlacementScorePlugin], ...] = tuple(
            by_point[ExtensionPoint.PLACEMENT_SCORE]
        )
        self.placement_score_weights: dict[str, int] = {
            ref.name: ref.weight or 1 for ref in profile.enabled(ExtensionPoint.PLACEMENT_SCORE)
        }
        #: Upstream ``PodGroupPostFilterPlugins`` (WorkloadAwarePreemption, on in a workload-aware profile): the
        #: profile's plugins, at whatever extension point enabled, that preempt for a whole pod group (upstream
        #: registers DefaultPreemption there when the profile has it, and it is the only in-tree one).
        self.pod_group_post_filter_plugins: tuple[PodGroupPostFilterPlugin, ...] = (
            tuple(p for p in self.plugins.values() if isinstance(p, PodGroupPostFilterPlugin))
            if self.workload_aware
            else ()
        )

    def __repr__(self) -> str:
        return f"<Framework {self.profile_name}>"

    # -- introspection ---------------------------------------------------------------------------------
    @property
    def next_start_node_index(self) -> int:
        """Round-robin start of the Filter search over the node list (upstream ``nextStartNodeIndex``)."""
        return self.search_start.index

    @next_start_node_index.setter
    def next_start_node_index(self, value: int) -> None:
        self.search_start.index = value

    @property
    def has_filter_plugins(self) -> bool:
        return bool(self.filter_plugins)

    @property
    def has_post_filter_plugins(self) -> bool:
        return bool(self.post_filter_plugins)

    @property
    def has_score_plugins(self) -> bool:
        return bool(self.score_plugins)

    # -- queue -----------------------------------------------------------------------------------------
    def run_pre_enqueue_plugins(self, pod: PodInfo) -> Status:
        """First non-success verdict (stamped with its plugin) keeps the pod out of the active queue."""
        for name, plugin in self.pre_enqueue_plugins:
            try:
                status = plugin.pre_enqueue(pod)
            except Exception as exc:
                return wrapped_error(f"running PreEnqueue plugin {go_quote(name)}", exc).with_plugin(name)
            if not status.is_success:
                if status.is_rejected:
                    return status.with_plugin(name)
                return wrapped_error(f"running PreEnqueue plugin {go_quote(name)}", status).with_plugin(name)
        return SUCCESS

    def queue_sort_less(self, a: QueuedPod, b: QueuedPod) -> bool:
        return self.queue_sort_plugin.less(a, b)

    # -- PostFilter ------------------------------------------------------------------------------------
    def run_post_filter_plugins(
        self, state: CycleState, pod: PodInfo, filtered: NodeToStatusMap
    ) -> tuple[PostFilterResult | None, Status]:
        """Until the first Success, UUR or Error; otherwise U with all plugins' reasons (joined by ", ").
        None runs in a cycle that skips them (upstream ``ShouldSkipAllPostFilterPlugins``)."""
        if state.skip_all_post_filter_plugins:
            return None, Status.unschedulable(ALL_POST_FILTERS_SKIPPED)
        result: PostFilterResult | None = None
        reasons: list[str] = []
        rejector = ""
        for name, plugin in self.post_filter_plugins:
            try:
                outcome, status = plugin.post_filter(state, pod, filtered)
            except Exception as exc:
                return None, Status.as_error(exc, plugin=name)
            if status.is_success:
                return _after_earlier_rejections(outcome, reasons, rejector), status
            if status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return outcome, status.with_plugin(name)
            if not status.is_rejected:
                return None, Status(Code.ERROR, status.reasons, name, status.error)
            # Upstream keeps a result whose mode is not Noop (a node, or Override with "" = clear_nomination);
            # one carrying only node_messages (ours, for explain) is as harmless as a Noop and kept too.
            if outcome is not None and (
                outcome.nominated_node_name is not None or outcome.clear_nomination or outcome.node_messages
            ):
                result = outcome
            reasons.extend(status.reasons)
            rejector = rejector or name
        return result, Status(Code.UNSCHEDULABLE, tuple(reasons), rejector)


def _new_plugin(name: str, cls: type[Plugin], handle: Handle, raw: BaseModel | dict[str, Any] | None) -> Plugin:
    """Plugin ``name``'s instance, with typed args; any failure is upstream's ``initializing plugin`` error."""
    args = _plugin_args(cls, raw)
    try:
        return cls(handle=handle, args=args)
    except Exception as exc:
        raise FrameworkError(f"initializing plugin {name!r}: {error_text(exc)}") from exc


def _plugin_args(cls: type[Plugin], raw: BaseModel | dict[str, Any] | None) -> Any:
    """Typed args for the plugin: validate a raw dict against its ``args_model``, pass models through."""
    if raw is None or isinstance(raw, BaseModel) or cls.args_model is None:
        return raw
    try:
        return cls.args_model.model_validate(raw)
    except Exception as exc:
        raise FrameworkError(f"initializing plugin {cls.name!r}: {error_text(exc)}") from exc


def _after_earlier_rejections(
    outcome: PostFilterResult | None, reasons: list[str], rejector: str
) -> PostFilterResult | None:
    """A pending result (a PostFilter plugin that still awaits extenders, ``PendingPostFilterResult``) after
    plugins that said Unschedulable: its final Unschedulable verdict carries their reasons first, as upstream's
    loop joins them (``no new claims to deallocate, preemption: ...``)."""
    if not isinstance(outcome, PendingPostFilterResult) or outcome.finish is None or not reasons:
        return outcome
    finish = outcome.finish
    earlier = tuple(reasons)

    async def joined() -> tuple[PostFilterResult | None, Status]:
        result, status = await finish()
        if status.code is Code.UNSCHEDULABLE:
            status = Status(Code.UNSCHEDULABLE, earlier + status.reasons, rejector or status.plugin)
        return result, status

    return dataclasses.replace(outcome, finish=joined)


__all__ = ["Framework", "FrameworkError"]
