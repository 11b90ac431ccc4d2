"""Differences of the gang timelines that a feature not yet on main explains, recognised by their exact shape.

The lead's decision: a workload-aware profile behaves as kube-scheduler v1.36.3 with all four gates on. When the
timelines were written, main's pod-group cycle ran upstream's default algorithm, as with
TopologyAwareWorkloadScheduling and WorkloadAwarePreemption off (both were being built on other branches), and two
differences followed from that alone, each recognised only in this exact form (anything else stays a
disagreement):

- **TopologyAwareWorkloadScheduling**: with the gate on, every pod-group cycle runs the placement algorithm
  (``podGroupSchedulingPlacementAlgorithm``), even without constraints (one placement of all nodes), so an
  unschedulable group's ``PodGroupScheduled`` message is ``0/1 placements are available, first placement status:
  <the default algorithm's message>``;
- **WorkloadAwarePreemption**: with the gate on, DefaultPreemption's per-pod PostFilter refuses a member of a
  pod group (``preemption: not eligible due to workload aware preemption enabled`` in its PodScheduled message,
  where ours tries per-pod preemption), and the group's preemption (``runWorkloadAwarePreemption``) appends its
  verdict to the group's message (``..., No preemption victims found for incoming preemptor``).

:data:`PENDING` lists the features still missing; the lead removes one once its branch is merged, and from
then on its differences count as disagreements (the pinned quick test says when one disappears).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

PLACEMENT = "TopologyAwareWorkloadScheduling"
GROUP_PREEMPTION = "WorkloadAwarePreemption"
#: The features whose absence on main explains a difference (remove one when its branch is merged). Both are
#: merged now: no difference is excused, and these shapes are kept for the next feature that lags upstream's gates.
PENDING: frozenset[str] = frozenset()

_PLACEMENTS = re.compile(r"^0/\d+ placements are available, first placement status: ")
NOT_ELIGIBLE = "preemption: not eligible due to workload aware preemption enabled"
_OUR_PREEMPTION = re.compile(r"preemption: .*$")
_MARK = "preemption: <per-pod preemption of a pod-group member>"


def _pod_condition(up: str | None, ours: str | None) -> set[str] | None:
    """The features that explain two PodScheduled texts of the same pod; None if none does."""
    if up == ours:
        return set()
    if up is None or ours is None or NOT_ELIGIBLE not in up:
        return None
    if up.replace(NOT_ELIGIBLE, _MARK) == _OUR_PREEMPTION.sub(_MARK, ours):
        return {GROUP_PREEMPTION}
    return None


def explain_class(
    up: Sequence[tuple[str | None, str | None]], ours: Sequence[tuple[str | None, str | None]]
) -> set[str] | None:
    """(node, condition) outcomes of one class on each side (sorted): the features that explain every difference."""
    if len(up) != len(ours):
        return None
    features: set[str] = set()
    for (up_node, up_cond), (our_node, our_cond) in zip(sorted(up, key=str), sorted(ours, key=_by_marked), strict=True):
        if up_node != our_node:
            return None
        found = _pod_condition(up_cond, our_cond)
        if found is None:
            return None
        features |= found
    return features


def _by_marked(outcome: tuple[str | None, str | None]) -> str:
    node, cond = outcome
    return str((node, _OUR_PREEMPTION.sub(NOT_ELIGIBLE, cond) if cond else cond))


def explain_group(up: Sequence[str], ours: Sequence[str]) -> set[str] | None:
    """A PodGroup's conditions (``Type=Status/Reason: message``) on each side: the features explaining them."""
    if len(up) != len(ours):
        return None
    features: set[str] = set()
    for up_text, our_text in zip(up, ours, strict=True):
        if up_text == our_text:
            continue
        head, _, up_message = up_text.partition(": ")
        our_head, _, our_message = our_text.partition(": ")
        if head != our_head:
            return None
        stripped = _PLACEMENTS.sub("", up_message)
        if stripped != up_message:
            features.add(PLACEMENT)
        if stripped != our_message:
            if not stripped.startswith(our_message + ", "):
                return None
            features.add(GROUP_PREEMPTION)
    return features
