"""The state a timeline compares after each step, and how two states differ (timeline_harness.py plays them).

Why a module of its own: what is compared (every pod's node, PodScheduled condition, nomination and whether it
is terminating; every PodGroup's conditions), how pods of one class compare as a multiset, and which differences a
tie upstream broke the other way explains are the harness's judgement; starting control planes and playing steps
is its mechanics. Upstream's counterpart is no code of its own: the states are read from the API server, as
``kubectl get pods -o wide`` and the PodGroups' conditions show them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tests.conformance import gang_known
from tests.conformance.gang_ties import placement_tie
from tests.conformance.gang_timelines import CLASS_ANNOTATION
from tests.conformance.oracle import parse_line


# -- the compared state -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PodOutcome:
    node: str | None
    condition: str | None  # "False/Unschedulable: message" of PodScheduled, None if absent
    nominated: str | None
    terminating: bool = False

    def sort_key(self) -> tuple[str, str, str, bool]:
        return (self.node or "", self.condition or "", self.nominated or "", self.terminating)

    def text(self) -> str:
        where = self.node or "pending"
        extra = f" nominated {self.nominated}" if self.nominated else ""
        gone = " (terminating)" if self.terminating else ""
        return f"{where}{gone}{extra}" + (f" [{self.condition}]" if self.condition else "")


@dataclass
class State:
    #: pod name → (class, outcome)
    pods: dict[str, tuple[str, PodOutcome]] = field(default_factory=dict)
    #: PodGroup name → its conditions, "Type=Status/Reason: message", sorted
    groups: dict[str, list[str]] = field(default_factory=dict)

    def key(self) -> str:
        return json.dumps([sorted((k, v[0], asdict(v[1])) for k, v in self.pods.items()), self.groups], default=str)

    def classes(self) -> dict[str, list[PodOutcome]]:
        out: dict[str, list[PodOutcome]] = {}
        for klass, outcome in self.pods.values():
            out.setdefault(klass, []).append(outcome)
        return {k: sorted(v, key=PodOutcome.sort_key) for k, v in out.items()}

    def summary(self) -> dict[str, Any]:
        return {
            "pods": {name: outcome.text() for name, (_k, outcome) in sorted(self.pods.items())},
            "groups": self.groups,
        }


def pod_outcome(pod: Mapping[str, Any]) -> PodOutcome:
    status = pod.get("status") or {}
    condition = None
    for cond in status.get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") != "True":
            condition = f"{cond.get('status')}/{cond.get('reason', '')}: {cond.get('message', '')}"
    return PodOutcome(
        node=(pod.get("spec") or {}).get("nodeName") or None,
        condition=condition,
        nominated=status.get("nominatedNodeName") or None,
        terminating=bool((pod.get("metadata") or {}).get("deletionTimestamp")),
    )


def group_conditions(group: Mapping[str, Any]) -> list[str]:
    return sorted(
        f"{c.get('type')}={c.get('status')}/{c.get('reason', '')}: {c.get('message', '')}"
        for c in (group.get("status") or {}).get("conditions") or ()
    )


def state_of(pods: Iterable[Mapping[str, Any]], groups: Iterable[Mapping[str, Any]]) -> State:
    state = State()
    for pod in pods:
        meta = pod.get("metadata") or {}
        if (meta.get("labels") or {}).get("probe") == "true":
            continue
        klass = (meta.get("annotations") or {}).get(CLASS_ANNOTATION) or str(meta.get("name"))
        state.pods[str(meta.get("name"))] = (klass, pod_outcome(pod))
    for group in groups:
        state.groups[str((group.get("metadata") or {}).get("name"))] = group_conditions(group)
    return state


@dataclass(frozen=True)
class Problem:
    text: str
    #: The features not yet on main that explain it exactly (gang_known.py); empty: a disagreement.
    pending: tuple[str, ...] = ()
    #: The pod class whose outcomes differ (None: another kind of difference).
    klass: str | None = None


def compare(upstream: State, ours: State, pending: frozenset[str] = gang_known.PENDING) -> list[Problem]:
    """Every difference: pods present on one side only, a class's outcomes, a PodGroup's conditions."""
    problems: list[Problem] = []
    only_up, only_ours = _only_one_side(upstream, ours), _only_one_side(ours, upstream)
    if only_up or only_ours:
        problems.append(Problem(f"pods only upstream has {only_up}, only ours has {only_ours}"))
    up_classes, our_classes = upstream.classes(), ours.classes()
    for klass in sorted(set(up_classes) | set(our_classes)):
        up, we = up_classes.get(klass, []), our_classes.get(klass, [])
        if up != we:
            text = f"{klass}: upstream {[o.text() for o in up]}, ours {[o.text() for o in we]}"
            features = (
                gang_known.explain_class(
                    [(o.node, o.condition) for o in up if not o.nominated and not o.terminating],
                    [(o.node, o.condition) for o in we if not o.nominated and not o.terminating],
                )
                if len(up) == len(we)
                else None
            )
            problems.append(Problem(text, _pending(features, pending), klass))
    for name in sorted(set(upstream.groups) | set(ours.groups)):
        up_group, our_group = upstream.groups.get(name), ours.groups.get(name)
        if up_group != our_group:
            text = f"PodGroup {name}: upstream {up_group}, ours {our_group}"
            features = gang_known.explain_group(up_group or [], our_group or []) if up_group and our_group else None
            problems.append(Problem(text, _pending(features, pending)))
    return problems


def _only_one_side(state: State, other: State) -> list[str]:
    """The pods only ``state`` has, but for as many of a class as ``other`` has of that class alone: members of a
    gang are interchangeable, so one side's preemption of pg4-3 where the other preempted pg4-2 (each the
    latest-started member on the node the preemptor took, their names swapped since an earlier step) is no
    difference (seed 582093); the class's outcomes are compared as a multiset."""
    mine, theirs = set(state.pods) - set(other.pods), set(other.pods) - set(state.pods)
    spare = Counter(other.pods[name][0] for name in theirs)
    found = []
    for name in sorted(mine):
        klass = state.pods[name][0]
        if spare[klass] > 0:
            spare[klass] -= 1
        else:
            found.append(name)
    return found


