"""HTTP scheduler extenders without the HTTP: upstream's wire protocol, interest and failure semantics.

Upstream's counterparts: ``pkg/scheduler/extender.go`` (``HTTPExtender``: Filter, Prioritize, Bind,
ProcessPreemption, IsInterested), the extender halves of ``schedule_one.go`` (``findNodesThatPassExtenders``,
``prioritizeNodes``, ``extendersBinding``), of ``framework/preemption/preemption.go`` (``callExtenders``) and the
wire types of ``k8s.io/kube-scheduler/extender/v1``.

Everything here is pure but the one await on :class:`ExtenderTransport`, the seam behind which the I/O layer
(``kube/extender_http.py``: aiohttp, TLS, timeout) posts a JSON body to ``<urlPrefix>/<verb>`` and returns the
decoded JSON answer. So the core stays free of aiohttp, and unit tests can pass a fake transport.

Wire format (the extender/v1 structs have no json tags, so the keys are the Go field names):

- filter and prioritize send ``ExtenderArgs``: ``{"Pod": <v1.Pod>, "Nodes": <v1.NodeList>|null,
  "NodeNames": [...]|null}``, the full Nodes unless the extender is ``nodeCacheCapable``;
- filter answers ``ExtenderFilterResult`` (``Nodes`` or ``NodeNames``, ``FailedNodes``,
  ``FailedAndUnresolvableNodes``, ``Error``); prioritize answers ``HostPriorityList`` ``[{"Host", "Score"}]``
  (0-10, scaled by ``weight`` × 100/10); bind sends ``ExtenderBindingArgs`` and answers ``{"Error": ""}``;
  preempt sends ``ExtenderPreemptionArgs`` (the candidates' victims, full pods or only their UIDs) and answers
  ``ExtenderPreemptionResult`` (``NodeNameToMetaVictims``: the candidates kept, their victims by UID).
- Go's JSON decoder matches keys case-insensitively, and so does :func:`_field` when reading answers.

Semantics restated from upstream: an extender is *interested* in every pod when it manages no resources, else
only in pods whose containers or init containers request or limit one of them. Filter extenders run one after
the other over the shrinking list; an error fails the cycle unless the extender is ``ignorable``.
``FailedAndUnresolvableNodes`` wins over ``FailedNodes``. Prioritize extenders run in parallel and their errors
are ignored (that extender gives no score). The first interested binder binds instead of the Bind plugins;
an ignorable binder's error passes the turn on. Ignorable extenders are moved behind the others, as upstream's
``buildExtenders`` does. Preempt extenders run one after the other between DefaultPreemption's candidate search
and its pick; since that is an await inside PostFilter, DefaultPreemption hands the framework a
:class:`PendingPostFilterResult` that only the extender cycle (``Scheduler.run_post_filter_with_extenders``)
awaits.

Where we differ: an extender that is not ``nodeCacheCapable`` may answer with Node objects; upstream takes them
as they come (bare NodeInfos without pods), we keep only the nodes it was sent, by name.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kopf_scheduler.api.profile import Extender as ExtenderSpec
from kopf_scheduler.api.profile import ExtenderTLSConfig
from kopf_scheduler.framework.status import SUCCESS, Code, Status
from kopf_scheduler.framework.verdicts import PostFilterResult
from kopf_scheduler.go_format import parse_go_duration
from kopf_scheduler.state.pod_info import PodInfo

logger = logging.getLogger(__name__)

#: Upstream ``extenderv1.MaxExtenderPriority``: extenders score nodes 0..10.
MAX_EXTENDER_PRIORITY = 10
#: Upstream ``framework.MaxNodeScore``; extender scores are scaled by MAX_NODE_SCORE / MAX_EXTENDER_PRIORITY.
_MAX_NODE_SCORE = 100
#: Upstream ``DefaultExtenderTimeout`` (an unset or zero ``httpTimeout``).
DEFAULT_TIMEOUT_SECONDS = 5.0
#: Upstream ``framework.ExtenderName``: what lands in a pod's unschedulable plugins when extenders rejected nodes.
EXTENDER_NAME = "Extender"

FILTER = "filter"
PRIORITIZE = "prioritize"
BIND = "bind"
PREEMPT = "preempt"


class ExtenderError(Exception):
    """A call failed: unreachable, non-200, undecodable, or the extender said so in ``Error``."""


@dataclass(frozen=True, slots=True)
class ExtenderConfig:
    """One extender as the transport needs it: where, how long, over which TLS."""

    url_prefix: str
    timeout_seconds: float
    enable_https: bool
    tls: ExtenderTLSConfig

    def url(self, verb: str) -> str:
        """Upstream ``send``: the prefix without trailing slashes, then ``/<verb>``."""
        return self.url_prefix.rstrip("/") + "/" + verb


class ExtenderTransport(Protocol):
    """The I/O seam (``kube.extender_http.HTTPExtenderTransport``; a fake in unit tests)."""

    def prepare(self, config: ExtenderConfig) -> None:
        """Check the TLS material now (upstream ``makeTransport``); raise ValueError when it is unusable."""

    async def post(self, config: ExtenderConfig, verb: str, body: Mapping[str, Any]) -> Any:
        """POST ``body`` as JSON to ``config.url(verb)``; the decoded answer, or ExtenderError."""


#: Called with (extender name, verb) on every failed call (the error counter).
ErrorHook = Callable[[str, str], None]


def _no_hook(name: str, verb: str) -> None:
    return None


# -- the pure wire conversion ----------------------------------------------------------------------------------
def extender_args(
    pod: Mapping[str, Any], nodes: Sequence[tuple[str, Mapping[str, Any]]], *, names_only: bool
) -> dict[str, Any]:
    """``ExtenderArgs``: the pod and either the Node objects (as a NodeList) or just their names."""
    if names_only:
        return {"Pod": pod, "Nodes": None, "NodeNames": [name for name, _ in nodes]}
    return {"Pod": pod, "Nodes": {"metadata": {}, "items": [obj for _, obj in nodes]}, "NodeNames": None}


def binding_args(pod: PodInfo, node: str) -> dict[str, Any]:
    """``ExtenderBindingArgs``."""
    return {"PodName": pod.name, "PodNamespace": pod.namespace, "PodUID": pod.uid, "Node": node}


def _field(obj: Any, key: str) -> Any:
    """``obj[key]`` as Go's decoder finds it: the exact key first, else any case-insensitive match."""
    if not isinstance(obj, Mapping):
        return None
    if key in obj:
        return obj[key]
    lowered = key.lower()
    return next((value for k, value in obj.items() if isinstance(k, str) and k.lower() == lowered), None)


