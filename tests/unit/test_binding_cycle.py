"""The end of the scheduling cycle and the binding cycle on a bare framework: assume, Reserve, Permit
(``schedule_one.assume_and_reserve``), then PreBindPreFlight, WaitOnPermit, PreBind, Bind, PostBind and the
undoing of it all on failure (``schedule_one.bind_pod``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kopf_scheduler.algorithm import FitError, ScheduleResult, SchedulingError, run_post_filter, schedule_pod
from kopf_scheduler.framework import APIError, Code, CycleState, ExtensionPoint, Status
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.schedule_one import assume_and_reserve, bind_pod
from kopf_scheduler.state.cache import ClusterCache
from tests.unit.factories import make_cache, make_node, make_pod, pod_info
from tests.unit.test_runtime import (  # shared fakes
    CALLS,
    _reset_calls,  # noqa: F401  (autouse fixture clearing the call log)
    build,
    calls,
    lifecycle,
    post_filter,
)

E = ExtensionPoint
U = Status.unschedulable


def cluster(count: int) -> ClusterCache:
    return make_cache([make_node(f"n{i:04d}") for i in range(count)])


def scheduled(framework: Framework, pod: Any) -> ScheduleResult:
    return schedule_pod(framework, CycleState(), pod, framework.handle.snapshot())


def test_assume_and_reserve_then_bind() -> None:
    cache = cluster(1)
    framework = build(
        [lifecycle("L")],
        {E.RESERVE: ("L",), E.PERMIT: ("L",), E.PRE_BIND: ("L",), E.BIND: ("L",), E.POST_BIND: ("L",)},
        cache=cache,
    )
    pod = pod_info(make_pod("web"))
    state = CycleState()
    result = scheduled(framework, pod)
    assumed = assume_and_reserve(framework, state, pod, result, cache)
    assert cache.is_assumed(pod.uid)
    assert assumed.node_name == "n0000"
    assert int(cache.table.pod_count[result.slot]) == 1
    status = asyncio.run(bind_pod(framework, state, assumed, result, cache))
    assert status.is_success
    assert [method for _, method, _ in CALLS] == [
        "reserve",
        "permit",
        "pre_bind",
        "bind",
        "post_bind",
    ]
    assert cache.is_assumed(pod.uid)


def test_reserve_rejection_undoes_the_assumption_with_a_one_node_fit_error() -> None:
    cache = cluster(3)
    framework = build([lifecycle("Quota", reserve=U("quota exceeded"))], {E.RESERVE: ("Quota",)}, cache=cache)
    pod = pod_info(make_pod())
    result = scheduled(framework, pod)
    with pytest.raises(FitError) as info:
        assume_and_reserve(framework, CycleState(), pod, result, cache)
    assert info.value.message == "0/1 nodes are available: 1 quota exceeded."
    assert info.value.diagnosis.all_unschedulable_plugins() == {"Quota"}
    assert cache.pod(pod.uid) is None
    assert int(cache.table.pod_count.sum()) == 0
    assert [name for name, _ in calls("unreserve")] == ["Quota"]


def test_post_filter_runs_after_the_node_search_but_not_after_a_reserve_rejection() -> None:
    """Upstream runs PostFilter (preemption) only when the search found no node; a Reserve or Permit rejection
    of the chosen node is a one-node FitError without it (and without the ``preemption: ...`` text)."""
    cache = cluster(1)
    plugins = [lifecycle("Quota", reserve=U("quota exceeded")), post_filter("Preempt", U("no victims"))]
    points = {E.RESERVE: ("Quota",), E.POST_FILTER: ("Preempt",)}
    framework = build(plugins, points, cache=cache)
    pod = pod_info(make_pod())
    with pytest.raises(FitError) as rejected:
        assume_and_reserve(framework, CycleState(), pod, scheduled(framework, pod), cache)
    assert run_post_filter(framework, CycleState(), pod, rejected.value) is None
    assert calls("post_filter") == []
    assert rejected.value.message == "0/1 nodes are available: 1 quota exceeded."

    searched = FitError(pod, 1, rejected.value.diagnosis)  # as the node search raises it
    run_post_filter(framework, CycleState(), pod, searched)
    assert [name for name, _ in calls("post_filter")] == ["Preempt"]
    assert searched.message == "0/1 nodes are available: 1 quota exceeded. no victims"


def test_permit_error_is_a_scheduling_error() -> None:
    cache = cluster(1)
    framework = build(
        [lifecycle("P", permit=(Status.as_error(RuntimeError("denied")), 0.0))],
        {E.RESERVE: ("P",), E.PERMIT: ("P",)},
        cache=cache,
    )
    pod = pod_info(make_pod())
    with pytest.raises(SchedulingError, match='running Permit plugin "P": denied'):
        assume_and_reserve(framework, CycleState(), pod, scheduled(framework, pod), cache)
    assert cache.pod(pod.uid) is None
    assert [name for name, _ in calls("unreserve")] == ["P"]


def test_bind_failure_unreserves_and_forgets() -> None:
    cache = cluster(1)
    framework = build(
        [lifecycle("B", bind=Status.as_error(RuntimeError("conflict")))],
        {E.RESERVE: ("B",), E.BIND: ("B",), E.POST_BIND: ("B",)},
        cache=cache,
    )
    pod = pod_info(make_pod())
    state = CycleState()
    result = scheduled(framework, pod)
    assumed = assume_and_reserve(framework, state, pod, result, cache)
    status = asyncio.run(bind_pod(framework, state, assumed, result, cache))
    assert (status.code, status.message) == (Code.ERROR, 'running Bind plugin "B": conflict')
    assert cache.pod(pod.uid) is None
    assert [name for name, _ in calls("unreserve")] == ["B"]
    assert calls("post_bind") == []


@pytest.mark.parametrize(
    ("pre_flight", "permit", "nominated"),
    [
        (Status(), (Status(), 0.0), True),  # PreBind has work
        (Status.skip(), (Status(Code.WAIT), 5.0), True),  # nothing to pre-bind, but Permit makes it wait
        (Status.skip(), (Status(), 0.0), False),  # the Binding follows at once: no nomination
    ],
)
def test_the_binding_cycle_nominates_the_node_before_a_binding_that_will_wait(
    pre_flight: Status, permit: tuple[Status, float], nominated: bool
) -> None:
    cache = cluster(1)
    framework = build(
        [lifecycle("V", pre_flight=pre_flight, permit=permit)],
        {E.RESERVE: ("V",), E.PERMIT: ("V",), E.PRE_BIND: ("V",), E.BIND: ("V",)},
        cache=cache,
    )
    pod = pod_info(make_pod())
    state = CycleState()
    result = scheduled(framework, pod)
    assumed = assume_and_reserve(framework, state, pod, result, cache)
    nominations: list[tuple[str, str, int]] = []

    async def nominate(who: Any, node: str) -> None:
        nominations.append((who.uid, node, len(calls("pre_bind"))))

    async def go() -> Status:
        task = asyncio.ensure_future(bind_pod(framework, state, assumed, result, cache, nominate=nominate))
        await asyncio.sleep(0)
        waiting = framework.waiting_pods.get(pod.uid)
        if waiting is not None:
            waiting.allow("V")
        return await task

    assert asyncio.run(go()).is_success
    assert nominations == ([(pod.uid, result.suggested_host, 0)] if nominated else [])  # before PreBind
    assert [name for name, _ in calls("pre_bind")] == ([] if pre_flight.is_skip else ["V"])


def test_a_pre_bind_pre_flight_error_fails_the_binding_cycle_without_a_nomination() -> None:
    cache = cluster(1)
    framework = build(
        [lifecycle("V", pre_flight=Status.as_error(RuntimeError("no volumes")))],
        {E.RESERVE: ("V",), E.PRE_BIND: ("V",), E.BIND: ("V",)},
        cache=cache,
    )
    pod = pod_info(make_pod())
    state = CycleState()
    result = scheduled(framework, pod)
    assumed = assume_and_reserve(framework, state, pod, result, cache)
    nominations: list[str] = []

    async def nominate(who: Any, node: str) -> None:
        nominations.append(node)

    status = asyncio.run(bind_pod(framework, state, assumed, result, cache, nominate=nominate))
    assert (status.code, status.message) == (Code.ERROR, 'running PreBindPreFlight "V": no volumes')
    assert (nominations, calls("pre_bind"), calls("bind")) == ([], [], [])
    assert cache.pod(pod.uid) is None
    assert [name for name, _ in calls("unreserve")] == ["V"]


def test_an_exception_in_the_binding_cycle_unreserves_and_forgets(monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing may stay half-claimed: a raise on the way (here from the framework itself, past the plugin
    # wrappers) is an Error status, and Unreserve runs as for any failure, not only the cache's forget.
    cache = cluster(1)
    framework = build([lifecycle("V")], {E.RESERVE: ("V",), E.PRE_BIND: ("V",), E.POST_BIND: ("V",)}, cache=cache)
    pod = pod_info(make_pod())
    state = CycleState()
    result = scheduled(framework, pod)
    assumed = assume_and_reserve(framework, state, pod, result, cache)

    async def explode(*args: Any) -> Status:
        raise RuntimeError("framework broke")

    monkeypatch.setattr(framework, "run_pre_bind_plugins", explode)
    status = asyncio.run(bind_pod(framework, state, assumed, result, cache))
    assert (status.code, status.message) == (Code.ERROR, "framework broke")
    assert cache.pod(pod.uid) is None
    assert not cache.is_assumed(pod.uid)
    assert [name for name, _ in calls("unreserve")] == ["V"]
    assert calls("post_bind") == []


def test_permit_wait_rejected_in_the_binding_cycle() -> None:
    cache = cluster(1)
    framework = build(
        [lifecycle("Gang", permit=(Status(Code.WAIT), 0.01))], {E.RESERVE: ("Gang",), E.PERMIT: ("Gang",)}, cache=cache
    )
    pod = pod_info(make_pod())
    state = CycleState()
    result = scheduled(framework, pod)
    assumed = assume_and_reserve(framework, state, pod, result, cache)
    status = asyncio.run(bind_pod(framework, state, assumed, result, cache))
    assert status.code is Code.UNSCHEDULABLE
    assert status.message == "0/1 nodes are available: 1 rejected due to timeout after waiting 10ms at plugin Gang."
    assert cache.pod(pod.uid) is None


def test_a_bind_error_keeps_the_plugins_api_error() -> None:
    cache = cluster(2)
    conflict = APIError(409, "already bound")
    framework = build([lifecycle("B", bind=Status.as_error(conflict))], {E.BIND: ("B",)}, cache=cache)
    pod = pod_info(make_pod())
    state = CycleState()
    result = scheduled(framework, pod)
    assumed = assume_and_reserve(framework, state, pod, result, cache)
    status = asyncio.run(bind_pod(framework, state, assumed, result, cache))
    assert status.message == 'running Bind plugin "B": already bound'
    # As with Go's %w, the plugin's original error is still there (e.g. to treat a 409 as already bound).
    assert status.error is conflict
    assert cache.pod(pod.uid) is None
