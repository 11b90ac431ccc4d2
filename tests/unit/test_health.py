"""The health paths: k8s.io/apiserver's healthz answers restated (health.py), the app's checks, and their routes."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from kopf_scheduler.health import HEALTHY, PING, Health, HealthCheck, answer_check, answer_root
from kopf_scheduler.web import build_app
from tests.unit.app_harness import FakeClock, drive, new_app, pending, until
from tests.unit.test_standby import Toggle, _client

FAILING = HealthCheck("sched-handler-sync", lambda: Health(False, "handlers are not fully synchronized"))
ACTIVE = HealthCheck("peering", lambda: Health(True, "active"))


def test_all_passing_answers_ok_or_every_check_when_verbose() -> None:
    checks = [PING, ACTIVE]
    assert answer_root("readyz", checks, excluded=(), verbose=False) == answer_check(PING)
    verbose = answer_root("readyz", checks, excluded=(), verbose=True)
    assert (verbose.status, verbose.body) == (200, "[+]ping ok\n[+]peering ok: active\nreadyz check passed\n")


def test_a_failing_check_fails_the_path_and_withholds_its_reason() -> None:
    answer = answer_root("readyz", [PING, FAILING], excluded=(), verbose=False)
    assert answer.status == 500
    assert answer.body == "[+]ping ok\n[-]sched-handler-sync failed: reason withheld\nreadyz check failed\n"
    one = answer_check(FAILING)
    assert (one.status, one.body) == (500, "internal server error: handlers are not fully synchronized\n")


def test_excluded_checks_are_skipped_and_unknown_ones_named() -> None:
    answer = answer_root("readyz", [PING, FAILING], excluded=("sched-handler-sync", "nope"), verbose=True)
    assert answer.status == 200
    assert answer.body == (
        "[+]ping ok\n[+]sched-handler-sync excluded: ok\n"
        'warn: some health checks cannot be excluded: no matches for "nope"\nreadyz check passed\n'
    )


def _checks(app: Any, path: str) -> dict[str, Health]:
    return {check.name: check.check() for check in app.health_checks()[path]}


def test_the_app_is_ready_once_its_cache_is_synced_and_says_whether_it_is_active() -> None:
    app = new_app(_client())
    toggle = Toggle(on=True)
    assert [c.name for c in app.health_checks()["livez"]] == ["ping"]
    assert not _checks(app, "readyz")["sched-handler-sync"].ok
    assert _checks(app, "readyz")["peering"] == Health(True, "active")  # no pause seen yet: kopf peering starts

    async def pause_then_resume() -> None:
        app.follow_pauses(toggle)
        await until(lambda: app.watch.reconciled)
        assert _checks(app, "readyz")["peering"] == Health(True, "standby")
        assert _checks(app, "readyz")["sched-handler-sync"] == HEALTHY  # a warm standby is ready
        toggle.turn_to(False)
        await until(lambda: not app.standby.paused)
        assert _checks(app, "readyz")["peering"] == Health(True, "active")
        await app.shutdown()

    asyncio.run(pause_then_resume())
    assert _checks(app, "readyz")["shutdown"] == Health(False, "process is shutting down")
    assert _checks(app, "readyz")["sched-handler-sync"] == HEALTHY  # synced once stays synced (a pause relists)


def test_a_stuck_scheduling_loop_fails_readiness_and_health() -> None:
    """A cycle that never returns (an extender that hangs) stops the loop; after LOOP_STALL_SECONDS it shows."""
    clock = FakeClock()
    app = new_app(_client(), clock)
    app.apply_profile(name="sp", spec={})
    hang: asyncio.Future[None] | None = None

    def stuck_cycle(runtime: Any, qpod: Any) -> asyncio.Future[None]:
        nonlocal hang
        hang = asyncio.get_running_loop().create_future()
        return hang

    app.cycles.schedule_one = stuck_cycle  # type: ignore[method-assign]  # the hanging cycle under test

    async def main() -> tuple[Health, Health, Health]:
        loop = asyncio.create_task(app.run_profile("sp", stopped=lambda: False, poll=0.01))
        await until(lambda: app.watch.reconciled)
        fresh = _checks(app, "readyz")["scheduling-loops"]
        app.on_pod_event("ADDED", pending("p1"))
        await until(lambda: hang is not None)
        clock.now += 61
        stalled = _checks(app, "healthz")["scheduling-loops"]
        assert hang is not None
        hang.set_result(None)  # the cycle returns: the loop turns again
        await asyncio.sleep(0.05)
        recovered = _checks(app, "readyz")["scheduling-loops"]
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
        return fresh, stalled, recovered

    fresh, stalled, recovered = asyncio.run(main())
    assert fresh == HEALTHY
    assert stalled == Health(False, "the scheduling loop of sp has not turned for 60 s")
    assert recovered == HEALTHY
    assert "sp" not in app._loop_turns  # a loop that ended is not a stalled loop


def test_the_routes_answer_as_kube_scheduler() -> None:
    checks = {"livez": [PING], "readyz": [PING, FAILING, ACTIVE]}
    app = build_app(registry=CollectorRegistry(), explain=lambda key: None, health=checks)

    async def main() -> dict[str, tuple[int, str, str]]:
        async with TestClient(TestServer(app)) as client:
            results = {}
            for path in ("/livez", "/livez/ping", "/readyz", "/readyz?verbose", "/readyz/peering", "/healthz"):
                response = await client.get(path)
                results[path] = (response.status, await response.text(), response.headers.get("Content-Type", ""))
            return results

    results = asyncio.run(main())
    assert results["/livez"] == (200, "ok", "text/plain; charset=utf-8")
    assert results["/livez/ping"][:2] == (200, "ok")
    assert results["/readyz"][0] == 500
    assert results["/readyz"][1].endswith("[+]peering ok: active\nreadyz check failed\n")
    assert results["/readyz?verbose"] == results["/readyz"]  # always verbose on failure
    assert results["/readyz/peering"][:2] == (200, "ok")
    assert results["/healthz"][0] == 404  # only the paths given


def _sample(app: Any, metric: str, **labels: str) -> float | None:
    value: float | None = app.metrics.registry.get_sample_value(metric, labels)
    return value


def test_the_longest_waiting_pod_and_the_active_gauge_are_published() -> None:
    """kopf_scheduler_longest_waiting_pod_seconds (the chart's "pending too long" alert) counts from a failed pod's
    first attempt; leader_election_master_status is 1 once the replica is unpaused and synced, profiles or not."""
    clock = FakeClock()
    app = new_app(_client(), clock)
    assert _sample(app, "leader_election_master_status", name="kopf-scheduler") == 0.0  # not synced yet
    asyncio.run(app.ensure_reconciled())
    assert _sample(app, "leader_election_master_status", name="kopf-scheduler") == 1.0  # no profile needed
    app.apply_profile(name="sp", spec={})
    too_big = pending("too-big", requests={"cpu": "64"})
    app.on_pod_event("ADDED", too_big)
    drive(app)  # fits nowhere: unschedulable
    clock.now += 42.0
    app._publish_pending()
    assert _sample(app, "kopf_scheduler_longest_waiting_pod_seconds", profile="sp") == 42.0
    app.on_pod_event("DELETED", too_big)
    app._publish_pending()
    assert _sample(app, "kopf_scheduler_longest_waiting_pod_seconds", profile="sp") == 0.0


def test_cache_size_is_published_and_a_deleted_profiles_gauges_go() -> None:
    """scheduler_cache_size (documented, and upstream's, but never set before) and no stale per-profile gauges."""
    clock = FakeClock()
    app = new_app(_client(), clock)
    asyncio.run(app.ensure_reconciled())
    app.apply_profile(name="sp", spec={})
    too_big = pending("too-big", requests={"cpu": "64"})
    app.on_pod_event("ADDED", too_big)
    drive(app)
    app._publish_pending()
    sizes = {kind: _sample(app, "scheduler_cache_size", type=kind) for kind in ("nodes", "pods", "assumed_pods")}
    # The listed node, and the listed pending pod: bound by this cycle, assumed until a watch event confirms it.
    assert sizes == {"nodes": 1.0, "pods": 1.0, "assumed_pods": 1.0}
    assert _sample(app, "scheduler_unschedulable_pods", plugin="NodeResourcesFit", profile="sp") == 1.0
    assert _sample(app, "kopf_scheduler_longest_waiting_pod_seconds", profile="sp") == 0.0
    app.remove_profile("sp")
    assert _sample(app, "scheduler_unschedulable_pods", plugin="NodeResourcesFit", profile="sp") is None
    assert _sample(app, "kopf_scheduler_longest_waiting_pod_seconds", profile="sp") is None