def _string_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


@dataclass(frozen=True, slots=True)
class FilterVerdict:
    """One filter extender's answer: who passed (in its order), who failed and why."""

    passed: tuple[str, ...]
    failed: Mapping[str, str]
    unresolvable: Mapping[str, str]


def parse_filter_result(result: Any, sent: Sequence[str], *, names_only: bool, name: str) -> FilterVerdict:
    """``ExtenderFilterResult`` → verdict; raises ExtenderError for ``Error`` or an unknown node (upstream's texts)."""
    if not isinstance(result, Mapping):
        raise ExtenderError(f"extender {name!r} answered {type(result).__name__}, not an ExtenderFilterResult")
    error = _field(result, "Error")
    if error:
        raise ExtenderError(str(error))
    known = set(sent)
    node_names = _field(result, "NodeNames")
    passed: list[str] = []
    if names_only and node_names is not None:
        for node in node_names:
            if node not in known:
                raise ExtenderError(
                    f'extender "{name}" claims a filtered node "{node}" which is not found in the input node list'
                )
            passed.append(node)
    else:
        items = _field(_field(result, "Nodes"), "items") or []
        passed = [n for n in (_field(_field(item, "metadata"), "name") for item in items) if n in known]
    return FilterVerdict(
        tuple(passed),
        _string_map(_field(result, "FailedNodes")),
        _string_map(_field(result, "FailedAndUnresolvableNodes")),
    )


