"""Upstream's random choices in the gang timelines: placement ties, and the random order of placements.

Why: with TopologyAwareWorkloadScheduling, upstream's pod-group cycle tries every placement the
TopologyPlacementGenerator offers (one per domain of the PodGroup's topology key), scores the ones that fit
(PodGroupPodsCount, NodeResourcesFit's placement score) and takes the highest total, a tie broken by
``rand.Int()`` (``findBestPlacement`` in schedule_one_podgroup.go). A gang whose members fit in two racks alike
therefore lands in either: on seed 582091 upstream scored rack-0 and rack-1 112 each for pg0, and put it in
rack-0 where ours once chose rack-1 (and rack-0 on the next run). Node-score ties (``top_sets_from_log``)
do not see it: within the placement each member's best node is unique. So upstream's placement scores are read
from its log (``--vmodule=schedule_one_podgroup=10``: "Calculated placement's final score for podGroup"), and a
class whose pods are all in one tied placement on each side, different ones, diverged on a tie.

The placements themselves come out of a Go map (``nodesPerTopologyDomain``), in random order, and when none fits
the members' messages are those of the first one tried (``anyResult``): an unschedulable topology-constrained
gang is worded differently from cycle to cycle, and upstream may go on retrying it for as long as the timeline
runs (seed 582087: a rack-constrained gang of five that no rack holds, retried every few ten milliseconds for
minutes, its members' messages changing with the first placement). Ours tries the domains in node-tree order,
one of upstream's orders. Such a step settles on its structure (:func:`structure_key`) and a class agrees when
upstream showed its outcomes in one of the states it cycled through (:func:`churn_explains`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from tests.conformance.gang_timelines import Timeline
from tests.conformance.oracle import parse_line

if TYPE_CHECKING:
    from tests.conformance.timeline_state import Problem, State

#: Upstream's log line with a placement's total score (schedule_one_podgroup.go, V(10)).
PLACEMENT_SCORE = "Calculated placement's final score for podGroup"


def top_placements_from_log(lines: Iterable[str], namespace: str) -> dict[str, set[str]]:
    """PodGroup name → the placements of the highest total in upstream's last placement scoring of it (in
    ``namespace``). Only groups with two or more feasible placements are scored at all."""
    scores: dict[str, dict[str, int]] = {}
    tops: dict[str, set[str]] = {}
    prefix = f"{namespace}/"
    for line in lines:
        if PLACEMENT_SCORE not in line or f'podGroup="{prefix}' not in line:
            continue
        parsed = parse_line(line)
        if parsed is None or parsed[1] != PLACEMENT_SCORE:
            continue
        kv = parsed[2]
        group = kv.get("podGroup", "")[len(prefix) :]
        current = scores.setdefault(group, {})
        if kv.get("placement", "") in current:  # a new scoring of the same group (another cycle)
            current.clear()
        current[kv.get("placement", "")] = int(kv["score"])
        best = max(current.values())
        tops[group] = {name for name, score in current.items() if score == best}
    return tops


def tied_placements(timeline: Timeline, upto: int, top_placements: Mapping[str, set[str]]) -> dict[str, list[set[str]]]:
    """Pod class → the node sets of the placements upstream's scoring tied for the class's PodGroup (two or
    more), from the timeline's nodes and PodGroups of steps ``0..upto``."""
    labels: dict[str, dict[str, str]] = {}
    keys: dict[str, str] = {}
    groups: dict[str, str] = {}
    for step in timeline.steps[: upto + 1]:
        for action in step.actions:
            body = action.body or {}
            if action.verb != "create":
                continue
            if action.kind == "Node":
                labels[action.name] = dict(body["metadata"].get("labels") or {})
            elif action.kind == "PodGroup":
                topology = (body["spec"].get("schedulingConstraints") or {}).get("topology") or []
                if topology:
                    keys[action.name] = str(topology[0]["key"])
            elif action.kind == "Pod":
                group = (body["spec"].get("schedulingGroup") or {}).get("podGroupName")
                klass = (body["metadata"].get("annotations") or {}).get("conformance.kopf-scheduler.io/class")
                if group and klass:
                    groups[str(klass)] = str(group)
    found: dict[str, list[set[str]]] = {}
    for klass, group in groups.items():
        tied, key = top_placements.get(group, set()), keys.get(group)
        if len(tied) < 2 or key is None:
            continue
        found[klass] = [{node for node, own in labels.items() if own.get(key) == domain} for domain in sorted(tied)]
    return found


def placement_tie(upstream: State, ours: State, klass: str, placements: Sequence[set[str]]) -> bool:
    """Both sides bound the class's pods inside one tied placement each, different ones, and the rest of their
    outcomes (conditions, nominations) is the same."""
    up, we = upstream.classes().get(klass, []), ours.classes().get(klass, [])
    if len(up) != len(we) or len(placements) < 2:
        return False
    rest = Counter((o.condition, o.nominated, o.terminating, o.node is None) for o in up)
    if rest != Counter((o.condition, o.nominated, o.terminating, o.node is None) for o in we):
        return False

    def placement_of(nodes: set[str]) -> int | None:
        inside = [i for i, members in enumerate(placements) if nodes and nodes <= members]
        return inside[0] if len(inside) == 1 else None

    up_at = placement_of({o.node for o in up if o.node})
    our_at = placement_of({o.node for o in we if o.node})
    return up_at is not None and our_at is not None and up_at != our_at


# -- placement order: messages that never settle -------------------------------------------------------------
#: How long upstream's pods may keep changing only their PodScheduled messages (nodes, nominations, reasons and
#: PodGroup conditions unchanged) before the step counts as settled on the messages upstream cycles through.
CHURN = 10.0


def structure_key(state: State) -> str:
    """The state without the pods' PodScheduled messages (status and reason kept): what must settle."""
    pods = sorted(
        (name, klass, o.node, (o.condition or "").partition(": ")[0], o.nominated, o.terminating)
        for name, (klass, o) in state.pods.items()
    )
    return json.dumps([pods, state.groups], default=str)


def churn_explains(problem: Problem, ours: State, variants: Sequence[State]) -> bool:
    """A difference in a class whose outcomes upstream did show, in one of the states it cycled through while its
    messages never settled (``variants``): upstream tries a gang's placements in Go's random map order and words
    each member's message after the first one, so an unschedulable gang with two or more placements reads one
    way or another from cycle to cycle."""
    if problem.klass is None or not variants:
        return False
    mine = ours.classes().get(problem.klass)
    return any(variant.classes().get(problem.klass) == mine for variant in variants)