def _pending(features: set[str] | None, pending: frozenset[str]) -> tuple[str, ...]:
    """The explaining features, if every one of them is still pending."""
    if not features or not features <= pending:
        return ()
    return tuple(sorted(features))


def tie_explains(
    upstream: State,
    ours: State,
    problems: Sequence[Problem],
    top_sets: Mapping[str, set[str]],
    order: Sequence[str] = (),
    placements: Mapping[str, Sequence[set[str]]] | None = None,
) -> bool:
    """The first difference is a tie upstream broke the other way: it puts pods of a class on other nodes of
    upstream's highest-score sets for that class, or (``placements``: class → the node sets of the placements
    upstream scored alike for its PodGroup, gang_ties.py) inside another of those placements. "First" is by
    ``order`` (the pods the step created, in order; every later difference may follow from it, as the next pod
    of a burst scores nodes the tie filled otherwise); without any pod of ``order`` among them, every difference
    must be such a tie."""
    unexplained = [p for p in problems if not p.pending]
    if not unexplained or any(p.klass is None for p in unexplained):
        return False
    classes = {p.klass for p in unexplained if p.klass is not None}
    position = {name: i for i, name in enumerate(order)}
    rank = {
        klass: min(
            (position.get(name, len(order)) for name, (k, _o) in upstream.pods.items() if k == klass),
            default=len(order),
        )
        for klass in classes
    }
    first = min(classes, key=lambda klass: (rank[klass], klass))
    judged = [first] if rank[first] < len(order) else sorted(classes)
    placements = placements or {}
    return all(
        _class_tie(upstream, ours, klass, top_sets) or placement_tie(upstream, ours, klass, placements.get(klass, ()))
        for klass in judged
    )


def _class_tie(upstream: State, ours: State, klass: str, top_sets: Mapping[str, set[str]]) -> bool:
    up, we = upstream.classes().get(klass, []), ours.classes().get(klass, [])
    extra_up, extra_ours = Counter(up) - Counter(we), Counter(we) - Counter(up)
    ties = set().union(*(top_sets.get(name, set()) for name, (k, _o) in upstream.pods.items() if k == klass))
    if len(ties) < 2 or sum(extra_up.values()) != sum(extra_ours.values()):
        return False
    if _without_nodes(extra_up) != _without_nodes(extra_ours):
        return False
    return all(o.node in ties for o in extra_ours) and all(o.node in ties for o in extra_up)


def _without_nodes(outcomes: Counter[PodOutcome]) -> Counter[tuple[str | None, str | None, bool]]:
    found: Counter[tuple[str | None, str | None, bool]] = Counter()
    for outcome, count in outcomes.items():
        found[(outcome.condition, outcome.nominated, outcome.terminating)] += count
    return found


def changes(old: State, new: State) -> list[str]:
    """What changed between two states of one side (for a state that never settles)."""
    found = [
        f"{name}: {old.pods[name][1].text() if name in old.pods else None} -> {outcome.text()}"
        for name, (_k, outcome) in sorted(new.pods.items())
        if name not in old.pods or old.pods[name][1] != outcome
    ]
    found += [f"PodGroup {name}: {old.groups.get(name)} -> {conds}" for name, conds in new.groups.items()
              if old.groups.get(name) != conds]  # fmt: skip
    return found


def top_sets_from_log(lines: Iterable[str], namespace: str) -> dict[str, set[str]]:
    """Pod name → upstream's highest-total nodes in the evaluation that preceded its bind (in ``namespace``)."""
    scores: dict[str, dict[str, int]] = {}
    tops: dict[str, set[str]] = {}
    prefix = f"{namespace}/"
    for line in lines:
        if f'pod="{prefix}' not in line:
            continue
        parsed = parse_line(line)
        if parsed is None:
            continue
        _source, message, kv = parsed
        pod = kv.get("pod", "")
        if not pod.startswith(prefix):
            continue
        name = pod[len(prefix) :]
        if message == "Calculated node's final score for pod":
            current = scores.setdefault(name, {})
            if kv["node"] in current:  # a new evaluation of the same pod (another cycle or placement)
                current.clear()
            current[kv["node"]] = int(kv["score"])
        elif message == "Attempting to bind pod to node":
            current = scores.pop(name, {})
            if current:
                best = max(current.values())
                tops[name] = {node for node, score in current.items() if score == best}
            else:
                tops[name] = {kv["node"]}
    return tops