def parse_host_priorities(result: Any) -> list[tuple[str, int]]:
    """``HostPriorityList`` → [(host, score)]; raises ExtenderError when it is not one."""
    if result is None:
        return []
    if not isinstance(result, list):
        raise ExtenderError(f"expected a HostPriorityList, got {type(result).__name__}")
    try:
        return [(str(_field(item, "Host")), int(_field(item, "Score") or 0)) for item in result]
    except (TypeError, ValueError) as exc:
        raise ExtenderError(f"invalid HostPriorityList: {exc}") from exc


@dataclass(frozen=True, slots=True)
class PreemptionVictims:
    """Pods to evict on one node and how many PDBs that violates (extender/v1 ``Victims``)."""

    pods: tuple[PodInfo, ...]
    num_pdb_violations: int = 0


def preemption_args(pod: Mapping[str, Any], victims: Mapping[str, PreemptionVictims], *, meta: bool) -> dict[str, Any]:
    """``ExtenderPreemptionArgs``: full victim pods, or only their UIDs (``NodeNameToMetaVictims``) when the
    extender is ``nodeCacheCapable``."""
    if meta:
        by_node = {
            node: {"Pods": [{"UID": p.uid} for p in v.pods], "NumPDBViolations": v.num_pdb_violations}
            for node, v in victims.items()
        }
        return {"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": by_node}
    full = {
        node: {"Pods": [p.obj for p in v.pods], "NumPDBViolations": v.num_pdb_violations} for node, v in victims.items()
    }
    return {"Pod": pod, "NodeNameToVictims": full, "NodeNameToMetaVictims": None}


#: The pods on a node by name (None: no such node), to turn the UIDs an extender answers with back into pods.
PodsOnNode = Callable[[str], Iterable[PodInfo] | None]


def parse_preemption_result(result: Any, pods_on_node: PodsOnNode, *, name: str) -> dict[str, PreemptionVictims]:
    """``ExtenderPreemptionResult`` → victims per node (upstream ``convertToVictims``, with its error texts)."""
    victims: dict[str, PreemptionVictims] = {}
    meta = _field(result, "NodeNameToMetaVictims") or {}
    if not isinstance(meta, Mapping):
        raise ExtenderError(f"extender {name!r} answered an invalid ExtenderPreemptionResult")
    for node, entry in meta.items():
        pods = pods_on_node(node)
        if pods is None:
            raise ExtenderError(f'nodeinfo not found for node name "{node}"')
        by_uid = {p.uid: p for p in pods}
        chosen: list[PodInfo] = []
        for meta_pod in _field(entry, "Pods") or []:
            uid = str(_field(meta_pod, "UID") or "")
            if uid not in by_uid:
                raise ExtenderError(
                    f"extender: {name} claims to preempt pod (UID: &{{{uid}}}) on node: {node}, "
                    "but the pod is not found on that node"
                )
            chosen.append(by_uid[uid])
        victims[node] = PreemptionVictims(tuple(chosen), int(_field(entry, "NumPDBViolations") or 0))
    return victims


def scaled_score(score: int, weight: int) -> int:
    """Upstream's ``score × weight × (MaxNodeScore / MaxExtenderPriority)`` (integer division: ×10)."""
    return score * weight * (_MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)


def pod_uses_resources(pod: Mapping[str, Any], resources: frozenset[str]) -> bool:
    """Whether any container or init container requests or limits one of ``resources`` (upstream IsInterested)."""
    spec = pod.get("spec") or {}
    for container in (*(spec.get("containers") or ()), *(spec.get("initContainers") or ())):
        declared = container.get("resources") or {}
        for kind in ("requests", "limits"):
            if any(name in resources for name in declared.get(kind) or {}):
                return True
    return False


