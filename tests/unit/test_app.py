"""SchedulerApp as the composition root: profiles built and swapped live, the parts wired to one client.

Invalid profiles keep the old pipeline; a valid change swaps scoring at once; the client kopf's login sets
reaches every part; the pending-pods metric sums every profile's queue.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from kopf_scheduler.app import (
    GC_THRESHOLDS,
    LISTING_QUIET_SECONDS,
    in_a_new_window,
    tune_garbage_collector,
    until_next_window,
)
from tests.unit.app_harness import FakeClient, FakeClock, drive, new_app, pending, until
from tests.unit.factories import make_node, make_pod


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        pytest.param({"plugins": {"score": {"enabled": [{"name": "NoSuchPlugin"}]}}}, "NoSuchPlugin", id="unknown"),
        pytest.param(
            {"pluginConfig": [{"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 500}}]},
            "hardPodAffinityWeight",
            id="out-of-range-arg",
        ),
        pytest.param({"percentageOfNodesToScore": 300}, "percentageOfNodesToScore", id="bad-percentage"),
    ],
)
def test_invalid_profile_keeps_previous_pipeline(spec: dict[str, Any], fragment: str) -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    assert app.apply_profile(name="sp", spec={}, generation=1).ready
    serving = app.profiles["sp"].framework
    outcome = app.apply_profile(name="sp", spec=spec, generation=2)
    assert not outcome.ready
    assert fragment in outcome.message
    assert "previous valid pipeline keeps serving" in outcome.message
    assert app.profiles["sp"].framework is serving
    app.on_pod_event("ADDED", pending("p"))
    drive(app)
    assert client.bindings == [("default", "p", "n1")]


def test_profiles_share_the_node_search_start() -> None:
    # Upstream's nextStartNodeIndex belongs to the Scheduler: every profile's cycles move the one index, and a
    # profile rebuilt from a new spec keeps it.
    app = new_app()
    app.apply_profile(name="sp", spec={}, generation=1)
    app.apply_profile(name="other", spec={"percentageOfNodesToScore": 20}, generation=1)
    sp, other = app.profiles["sp"].framework, app.profiles["other"].framework
    assert sp.search_start is other.search_start is app.search_start
    sp.next_start_node_index = 7
    assert other.next_start_node_index == 7
    app.apply_profile(name="sp", spec={"percentageOfNodesToScore": 30}, generation=2)
    assert app.profiles["sp"].framework.next_start_node_index == 7


def test_profile_change_swaps_scoring_live() -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("empty", cpu="4", memory="8Gi"))
    app.on_node_event(None, make_node("busy", cpu="4", memory="8Gi"))
    app.on_pod_event(None, make_pod("existing", requests={"cpu": "2", "memory": "4Gi"}, node_name="busy"))
    app.apply_profile(name="sp", spec={}, generation=1)
    app.on_pod_event("ADDED", pending("spread", requests={"cpu": "1", "memory": "1Gi"}))
    drive(app)
    most_allocated = {
        "pluginConfig": [
            {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}},
        ]
    }
    assert app.apply_profile(name="sp", spec=most_allocated, generation=2).ready
    app.on_pod_event("ADDED", pending("packed", requests={"cpu": "1", "memory": "1Gi"}))
    drive(app)
    placed = {name: node for _, name, node in client.bindings}
    assert placed == {"spread": "empty", "packed": "busy"}


def test_pending_pods_metric_sums_every_profile() -> None:
    app = new_app()
    app.on_node_event(None, make_node("n1", cpu="1"))
    for profile in ("sp", "other"):
        app.apply_profile(name=profile, spec={}, generation=1)
    app.on_pod_event("ADDED", pending("a", scheduler="sp"))
    app.on_pod_event("ADDED", pending("b", scheduler="other"))
    app.on_pod_event("ADDED", pending("c", scheduler="other"))
    app._publish_pending()
    gauge = app.metrics.registry.get_sample_value
    assert gauge("scheduler_pending_pods", {"queue": "active"}) == 3
    assert gauge("scheduler_pending_pods", {"queue": "unschedulable"}) == 0


def test_the_client_set_at_login_reaches_every_part() -> None:
    """kopf's login hook replaces ``app.client``: the binder, the reporter and the reconciling LIST use the new one."""
    app = new_app()
    app.client = None
    app.on_node_event(None, make_node("n1", cpu="1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    asyncio.run(app.ensure_reconciled())  # no client yet: nothing to LIST, and not marked reconciled
    client = FakeClient()
    client.lists["/api/v1/nodes"] = [make_node("n1", cpu="1")]
    app.client = client
    app.on_pod_event("ADDED", pending("fits", requests={"cpu": "1"}))
    app.on_pod_event("ADDED", pending("big", requests={"cpu": "2"}))
    drive(app)
    assert client.bindings == [("default", "fits", "n1")]
    assert sorted(e["reason"] for e in client.events) == ["FailedScheduling", "Scheduled"]
    assert [name for name, _ in client.status_patches] == ["big"]
    app.on_node_event(None, make_node("unlisted"))
    asyncio.run(app.ensure_reconciled())
    assert sorted(app.cache.node_names()) == ["n1"]


def test_the_scheduling_loop_leaves_the_event_loop_to_kopfs_listing_but_for_a_cycle_per_pause() -> None:
    """kopf's LIST (event type None) gets the event loop: at 50000 pods, interleaving it one object per cycle
    let its continue token expire. Our cache is complete already, so one cycle per pause still runs (the first
    pods bind before kopf's LIST is in); full speed resumes once no listed object came for a moment."""
    client = FakeClient()
    clock = FakeClock()
    app = new_app(client, clock)
    client.lists["/api/v1/nodes"] = [make_node("n1", cpu="100")]
    app.apply_profile(name="sp", spec={}, generation=1)
    stop = False

    async def scenario() -> None:
        nonlocal stop
        await app.ensure_reconciled()
        for i in range(20):
            app.on_pod_event("ADDED", pending(f"p{i}"))
        app.on_pod_event(None, make_pod("listed", node_name="n1"))  # kopf's LIST is being handed over
        loop = asyncio.create_task(app.run_profile("sp", stopped=lambda: stop, poll=0.01))
        await asyncio.sleep(3.5 * LISTING_QUIET_SECONDS / 5)
        assert app.kopf_is_listing()
        assert 1 <= len(client.bindings) <= 4  # a cycle per pause while kopf lists
        clock.now += LISTING_QUIET_SECONDS
        await until(lambda: len(client.bindings) == 20)
        stop = True
        await loop
        await app.drain()

    asyncio.run(scenario())
    assert len(client.bindings) == 20


def test_what_start_up_created_stays_out_of_later_garbage_collections() -> None:
    before = gc.get_threshold()
    try:
        tune_garbage_collector()
        assert gc.get_freeze_count() > 0
        young, middle, full = gc.get_threshold()
        assert (young, middle, full) == GC_THRESHOLDS
        # Full collections (they walk the whole cache) a tenth as often as Python's; young collections still
        # run, so cyclic garbage waits for at most tens of thousands of allocations.
        assert full >= 10 * before[2]
        assert gc.isenabled()
        assert 0 < young <= 50_000
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_the_scheduling_loop_pops_no_pod_while_its_writes_queue() -> None:
    """Backpressure: a loop that outran the API server piled up binding cycles (each holding its cycle state)
    behind the connections; it waits for room for its writes before each cycle."""

    class Congested(FakeClient):
        def __init__(self) -> None:
            super().__init__()
            self.room = asyncio.Event()

        def writes_backlogged(self) -> bool:
            super().writes_backlogged()
            return not self.room.is_set()

        async def write_room(self) -> None:
            await self.room.wait()

    client = Congested()
    app = new_app(client, FakeClock())
    client.lists["/api/v1/nodes"] = [make_node("n1")]
    app.apply_profile(name="sp", spec={}, generation=1)
    stop = False

    async def scenario() -> None:
        nonlocal stop
        await app.ensure_reconciled()
        app.on_pod_event("ADDED", pending("p"))
        loop = asyncio.create_task(app.run_profile("sp", stopped=lambda: stop, poll=0.01))
        await asyncio.sleep(0.2)
        assert client.backlog_checks > 1
        assert client.bindings == []  # no room: the pod waits in its queue
        client.room.set()
        await until(lambda: bool(client.bindings))
        stop = True
        await loop
        await app.drain()

    asyncio.run(scenario())
    assert client.bindings == [("default", "p", "n1")]


def test_backoff_is_flushed_once_per_whole_second_window_at_its_start() -> None:
    """Upstream's ticker flushes backoffQ at each whole second (the windows its expiries are aligned to), not
    every second at the loop's own phase: a pod that backed off until second S must be active at S."""
    assert in_a_new_window(1000.9, 1001.0)
    assert not in_a_new_window(1000.0, 1000.99)
    assert until_next_window(1000.25) == 0.75
    client = FakeClient()
    clock = FakeClock()
    app = new_app(client, clock)
    app.apply_profile(name="sp", spec={}, generation=1)
    queue = app.profiles["sp"].queue
    flushed_at: list[float] = []
    flush = queue.flush_backoff_completed

    def counting_flush() -> None:
        flushed_at.append(clock.now)
        flush()

    queue.flush_backoff_completed = counting_flush  # type: ignore[method-assign]
    stop = False

    async def scenario() -> None:
        nonlocal stop
        await app.ensure_reconciled()
        loop = asyncio.create_task(app.run_profile("sp", stopped=lambda: stop, poll=0.01))
        for now in (1000.3, 1000.9, 1001.05, 1001.6, 1001.99, 1002.0, 1002.4):
            clock.now = now
            await asyncio.sleep(0.05)
        stop = True
        await loop

    asyncio.run(scenario())
    assert flushed_at == [1001.05, 1002.0]
