"""timeline_replay.explain against a fake harness: a step agrees only when a replay of upstream reaches our states
at every step up to it, and the first run's differences stay on record."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.conformance import timeline_replay
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