def extender_config(spec: ExtenderSpec) -> ExtenderConfig:
    """What the transport needs of ``spec``: an unset or zero ``httpTimeout`` is upstream's 5 s."""
    seconds = parse_go_duration(spec.http_timeout) if spec.http_timeout else 0.0
    return ExtenderConfig(
        spec.url_prefix, seconds if seconds > 0 else DEFAULT_TIMEOUT_SECONDS, spec.enable_https, spec.tls_config
    )


def build_extenders(
    specs: Sequence[ExtenderSpec], transport: ExtenderTransport, *, on_error: ErrorHook | None = None
) -> tuple[Extender, ...]:
    """A profile's extenders, ignorable ones last (upstream ``buildExtenders``); the transport checks each TLS
    config now, so bad certificates fail the profile (the previous pipeline keeps serving)."""
    built = []
    for spec in specs:
        config = extender_config(spec)
        transport.prepare(config)
        built.append(Extender(spec, config, transport, on_error=on_error or _no_hook))
    return order_extenders(built)


# -- one extender --------------------------------------------------------------------------------------------------
class Extender:
    """One configured extender of a profile (upstream ``HTTPExtender``); calls go through the transport."""

    def __init__(
        self,
        spec: ExtenderSpec,
        config: ExtenderConfig,
        transport: ExtenderTransport,
        *,
        on_error: ErrorHook = _no_hook,
    ) -> None:
        self.spec = spec
        self.config = config
        self._transport = transport
        self._on_error = on_error
        self._managed = frozenset(r.name for r in spec.managed_resources)

    @property
    def name(self) -> str:
        """Upstream ``Name()``: the URL prefix (also the name its verdicts and scores carry in explanations)."""
        return self.spec.url_prefix

    @property
    def ignorable(self) -> bool:
        return self.spec.ignorable

    @property
    def is_filter(self) -> bool:
        return bool(self.spec.filter_verb)

    @property
    def is_prioritizer(self) -> bool:
        return bool(self.spec.prioritize_verb)

    @property
    def is_binder(self) -> bool:
        return bool(self.spec.bind_verb)

    @property
    def supports_preemption(self) -> bool:
        return bool(self.spec.preempt_verb)

    def is_interested(self, pod: PodInfo) -> bool:
        return not self._managed or pod_uses_resources(pod.obj, self._managed)

    async def _send(self, kind: str, verb: str, body: Mapping[str, Any]) -> Any:
        try:
            return await self._transport.post(self.config, verb, body)
        except ExtenderError:
            self._on_error(self.name, kind)
            raise
        except Exception as exc:  # the transport should raise ExtenderError; anything else is one too
            self._on_error(self.name, kind)
            raise ExtenderError(str(exc) or type(exc).__name__) from exc

    async def filter(self, pod: PodInfo, nodes: Sequence[tuple[str, Mapping[str, Any]]]) -> FilterVerdict:
        names = [name for name, _ in nodes]
        if not self.is_filter:
            return FilterVerdict(tuple(names), {}, {})
        cache_capable = self.spec.node_cache_capable
        body = extender_args(pod.obj, nodes, names_only=cache_capable)
        result = await self._send(FILTER, self.spec.filter_verb, body)
        try:
            return parse_filter_result(result, names, names_only=cache_capable, name=self.name)
        except ExtenderError:
            self._on_error(self.name, FILTER)
            raise

    async def prioritize(
        self, pod: PodInfo, nodes: Sequence[tuple[str, Mapping[str, Any]]]
    ) -> tuple[list[tuple[str, int]], int]:
        """[(host, score 0..10)] and the weight; a non-prioritizer gives every node 0 with weight 0 (upstream)."""
        if not self.is_prioritizer:
            return [(name, 0) for name, _ in nodes], 0
        body = extender_args(pod.obj, nodes, names_only=self.spec.node_cache_capable)
        result = await self._send(PRIORITIZE, self.spec.prioritize_verb, body)
        try:
            return parse_host_priorities(result), self.spec.weight
        except ExtenderError:
            self._on_error(self.name, PRIORITIZE)
            raise

    async def process_preemption(
        self, pod: PodInfo, victims: Mapping[str, PreemptionVictims], pods_on_node: PodsOnNode
    ) -> dict[str, PreemptionVictims]:
        """Upstream ``ProcessPreemption``: the candidates (node → victims) the extender keeps, maybe changed."""
        if not self.supports_preemption:
            raise ExtenderError(f"preempt verb is not defined for extender {self.name} but run into ProcessPreemption")
        body = preemption_args(pod.obj, victims, meta=self.spec.node_cache_capable)
        result = await self._send(PREEMPT, self.spec.preempt_verb, body)
        try:
            return parse_preemption_result(result, pods_on_node, name=self.name)
        except ExtenderError:
            self._on_error(self.name, PREEMPT)
            raise

    async def bind(self, pod: PodInfo, node: str) -> None:
        result = await self._send(BIND, self.spec.bind_verb, binding_args(pod, node))
        error = _field(result, "Error")
        if error:
            self._on_error(self.name, BIND)
            raise ExtenderError(str(error))


