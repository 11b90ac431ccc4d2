"""The quick gang timelines of ``make test`` (~1.5 min on 2 cores): a workload-aware profile against kube-scheduler
v1.36.3 with the four workload-aware gates on, each on a light control plane of its own, binding for real
(timeline_harness.py says how and why).

The pinned timeline walks through each behaviour of a gang once (PreEnqueue until minCount pods exist, the late
member that completes the gang, a gang that does not fit and its PodGroupScheduled condition, a member beyond
minCount, a plain pod beside them, a node added that wakes the unschedulable gang, members before their PodGroup).
Every step must agree, except the differences that a feature not yet on main explains (gang_known.py); those
are pinned too, so the test fails the day they disappear and the list must change with them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.gang_known import GROUP_PREEMPTION, PENDING, PLACEMENT
from tests.conformance.gang_timelines import pinned_timelines
from tests.conformance.timeline_harness import TimelineHarness, TimelineResult, workload_aware_profiles

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TimelineResult]:
    lines: list[str] = []
    work_dir: Path = tmp_path_factory.mktemp("gangs")
    profiles = workload_aware_profiles()
    assert [p.name for p in profiles] == ["gang-scheduling"], "the examples' workload-aware profiles changed"
    with TimelineHarness(profiles, work_dir=work_dir, log=lines.append, recheck=False) as harness:
        (timeline,) = pinned_timelines(profiles[0].name)
        yield harness.run_timeline(timeline)


def test_pinned_gang_timeline_agrees_with_upstream(pinned: TimelineResult) -> None:
    assert pinned.error is None, pinned.error
    assert pinned.diverged_on_tie is None
    problems = [f"step {s.index} ({s.label}): {p}" for s in pinned.steps for p in s.problems]
    assert not problems, "disagreements with kube-scheduler (gates on):\n" + "\n".join(problems)
    final = pinned.steps[-1].upstream
    # The timeline did what it says: every pod bound in the end, each group Scheduled.
    assert all(not text.startswith("pending") for text in final["pods"].values()), final
    assert set(final["groups"]) == {"a", "b", "c"}
    # Members wait at PreEnqueue without a condition until minCount of them exist.
    assert pinned.steps[1].upstream["pods"] == {"a-0": "pending", "a-1": "pending"}
    assert pinned.steps[1].ours["pods"] == pinned.steps[1].upstream["pods"]


def test_pending_feature_differences_are_still_there(pinned: TimelineResult) -> None:
    # Gang b does not fit (steps 3 and 4): upstream with the gates on words it as the placement algorithm and the
    # group's preemption do; main has neither yet. When a branch is merged, drop its feature from PENDING.
    unschedulable = pinned.steps[3]
    assert unschedulable.label.startswith("gang b")
    pending = " ".join(unschedulable.pending)
    if PLACEMENT in PENDING:
        assert f"[{PLACEMENT}" in pending, unschedulable.pending
        assert "0/1 placements are available" in pending
    if GROUP_PREEMPTION in PENDING:
        assert GROUP_PREEMPTION in pending
        assert "not eligible due to workload aware preemption" in pending
    assert all(not s.pending for i, s in enumerate(pinned.steps) if i not in (3, 4)), [s.pending for s in pinned.steps]
