"""The harness's own judgement against fakes: timeline_replay.explain (a step agrees only when a replay of upstream
reaches our states at every step up to it, and the first run's differences stay on record) and the node sync's
probes (a probe judged before the last node arrived is replaced)."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conformance import timeline_harness, timeline_replay
from tests.conformance.gang_timelines import Step, Timeline
from tests.conformance.timeline_harness import StepResult
from tests.conformance.timeline_state import PodOutcome, State, compare


def _state(**nodes: str | None) -> State:
    return State(pods={name: (name, PodOutcome(node, None, None)) for name, node in nodes.items()})


class _FakeUpstream:
    """Upstream's side: each replay yields the next of ``draws`` (one state per step), as a racy scheduler would."""

    name = "upstream"

    def __init__(self, draws: Sequence[Sequence[State]]) -> None:
        self.draws = list(draws)
        self.replay = -1
        self.step = -1
        self.cleanups = 0

    def cleanup(self, timeline: Timeline) -> None:
        self.cleanups += 1
        self.replay += 1
        self.step = -1

    def snapshot(self, namespace: str) -> State:
        return State() if self.step < 0 else self.draws[self.replay][self.step]

    def metrics_text(self) -> str:
        return 'scheduler_pending_pods{queue="active"} 0\n'

    def ensure_namespace(self, namespace: str) -> None:
        pass

    def give_start_times(self, namespace: str) -> None:
        pass


class _FakeHarness:
    recheck = True
    recheck_seconds = 0.0

    def __init__(self, upstream: _FakeUpstream, replays: int = timeline_replay.REPLAYS) -> None:
        self.upstream = upstream
        self.replays = replays
        self.logged: list[str] = []

    def log(self, text: str) -> None:
        self.logged.append(text)

    def apply_step(self, timeline: Timeline, step: Step, sides: Sequence[Any]) -> dict[str, list[str]]:
        assert list(sides) == [self.upstream]  # our side is never replayed
        self.upstream.step += 1
        return {}

    def settle(self, namespace: str, sides: Sequence[Any]) -> tuple[State, ...]:
        return (self.upstream.snapshot(namespace),)

    def differences(self, upstream: State, ours: State) -> list[Any]:
        return compare(upstream, ours)


TIMELINE = Timeline(seed=7, namespace="gang-7", profile="p", steps=[Step("a", []), Step("b", []), Step("c", [])])
OURS = [_state(a="n1"), _state(a="n1", b="n2")]
OTHER = _state(a="n1", b="n3")


def _disagreeing_step() -> StepResult:
    return StepResult(1, "b", ["b: upstream ['n3'], ours ['n2']"], {}, {})


def test_a_replay_of_upstream_that_reaches_our_states_makes_the_step_agree() -> None:
    upstream = _FakeUpstream([[OURS[0], OTHER], [OURS[0], OURS[1]], [OURS[0], OTHER]])
    step = _disagreeing_step()
    assert timeline_replay.explain(_FakeHarness(upstream), TIMELINE, step, OURS)  # type: ignore[arg-type]
    assert step.agree
    assert step.upstream_replay == 2
    assert step.replayed == ["b: upstream ['n3'], ours ['n2']"]
    assert upstream.cleanups == 2  # stopped at the replay that matched


def test_a_difference_upstream_never_reproduces_stays_a_disagreement() -> None:
    upstream = _FakeUpstream([[OURS[0], OTHER]] * 3)
    step = _disagreeing_step()
    assert not timeline_replay.explain(_FakeHarness(upstream), TIMELINE, step, OURS)  # type: ignore[arg-type]
    assert not step.agree
    assert step.upstream_replay is None
    assert not step.replayed
    assert upstream.cleanups == timeline_replay.REPLAYS


def test_an_earlier_step_must_match_too() -> None:
    # The disagreeing step matches, but upstream's replay left our state at the step before: not evidence.
    upstream = _FakeUpstream([[_state(a="n9"), OURS[1]]] * 3)
    step = _disagreeing_step()
    assert not timeline_replay.explain(_FakeHarness(upstream), TIMELINE, step, OURS)  # type: ignore[arg-type]
    assert step.problems


def test_no_replays_asked_leaves_upstream_alone() -> None:
    upstream = _FakeUpstream([[OURS[0], OURS[1]]])
    step = _disagreeing_step()
    assert not timeline_replay.explain(_FakeHarness(upstream, replays=0), TIMELINE, step, OURS)  # type: ignore[arg-type]
    assert upstream.cleanups == 0
    assert step.problems


class _ProbedCore:
    """A side's API: each probe is judged once, against the nodes its scheduler held then (``counts`` in turn)."""

    def __init__(self, counts: Sequence[int]) -> None:
        self.counts = list(counts)
        self.judged: dict[str, int] = {}
        self.created: list[str] = []
        self.deleted: list[str] = []

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        self.created.append(name)
        self.judged[name] = self.counts.pop(0) if len(self.counts) > 1 else self.counts[0]

    def read_namespaced_pod(self, name: str, namespace: str) -> Any:
        message = f"0/{self.judged[name]} nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
        condition = SimpleNamespace(type="PodScheduled", message=message)
        return SimpleNamespace(status=SimpleNamespace(conditions=[condition]))

    def delete_namespaced_pod(self, name: str, namespace: str, grace_period_seconds: int) -> None:
        self.deleted.append(name)


def test_a_probe_judged_before_the_last_node_arrived_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    # Seen on seed 163272: upstream judged the probe between a step's second and third node (0/2), and a node that
    # does not match the probe's selector never wakes it. A fresh probe reads the cache as it is now.
    monkeypatch.setattr(timeline_harness, "PROBE_PATIENCE", 0.05)
    monkeypatch.setattr(timeline_harness, "POLL", 0.01)
    core = _ProbedCore([2, 3])
    side = SimpleNamespace(name="upstream", core=core, ensure_namespace=lambda namespace: None, node_count=lambda: 3)
    harness = timeline_harness.TimelineHarness.__new__(timeline_harness.TimelineHarness)
    harness._probes = 0
    harness._sync_nodes("ns", "p", [side])  # type: ignore[list-item]
    assert core.created == ["probe-1", "probe-2"]
    assert core.deleted == ["probe-1", "probe-2"]


def test_a_scheduler_that_never_sees_the_nodes_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timeline_harness, "PROBE_PATIENCE", 0.02)
    monkeypatch.setattr(timeline_harness, "POLL", 0.01)
    monkeypatch.setattr(timeline_harness, "SYNC_TIMEOUT", 0.1)
    core = _ProbedCore([2])
    side = SimpleNamespace(name="ours", core=core, ensure_namespace=lambda namespace: None, node_count=lambda: 3)
    harness = timeline_harness.TimelineHarness.__new__(timeline_harness.TimelineHarness)
    harness._probes = 0
    with pytest.raises(TimeoutError, match="ours's scheduler did not see the cluster's nodes"):
        harness._sync_nodes("ns", "p", [side])  # type: ignore[list-item]
    assert len(core.created) >= 2
    assert core.deleted == core.created