def order_extenders(extenders: Iterable[Extender]) -> tuple[Extender, ...]:
    """Upstream ``buildExtenders``: the ignorable extenders go behind the others (each group keeps its order)."""
    listed = tuple(extenders)
    return tuple(e for e in listed if not e.ignorable) + tuple(e for e in listed if e.ignorable)


# -- the cycle's extender steps ----------------------------------------------------------------------------------
@dataclass(slots=True)
class ExtenderFilterOutcome:
    """What the filter extenders left: the passing node names in order, and the rejected ones' statuses."""

    passed: list[str]
    #: (node name, status stamped with the extender's name), in the order they were reported.
    rejected: list[tuple[str, Status]]


async def find_nodes_that_pass_extenders(
    extenders: Sequence[Extender], pod: PodInfo, nodes: Sequence[tuple[str, Mapping[str, Any]]]
) -> ExtenderFilterOutcome:
    """Upstream ``findNodesThatPassExtenders``: interested filter extenders in order, each on what is left.

    Raises ExtenderError when a non-ignorable extender fails (the cycle ends with a scheduling error).
    """
    remaining = list(nodes)
    rejected: list[tuple[str, Status]] = []
    for extender in extenders:
        if not remaining:
            break
        if not extender.is_interested(pod):
            continue
        try:
            verdict = await extender.filter(pod, remaining)
        except ExtenderError as exc:
            if extender.ignorable:
                logger.info(
                    "Skipping extender %s as it returned error and has ignorable flag set: %s", extender.name, exc
                )
                continue
            raise
        for node, message in verdict.unresolvable.items():
            rejected.append((node, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (message,), extender.name)))
        for node, message in verdict.failed.items():
            if node not in verdict.unresolvable:
                rejected.append((node, Status(Code.UNSCHEDULABLE, (message,), extender.name)))
        objects = dict(remaining)
        remaining = [(node, objects[node]) for node in verdict.passed]
    return ExtenderFilterOutcome([name for name, _ in remaining], rejected)


async def prioritize_with_extenders(
    extenders: Sequence[Extender], pod: PodInfo, nodes: Sequence[tuple[str, Mapping[str, Any]]]
) -> dict[str, dict[str, int]]:
    """The extender half of upstream ``prioritizeNodes``: interested extenders in parallel.

    Returns extender name → node name → scaled score; a failing extender gives no score (logged, counted).
    """
    interested = [e for e in extenders if e.is_interested(pod)]
    if not interested:
        return {}
    answers = await asyncio.gather(*(e.prioritize(pod, nodes) for e in interested), return_exceptions=True)
    scores: dict[str, dict[str, int]] = {}
    for extender, answer in zip(interested, answers, strict=True):
        if isinstance(answer, BaseException):
            if not isinstance(answer, Exception):
                raise answer
            logger.info(
                "Extender %s failed to prioritize pod %s; no score given by it: %s", extender.name, pod.key, answer
            )
            continue
        priorities, weight = answer
        per_node = scores.setdefault(extender.name, {})
        for host, score in priorities:
            per_node[host] = per_node.get(host, 0) + scaled_score(score, weight)
    return scores


