"""The monitoring metrics kube-scheduler has and kopf-scheduler adds in issue 13: what the queue counts
(``scheduler_queue_incoming_pods_total``, ``scheduler_unschedulable_pods``), the sampled plugin durations, the
active-peer gauge, build info and the process collectors."""

from __future__ import annotations

import random
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kopf_scheduler import cli
from kopf_scheduler.api.profile import SchedulerProfileSpec
from kopf_scheduler.framework.builder import resolve_profile
from kopf_scheduler.framework.cycle_state import CycleState
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.metrics import KUBE_BEHAVIOUR_VERSION, SchedulerMetrics, sample_plugin_metrics
from kopf_scheduler.plugins.registry import default_registry
from tests.unit.factories import FakeHandle, make_cache, make_node, make_pod, node_event, pod_info, slots
from tests.unit.test_queue import big_node, fail, new_queue, pod, pop, reject


def samples(metrics: SchedulerMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = generate_latest(metrics.registry).decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_queue_incoming_pods_counts_each_entry_by_queue_and_event() -> None:
    events: list[tuple[str, str]] = []
    queue, clock = new_queue(on_incoming=lambda q, e: events.append((q, e)))
    queue.add(pod("a"))
    queue.add(pod("gated", gates=["g"]))
    assert events == [("active", "UnschedulablePodAdd"), ("unschedulable", "UnschedulablePodAdd")]
    events.clear()
    qpod = pop(queue)
    fail(queue, qpod, "NodeResourcesFit")  # no event since: parked
    assert events == [("unschedulable", "ScheduleAttemptFailure")]
    events.clear()
    node_event(queue, None, big_node())
    assert events == [("backoff", "NodeAdd")]  # still backing off
    events.clear()
    clock.advance(30)
    queue.flush_backoff_completed()
    assert events == [("active", "BackoffComplete")]


def test_pop_from_backoff_counts_as_an_entry_to_active() -> None:
    events: list[tuple[str, str]] = []
    queue, _ = new_queue(on_incoming=lambda q, e: events.append((q, e)))
    qpod = reject(queue, pod("a"), "NodeResourcesFit")
    node_event(queue, None, big_node())
    events.clear()
    assert pop(queue).uid == qpod.uid  # activeQ empty: taken from backoffQ early
    assert events == [("active", "PopFromBackoffQ")]


def test_unschedulable_plugins_counts_queued_pods_until_they_are_popped() -> None:
    queue, _ = new_queue()
    reject(queue, pod("a"), "NodeResourcesFit", "TaintToleration")
    queue.add(pod("gated", gates=["g"]))
    assert queue.unschedulable_plugins() == {"NodeResourcesFit": 1, "TaintToleration": 1, "SchedulingGates": 1}
    node_event(queue, None, big_node())
    assert queue.unschedulable_plugins()["NodeResourcesFit"] == 1  # moved to backoffQ, still counted
    pop(queue)  # in flight: no longer counted, as upstream's Dec on pop
    assert queue.unschedulable_plugins() == {"SchedulingGates": 1}
    queue.delete("uid-gated")
    assert queue.unschedulable_plugins() == {}


def test_unschedulable_pods_gauge_drops_plugins_to_zero() -> None:
    metrics = SchedulerMetrics()
    metrics.set_unschedulable("p", {"NodeResourcesFit": 2, "TaintToleration": 1})
    metrics.set_unschedulable("p", {"TaintToleration": 3})
    assert samples(metrics, "scheduler_unschedulable_pods") == {
        (("plugin", "NodeResourcesFit"), ("profile", "p")): 0.0,
        (("plugin", "TaintToleration"), ("profile", "p")): 3.0,
    }


def test_plugin_durations_are_sampled_in_a_tenth_of_cycles() -> None:
    rng = random.Random(7)
    sampled = sum(sample_plugin_metrics(rng) for _ in range(20000))
    assert 1800 < sampled < 2200
    assert CycleState().record_plugin_metrics is False
    state = CycleState()
    state.record_plugin_metrics = True
    assert state.clone().record_plugin_metrics is True


def _default_framework(observe: Any) -> Framework:
    resolved = resolve_profile("default-scheduler", SchedulerProfileSpec(), default_registry())
    cache = make_cache([make_node(f"n{i}", cpu="4", memory="8Gi") for i in range(3)])
    return Framework(resolved, default_registry(), FakeHandle(cache), observe_plugin=observe)


def _cycle(framework: Framework, state: CycleState) -> None:
    snapshot = framework.handle.snapshot()
    pod = pod_info(make_pod("p", requests={"cpu": "1"}))
    framework.run_pre_filter_plugins(state, pod, snapshot)
    outcome = framework.run_filter_plugins(state, pod, slots(snapshot), snapshot)
    framework.run_pre_score_plugins(state, pod, outcome.feasible, snapshot)
    framework.run_score_plugins(state, pod, outcome.feasible, snapshot)


def test_the_framework_observes_plugins_only_in_sampled_cycles() -> None:
    observed: list[tuple[str, str, str, float]] = []
    framework = _default_framework(lambda *args: observed.append(args))
    _cycle(framework, CycleState())
    assert observed == []
    state = CycleState()
    state.record_plugin_metrics = True
    _cycle(framework, state)
    points = {(plugin, point, status) for plugin, point, status, _ in observed}
    assert ("NodeResourcesFit", "Filter", "Success") in points
    assert ("NodeResourcesFit", "PreFilter", "Success") in points
    assert any(point == "Score" for _, point, _ in points)
    assert all(seconds >= 0 for *_, seconds in observed)
    metrics = SchedulerMetrics()
    metrics.observe_plugin("NodeResourcesFit", "Filter", "Success", 0.00002)
    buckets = samples(metrics, "scheduler_plugin_execution_duration_seconds_bucket")
    assert len(buckets) == 21  # upstream's 20 buckets (10µs·1.5^k) and +Inf
    assert (
        buckets[(("extension_point", "Filter"), ("le", "1e-05"), ("plugin", "NodeResourcesFit"), ("status", "Success"))]
        == 0
    )


def test_active_peer_gauge_build_info_and_process_collectors() -> None:
    metrics = SchedulerMetrics()
    active = {"now": False}
    metrics.track_active("kopf-scheduler", lambda: active["now"])
    assert samples(metrics, "leader_election_master_status") == {(("name", "kopf-scheduler"),): 0.0}
    active["now"] = True
    assert samples(metrics, "leader_election_master_status") == {(("name", "kopf-scheduler"),): 1.0}
    (labels,) = samples(metrics, "kopf_scheduler_build_info")
    assert dict(labels)["kube_version"] == KUBE_BEHAVIOUR_VERSION == cli.TARGET_KUBE_VERSION
    assert samples(metrics, "process_resident_memory_bytes")
    assert samples(metrics, "python_info")
    metrics.queue_incoming("active", "NodeAdd")
    assert samples(metrics, "scheduler_queue_incoming_pods_total") == {(("event", "NodeAdd"), ("queue", "active")): 1.0}


def test_attempts_are_counted_by_result_and_profile_and_the_sli_by_attempts() -> None:
    """The per-cycle metrics keep their labelled children: each (result, profile) and attempts label counts
    on its own, however often it is observed."""
    metrics = SchedulerMetrics()
    for result, profile in [("scheduled", "a"), ("scheduled", "a"), ("unschedulable", "a"), ("scheduled", "b")]:
        metrics.observe_attempt(result=result, profile=profile, seconds=0.002)
    for attempts in (1, 1, 3, 20):
        metrics.observe_scheduled(attempts=attempts, seconds_since_first_enqueue=0.5)
    assert samples(metrics, "scheduler_schedule_attempts_total") == {
        (("profile", "a"), ("result", "scheduled")): 2.0,
        (("profile", "a"), ("result", "unschedulable")): 1.0,
        (("profile", "b"), ("result", "scheduled")): 1.0,
    }
    counts = samples(metrics, "scheduler_pod_scheduling_sli_duration_seconds_count")
    assert counts == {(("attempts", "1"),): 2.0, (("attempts", "3"),): 1.0, (("attempts", "15+"),): 1.0}
