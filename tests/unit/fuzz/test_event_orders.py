"""Random orders of cluster events through a SchedulerApp: the cache, the queues and the binding cycles hold up.

Generated: a sequence of operations on a small cluster (``strategies.py``'s nodes and pods, ``cluster.py``'s
model of the API server) in any order: nodes added, changed and deleted; pending pods of two live profiles (and
of none) added, changed as the API server allows (labels, gates removed, tolerations added, a kubelet's phase,
a graceful deletion, another scheduler's binding), deleted; scheduling cycles; the binding cycles' tasks let run
a step at a time or to the end; the watch events of the app's own writes (Bindings, status patches,
preemption's deletions) delivered in any order across objects; Bindings failing (500, 429, the API server's own
409 for a pod bound meanwhile and 404 for one gone, and a Binding made whose answer is lost); backoff and the
unschedulable timeout elapsing; the profiles changed to other valid and invalid specs, removed and created
again; storage objects, a Service, a PodDisruptionBudget and namespace labels created and deleted; a pause
and resume (the watch events meanwhile lost, the cache rebuilt by the reconciling LIST).

Invariants, after every operation (``invariants.py``): no task raises and nothing logs an error; every queue is a
partition (a pod in exactly one sub-queue or in flight) holding only its profile's pods and no pod the cache
has on a node; a pod we bound is never queued again and never bound twice; every node's columns equal the sums
over its pods, each pod parsed as a fresh parse would; each pod a profile with NodeResourcesFit assumes leaves
its node within its allocatable (checked as it is assumed); once the binding cycles are done, a pod still assumed
is one whose Binding the API server made (its event not delivered yet), every other one forgotten. At the end,
with every task done and every watch event delivered: the cache is the API server's view, nothing stays
assumed, and every pending pod of a live profile waits in a sub-queue.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.unit.fuzz import invariants
from tests.unit.fuzz.cluster import Cluster
from tests.unit.fuzz.conftest import scaled
from tests.unit.fuzz.profiles import profile_spec
from tests.unit.fuzz.strategies import (
    LABEL_VALUES,
    NODE_NAMES,
    OBJECTS,
    bound_pod,
    node,
    pending_pod,
    pod_labels,
    toleration,
)

LIVE_PROFILES = ("sp", "sp2")


index = st.integers(0, 30)
#: The scheduler's own progress, drawn as often as all the cluster's changes together.
progress = st.one_of(
    st.tuples(st.sampled_from(LIVE_PROFILES), st.integers(1, 4)).map(lambda t: ("cycles", *t)),
    st.integers(0, 6).map(lambda n: ("steps", n)),
    st.just(("drain",)),
    index.map(lambda i: ("deliver", i)),
    st.just(("relist",)),
)
changes = st.one_of(
    node().map(lambda obj: ("put-node", obj)),
    st.sampled_from(NODE_NAMES).map(lambda name: ("delete-node", name)),
    pending_pod(scheduler="sp").map(lambda obj: ("add-pod", obj)),
    pending_pod().map(lambda obj: ("add-pod", obj)),
    bound_pod().map(lambda obj: ("add-pod", obj)),
    st.tuples(
        index,
        st.one_of(
            st.tuples(st.just("labels"), pod_labels),
            st.tuples(st.just("ungate"), st.none()),
            st.tuples(st.just("tolerate"), toleration()),
            st.tuples(st.just("select"), st.fixed_dictionaries({"disk": st.sampled_from(LABEL_VALUES)})),
            st.tuples(st.just("phase"), st.sampled_from(["Succeeded", "Failed"])),
            st.tuples(st.just("terminate"), st.none()),
            st.tuples(st.just("foreign-bind"), st.sampled_from(NODE_NAMES)),
        ),
    ).map(lambda t: ("update-pod", t[0], *t[1])),
    index.map(lambda i: ("delete-pod", i)),
    st.sampled_from([500, 429, 0]).map(lambda code: ("bind-fault", code)),
    st.sampled_from([0.5, 2.0, 11.0, 301.0]).map(lambda s: ("tick", s)),
    st.tuples(st.sampled_from(LIVE_PROFILES), profile_spec()).map(lambda t: ("profile", *t)),
    st.sampled_from(LIVE_PROFILES).map(lambda name: ("remove-profile", name)),
    st.tuples(st.sampled_from(range(len(OBJECTS))), st.booleans()).map(lambda t: ("object", *t)),
)
operations = st.one_of(progress, changes)


@st.composite
def scenario(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """A cluster to start from (a few nodes, pending pods of both profiles, pods bound by others), then any
    sequence of operations."""
    names = draw(st.lists(st.sampled_from(NODE_NAMES), min_size=1, max_size=4, unique=True))
    ops: list[tuple[Any, ...]] = [("put-node", draw(node(name))) for name in names]
    ops += [("add-pod", draw(bound_pod())) for _ in range(draw(st.integers(0, 3)))]
    ops += [
        ("add-pod", draw(pending_pod(scheduler=draw(st.sampled_from(LIVE_PROFILES)))))
        for _ in range(draw(st.integers(1, 8)))
    ]
    return ops + draw(st.lists(operations, max_size=30))


def _pick(cluster: Cluster, i: int) -> str | None:
    uids = list(cluster.api.pods)
    return uids[i % len(uids)] if uids else None


async def _apply(cluster: Cluster, op: tuple[Any, ...]) -> None:
    kind = op[0]
    app = cluster.app
    if kind == "put-node":
        cluster.put_node(op[1])
    elif kind == "delete-node":
        cluster.delete_node(op[1])
    elif kind == "add-pod":
        cluster.add_pod(op[1])
    elif kind == "update-pod":
        uid = _pick(cluster, op[1])
        if uid is not None:
            cluster.update_pod(uid, op[2], op[3])
    elif kind == "delete-pod":
        uid = _pick(cluster, op[1])
        if uid is not None:
            cluster.delete_pod(uid)
    elif kind == "cycles":
        cluster.cycles(op[1], op[2])
    elif kind == "steps":
        for _ in range(op[1]):
            await asyncio.sleep(0)
    elif kind == "drain":
        await app.drain()
        problems = invariants.assumed_after_binding(app, cluster.api)
        assert not problems, "\n".join(problems)
    elif kind == "relist":
        await cluster.relist()
    elif kind == "deliver":
        cluster.deliver_one(op[1])
    elif kind == "bind-fault":
        cluster.api.bind_faults.append(op[1])
    elif kind == "tick":
        cluster.tick(op[1])
    elif kind == "profile":
        _apply_profile(cluster, op[1], op[2])
    elif kind == "remove-profile":
        app.remove_profile(op[1])
    elif kind == "object":
        cluster.put_object(*OBJECTS[op[1]], deleted=op[2])
    else:
        raise ValueError(kind)


def _apply_profile(cluster: Cluster, name: str, spec: Any) -> None:
    """A profile change never raises; an invalid one is refused with a message and the old pipeline stays."""
    app = cluster.app
    before = app.profiles.get(name)
    serving = before.framework if before is not None else None
    outcome = app.apply_profile(name=name, spec=spec, generation=1)
    after = app.profiles.get(name)
    if outcome.ready:
        assert after is not None
        assert after.framework is not serving
    else:
        assert outcome.reason == "InvalidProfile"
        assert outcome.message
        assert (after.framework if after is not None else None) is serving
        if serving is not None:
            assert "previous valid pipeline keeps serving" in outcome.message


def _check(cluster: Cluster, where: str) -> None:
    problems = (
        cluster.failures
        + cluster.errors.texts()
        + invariants.queues(cluster.app)
        + invariants.cache_totals(cluster.app.cache)
        + invariants.bindings(cluster.app, cluster.api)
    )
    assert not problems, f"after {where}:\n" + "\n".join(problems)


async def _settle(cluster: Cluster) -> None:
    """The scheduling loops run (a bounded number of cycles: a pod that fits nowhere is retried from backoffQ
    for ever), every task to its end, every watch event delivered, until nothing more happens."""
    for _ in range(20):
        for name in LIVE_PROFILES:
            cluster.cycles(name, 2 * len(cluster.api.pods) + 1)
        await cluster.app.drain()
        if not cluster.api.undelivered:
            return
        while cluster.api.undelivered:
            cluster.deliver_one(0)
    raise AssertionError("the cluster never settled")


def run_operations(operations_list: list[tuple[Any, ...]]) -> None:
    """Run the operations on a fresh cluster with both profiles live, checking after each, then at rest."""
    cluster = Cluster()

    async def scenario() -> None:
        asyncio.get_running_loop().set_task_factory(cluster.task_factory)
        for name in LIVE_PROFILES:
            assert cluster.app.apply_profile(name=name, spec={}, generation=1).ready
        await cluster.app.ensure_reconciled()
        for step, op in enumerate(operations_list):
            await _apply(cluster, op)
            _check(cluster, f"step {step}: {op[0]}")
        cluster.api.bind_faults.clear()
        await _settle(cluster)
        _check(cluster, "settling")
        problems = invariants.quiescent(cluster.app, cluster.api)
        assert not problems, "at rest:\n" + "\n".join(problems)

    with cluster.errors.capturing():
        asyncio.run(scenario())


@scaled(3)
@given(scenario())
def test_any_order_of_events_keeps_cache_queues_and_bindings_sound(operations_list: list[tuple[Any, ...]]) -> None:
    run_operations(operations_list)