async def process_preemption_with_extenders(
    extenders: Sequence[Extender],
    pod: PodInfo,
    victims: Mapping[str, PreemptionVictims],
    pods_on_node: PodsOnNode,
) -> dict[str, PreemptionVictims]:
    """Upstream ``Evaluator.callExtenders``: each interested extender with a preempt verb, in order, may drop
    candidate nodes or change their victims; the next one sees what the previous left.

    Raises ExtenderError for a non-ignorable failure, or a node left without victims (upstream's text). An empty
    answer leaves no candidate (the next extenders are not called).
    """
    current = dict(victims)
    for extender in extenders:
        if not current:
            break
        if not extender.supports_preemption or not extender.is_interested(pod):
            continue
        try:
            answer = await extender.process_preemption(pod, current, pods_on_node)
        except ExtenderError as exc:
            if extender.ignorable:
                logger.info(
                    "Skipped extender %s as it returned error and has ignorable flag set: %s", extender.name, exc
                )
                continue
            raise
        for node in [n for n, v in answer.items() if not v.pods]:
            if not extender.ignorable:
                raise ExtenderError(f'expected at least one victim pod on node "{node}"')
            del answer[node]
        current = answer
    return current


#: The rest of a PostFilter that awaits extenders: its final (result, status), as ``post_filter`` returns them.
PostFilterContinuation = Callable[[], Awaitable[tuple[PostFilterResult | None, Status]]]


@dataclass(frozen=True, slots=True)
class PendingPostFilterResult(PostFilterResult):
    """A PostFilter plugin's answer that still has extender calls to await (DefaultPreemption with preempt verbs).

    The plugin returns it with a Success status from its synchronous ``post_filter``, so the framework's PostFilter
    loop stops there; ``Scheduler.run_post_filter_with_extenders`` (the extender cycle, the only one that can
    await) then awaits ``finish`` for the real verdict. Profiles without preempt extenders never see one.
    """

    finish: PostFilterContinuation | None = None


async def extenders_binding(extenders: Sequence[Extender], pod: PodInfo, node: str) -> Status | None:
    """Upstream ``extendersBinding``: the first interested binder binds; None when none did (plugins bind).

    An ignorable binder's error passes the turn to the next binder (and finally to the Bind plugins).
    """
    for extender in extenders:
        if not extender.is_binder or not extender.is_interested(pod):
            continue
        try:
            await extender.bind(pod, node)
        except ExtenderError as exc:
            if extender.ignorable:
                logger.info(
                    "Skipping extender %s in bind as it returned error and has ignorable flag set: %s",
                    extender.name,
                    exc,
                )
                continue
            return Status(Code.ERROR, (str(exc),), extender.name, exc)
        return SUCCESS
    return None


__all__ = [
    "BIND",
    "DEFAULT_TIMEOUT_SECONDS",
    "EXTENDER_NAME",
    "FILTER",
    "MAX_EXTENDER_PRIORITY",
    "PREEMPT",
    "PRIORITIZE",
    "ErrorHook",
    "Extender",
    "ExtenderConfig",
    "ExtenderError",
    "ExtenderFilterOutcome",
    "ExtenderTransport",
    "FilterVerdict",
    "PendingPostFilterResult",
    "PodsOnNode",
    "PostFilterContinuation",
    "PreemptionVictims",
    "binding_args",
    "build_extenders",
    "extender_args",
    "extender_config",
    "extenders_binding",
    "find_nodes_that_pass_extenders",
    "order_extenders",
    "parse_filter_result",
    "parse_go_duration",
    "parse_host_priorities",
    "parse_preemption_result",
    "pod_uses_resources",
    "preemption_args",
    "prioritize_with_extenders",
    "process_preemption_with_extenders",
    "scaled_score",
]
