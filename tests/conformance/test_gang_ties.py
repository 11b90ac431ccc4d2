"""Unit tests of the placement-tie rule of the gang timelines (gang_ties.py; no cluster needed)."""

from __future__ import annotations

from typing import Any

from tests.conformance.gang_ties import tied_placements, top_placements_from_log
from tests.conformance.gang_timelines import (
    CLASS_ANNOTATION,
    RACK_KEY,
    Step,
    Timeline,
    _node,
    create,
    pod_group_manifest,
    pod_manifest,
)
from tests.conformance.timeline_state import compare, state_of, tie_explains

SCORE = 'I1128 09:17:04.399402   28626 schedule_one_podgroup.go:737] "Calculated placement\'s final score for podGroup"'


def _pod(name: str, klass: str, node: str | None) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": {CLASS_ANNOTATION: klass}}, "spec": {"nodeName": node}}


def _timeline() -> Timeline:
    """Seed 582091's shape: n0 and n3 in rack-0, n1 in rack-1, n2 in rack-2; gang pg0 constrained to one rack."""
    racks = {"n0": "rack-0", "n1": "rack-1", "n2": "rack-2", "n3": "rack-0"}
    nodes = [create(_node(name, 4000, 8, "zone-0", rack)) for name, rack in racks.items()]
    members = [create(pod_manifest(f"pg0-{i}", "ns", "p", 250, 512, klass="pg0", group="pg0")) for i in range(3)]
    group = create(pod_group_manifest("pg0", "ns", min_count=2, topology_key=RACK_KEY))
    return Timeline(1, "ns", "p", [Step("nodes", nodes), Step("gang pg0", [group, *members])])


def test_upstreams_last_placement_scoring_gives_the_tied_placements() -> None:
    log = [
        f'{SCORE} podGroup="ns/pg0" placement="rack-1" score=112',
        f'{SCORE} podGroup="ns/pg0" placement="rack-2" score=105',
        f'{SCORE} podGroup="ns/pg0" placement="rack-0" score=112',
        f'{SCORE} podGroup="other/pg0" placement="rack-2" score=300',
        f'{SCORE} podGroup="ns/pg1" placement="zone-0" score=105',
        f'{SCORE} podGroup="ns/pg1" placement="zone-1" score=106',
        # A later scoring of pg1 replaces the first.
        f'{SCORE} podGroup="ns/pg1" placement="zone-0" score=107',
        f'{SCORE} podGroup="ns/pg1" placement="zone-1" score=107',
    ]
    assert top_placements_from_log(log, "ns") == {"pg0": {"rack-0", "rack-1"}, "pg1": {"zone-0", "zone-1"}}
    tied = tied_placements(_timeline(), 1, {"pg0": {"rack-0", "rack-1"}, "pg1": {"zone-0"}})
    assert tied == {"pg0": [{"n0", "n3"}, {"n1"}]}


def test_a_gang_in_another_tied_placement_diverged_on_a_tie() -> None:
    placements = {"pg0": [{"n0", "n3"}, {"n1"}]}
    up = state_of([_pod(f"pg0-{i}", "pg0", "n3") for i in range(3)], [])
    ours = state_of([_pod(f"pg0-{i}", "pg0", "n1") for i in range(3)], [])
    problems = compare(up, ours)
    assert problems
    assert tie_explains(up, ours, problems, {}, ["pg0-0"], placements)
    # Not without upstream's tie, nor in a placement upstream scored lower (rack-2), nor split across placements.
    assert not tie_explains(up, ours, problems, {}, ["pg0-0"])
    elsewhere = state_of([_pod(f"pg0-{i}", "pg0", "n2") for i in range(3)], [])
    assert not tie_explains(up, elsewhere, compare(up, elsewhere), {}, ["pg0-0"], placements)
    split = state_of([_pod("pg0-0", "pg0", "n1"), *(_pod(f"pg0-{i}", "pg0", "n0") for i in (1, 2))], [])
    assert not tie_explains(up, split, compare(up, split), {}, ["pg0-0"], placements)
    # A member left pending on one side only is no tie either.
    fewer = state_of([_pod("pg0-0", "pg0", None), *(_pod(f"pg0-{i}", "pg0", "n1") for i in (1, 2))], [])
    assert not tie_explains(up, fewer, compare(up, fewer), {}, ["pg0-0"], placements)


def test_members_of_a_gang_gone_on_either_side_are_compared_as_a_multiset() -> None:
    # Seed 582093: the sides had swapped which pg4 member sat on which node; a filler then preempted the latest
    # started member on n1, pg4-3 upstream and pg4-2 ours. What is left of pg4 is the same multiset.
    up = state_of([_pod("pg4-0", "pg4", "n1"), _pod("pg4-1", "pg4", "n3"), _pod("pg4-2", "pg4", "n3")], [])
    ours = state_of([_pod("pg4-0", "pg4", "n3"), _pod("pg4-1", "pg4", "n1"), _pod("pg4-3", "pg4", "n3")], [])
    assert compare(up, ours) == []
    # One more gone on one side, or a member of another class gone instead, still differs.
    fewer = state_of([_pod("pg4-0", "pg4", "n3"), _pod("pg4-1", "pg4", "n1")], [])
    assert compare(up, fewer)[0].text == "pods only upstream has ['pg4-2'], only ours has []"
    other = state_of([_pod("pg4-0", "pg4", "n1"), _pod("pg4-1", "pg4", "n3"), _pod("pg5-0", "pg5", "n3")], [])
    assert compare(up, other)[0].text == "pods only upstream has ['pg4-2'], only ours has ['pg5-0']"
