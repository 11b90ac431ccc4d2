"""When a timeline's step disagrees: replay upstream alone, from the start, and see whether it reaches our states.

Why. A timeline's outcome can hang on when, within a second, the harness's actions land against a scheduler's
backoff windows: upstream retries pod-group members on backoff only ("event-based requeueing logic is not yet
implemented for pod group level", ``determineSchedulingHintForInFlightPod``), and with SchedulerPopFromBackoffQ a
member whose backoff window is the oldest is popped early each time a whole second passes; after a group's
preemption, a lower-priority member may take the freed room before the last victim goes, or not. Upstream against
itself gives either outcome, and a single run of it is one draw. Calling such a difference a race in advance would
excuse real bugs; so the harness asks upstream for evidence instead.

How (:func:`explain`): on a step whose differences neither a tie nor a pending feature explains, the upstream
cluster is emptied (the timeline's pods, PodGroups, objects and nodes deleted, upstream's queues drained) and the
same timeline is played on it alone, step by step, up to and including the disagreeing step, up to
:data:`REPLAYS` times. After each replayed step upstream's settled state is compared with the state *ours* had
after that step in the run (the same comparison as the run's, with the same recheck after the longest backoff).
When one replay matches ours at every step, upstream itself produced our outcome from the same actions: the step
agrees, its first-run differences are kept in the report (``replayed``, with the replay's number), and the timeline
goes on from there on both sides, upstream's cluster now in our state. When no replay does, the step stays a
disagreement. Our side is never replayed: the question is only whether our outcome is one of upstream's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tests.e2e.operator_process import metric_value

if TYPE_CHECKING:
    from tests.conformance.gang_timelines import Timeline
    from tests.conformance.timeline_harness import Side, StepResult, TimelineHarness
    from tests.conformance.timeline_state import State

#: How many times upstream is replayed before a difference stays a disagreement.
REPLAYS = 3
#: Seconds to wait for upstream's cluster and queues to empty before a replay.
DRAIN_TIMEOUT = 60.0


def explain(harness: TimelineHarness, timeline: Timeline, step: StepResult, ours: Sequence[State]) -> bool:
    """Replay upstream up to ``step``; True (and ``step`` marked agreeing, its differences kept as ``replayed``)
    when one replay reached ``ours`` (our state after each step so far) at every step."""
    for attempt in range(1, harness.replays + 1):
        harness.log(
            f"seed {timeline.seed}: step {step.index} differs; replaying upstream alone up to it "
            f"({attempt}/{harness.replays})"
        )
        reached = replay(harness, timeline, ours)
        if reached == len(ours):
            harness.log(f"seed {timeline.seed}: upstream reached our states on replay {attempt}")
            step.replayed, step.problems, step.upstream_replay = step.problems, [], attempt
            return True
        harness.log(f"seed {timeline.seed}: replay {attempt} left our states at step {reached}")
    return False


def replay(harness: TimelineHarness, timeline: Timeline, ours: Sequence[State]) -> int:
    """Play ``timeline`` on upstream alone from an empty cluster; the number of steps whose state equals ours."""
    side = harness.upstream
    side.cleanup(timeline)
    _drain(side, timeline.namespace)
    side.ensure_namespace(timeline.namespace)
    for index, (step, our_state) in enumerate(zip(timeline.steps, ours, strict=False)):
        harness.apply_step(timeline, step, (side,))
        if not _matches(harness, timeline.namespace, side, our_state):
            return index
        if timeline.needs_start_times:
            side.give_start_times(timeline.namespace)
    return len(ours)


def _matches(harness: TimelineHarness, namespace: str, side: Side, ours: State) -> bool:
    """Upstream's settled state equals ``ours``, now or after the run's recheck (the longest backoff)."""
    for attempt in range(2):
        if attempt:
            time.sleep(harness.recheck_seconds)
        (upstream,) = harness.settle(namespace, (side,))
        if not any(not p.pending for p in harness.differences(upstream, ours)):
            return True
        if not harness.recheck:
            break
    return False


def _drain(side: Side, namespace: str) -> None:
    """Wait until ``namespace`` holds no pod and no PodGroup and upstream's queues hold nothing."""
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while time.monotonic() < deadline:
        state = side.snapshot(namespace)
        if not state.pods and not state.groups and metric_value(side.metrics_text(), "scheduler_pending_pods") == 0:
            return
        time.sleep(0.25)
    raise TimeoutError(f"{side.name}'s cluster did not empty within {DRAIN_TIMEOUT:.0f}s before a replay")
