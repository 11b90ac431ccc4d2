"""What a preemption candidate is, and the importance order of its victims.

:class:`Victims` is upstream's ``extenderv1.Victims`` (the pods to evict on one node, as the ``preempt`` verb
of HTTP extenders exchanges them too) and :class:`Candidate` upstream's ``preemption.Candidate``
(``framework/preemption/preemption.go``). The importance order is upstream's ``pkg/scheduler/util/utils.go``
(``MoreImportantPod``, ``GetPodStartTime``): the plugin's dry run puts victims back most important first, and
the evaluator's ``pickOneNodeForPreemption`` compares their start times.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from kopf_scheduler.state.pod_info import PodInfo

#: PodInfo.memo key of the pod's parsed ``status.startTime`` (None: absent or unreadable).
_MEMO_START_TIME = "preemption.start_time"
_UNPARSED = object()


# -- importance ----------------------------------------------------------------------------------------
def pod_start_time(pod: PodInfo, now: float) -> float:
    """Upstream ``GetPodStartTime``: ``status.startTime`` (epoch seconds), or ``now`` for a pod not started.

    The parsed time is kept in ``pod.memo`` (every dry run sorts the same victims again)."""
    started = pod.memo.get(_MEMO_START_TIME, _UNPARSED)
    if started is _UNPARSED:
        started = pod.memo[_MEMO_START_TIME] = _parse_start_time(pod)
    return now if started is None else started


def _parse_start_time(pod: PodInfo) -> float | None:
    raw = pod.start_time
    if not raw:
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def importance_key(pod: PodInfo, now: float) -> tuple[int, float]:
    """Sort key for upstream ``MoreImportantPod`` (most important first): higher priority, then older."""
    return (-pod.priority, pod_start_time(pod, now))


def sort_by_importance(pods: Iterable[PodInfo], now: float) -> list[PodInfo]:
    return sorted(pods, key=lambda p: importance_key(p, now))


# -- candidates ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Victims:
    """Upstream ``extenderv1.Victims``: the pods to evict on one node (most important first)."""

    pods: tuple[PodInfo, ...]
    num_pdb_violations: int = 0


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node where evicting ``victims`` would let the preemptor fit (upstream ``preemption.Candidate``)."""

    name: str
    victims: Victims
