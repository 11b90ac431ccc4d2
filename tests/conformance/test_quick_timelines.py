"""The quick multi-step case of ``make test`` (a few minutes on 2 cores): upstream's default profile (``spec: {}``)
against kube-scheduler v1.36.3, each on a light control plane of its own, binding for real, over pinned
timelines of default_timelines.py (timeline_harness.py says how the states are compared after every step).

The pinned seeds cover, between them: a scheduling gate removed, a node tainted and deleted, a node selector no
node matches yet, pods deleted, a PVC that waits for its PV and binds once the PV is created, ResourceClaims and
ResourceSlices, a PodDisruptionBudget, and low and high priority classes (nominations, preemption's victims).
A seed on which a disagreement was found and fixed joins :data:`PINNED_SEEDS`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.default_timelines import generate_default_timeline
from tests.conformance.runner import DEFAULT_PROFILE
from tests.conformance.timeline_harness import TimelineHarness, TimelineResult

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

#: Seeds whose timelines the quick suite plays (chosen for what they cover; later: seeds of fixed regressions).
PINNED_SEEDS = (254, 1070)


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[TimelineResult]]:
    lines: list[str] = []
    work_dir: Path = tmp_path_factory.mktemp("timelines")
    harness = TimelineHarness([DEFAULT_PROFILE], work_dir=work_dir, log=lines.append, workload_aware=False)
    with harness:
        yield [harness.run_timeline(generate_default_timeline(seed, DEFAULT_PROFILE.name)) for seed in PINNED_SEEDS]


def test_pinned_default_timelines_agree_with_upstream(played: list[TimelineResult]) -> None:
    problems = [
        f"seed {r.seed} step {s.index} ({s.label}): {p}" for r in played for s in r.steps for p in s.problems
    ] + [f"seed {r.seed}: {r.error}" for r in played if r.error]
    assert not problems, "disagreements with kube-scheduler v1.36.3 (default profile):\n" + "\n".join(problems)
    assert all(r.diverged_on_tie is None for r in played), [r.diverged_on_tie for r in played]
    generated = {seed: len(generate_default_timeline(seed, DEFAULT_PROFILE.name).steps) for seed in PINNED_SEEDS}
    assert [len(r.steps) for r in played] == [generated[r.seed] for r in played]


def test_pods_wait_across_steps_and_events_wake_them(played: list[TimelineResult]) -> None:
    # What the timelines must show for the comparison to mean anything: a pod pending after one step and bound
    # after a later one (woken by an event or a backoff), a gated pod, a nomination or a victim.
    woken, gated = set(), set()
    for result in played:
        for before, after in zip(result.steps, result.steps[1:], strict=False):
            for name, text in before.upstream["pods"].items():
                if text.startswith("pending") and not after.upstream["pods"].get(name, "pending").startswith("pend"):
                    woken.add((result.seed, name))
                if "SchedulingGated" in text:
                    gated.add((result.seed, name))
    assert woken, "no pod waited in one step and was bound in a later one"
    assert gated, "no gated pod"
    features = {f for r in played for f in r.features}
    assert {"gate-removed", "volumes", "pv-created", "devices", "pdb", "preemption", "node-deleted"} <= features
