"""The renew-deadline gate (``standing.py``) with a fake clock: kube-scheduler's leader election semantics over
kopf's peering (client-go leaderelection: leaseDuration 15 s, renewDeadline 10 s, retryPeriod 2 s)."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest

from kopf_scheduler.standing import PeeringRenewer, PeeringView, Standing, Timings, judge_peering

NOW = datetime.datetime(2026, 11, 28, 10, 0, 0, tzinfo=datetime.UTC)
LEADING = PeeringView(leading=True, others_alive=False)
LEADING_WITH_PEERS = PeeringView(leading=True, others_alive=True)
NOT_LEADING = PeeringView(leading=False, others_alive=True)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _standing(clock: Clock) -> Standing:
    return Standing(Timings(lease_duration=15, renew_deadline=10, retry_period=2), clock=clock)


def _entry(seconds_ago: float, priority: int, lifetime: int = 15) -> dict[str, Any]:
    seen = NOW - datetime.timedelta(seconds=seconds_ago)
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen.isoformat()}


# -- reading the peering as kopf does -------------------------------------------------------------------------
def test_judge_peering_leading_when_no_live_peer_has_a_priority_as_high() -> None:
    status = {"me": _entry(0, 100), "low": _entry(1, 50), "dead-high": _entry(20, 200)}
    assert judge_peering(status, identity="me", priority=100, now=NOW) == PeeringView(True, True)


def test_judge_peering_a_live_higher_or_equal_peer_takes_the_lead() -> None:
    assert not judge_peering({"me": _entry(0, 100), "h": _entry(3, 200)}, identity="me", priority=100, now=NOW).leading
    # kopf pauses every replica of a priority seen twice
    assert not judge_peering({"me": _entry(0, 100), "e": _entry(3, 100)}, identity="me", priority=100, now=NOW).leading


def test_judge_peering_without_our_record_we_do_not_lead() -> None:
    assert judge_peering({"other": _entry(30, 10)}, identity="me", priority=100, now=NOW) == PeeringView(False, False)


def test_judge_peering_kopf_defaults_a_missing_lifetime_and_lastseen() -> None:
    no_lifetime = {"priority": 200, "lastseen": (NOW - datetime.timedelta(seconds=40)).isoformat()}
    assert not judge_peering({"me": _entry(0, 1), "h": no_lifetime}, identity="me", priority=1, now=NOW).leading
    assert not judge_peering({"me": _entry(0, 1), "h": {"priority": 5}}, identity="me", priority=1, now=NOW).leading


# -- the gate ---------------------------------------------------------------------------------------------------
def test_no_bind_before_the_first_confirmation_then_binds_within_the_renew_deadline() -> None:
    clock = Clock()
    standing = _standing(clock)
    assert not standing.may_bind()
    standing.renewed(clock.now, LEADING)
    assert standing.may_bind()
    clock.now += 9.9
    assert standing.may_bind()


def test_the_deadline_counts_from_the_start_of_the_renewal_not_its_answer() -> None:
    clock = Clock()
    standing = _standing(clock)
    started = clock.now
    clock.now += 4  # a slow answer
    standing.renewed(started, LEADING)
    clock.now += 6
    assert not standing.may_bind()


def test_no_bind_once_the_renew_deadline_passed_without_a_renewal() -> None:
    clock = Clock()
    standing = _standing(clock)
    standing.renewed(clock.now, LEADING)
    ticket = standing.ticket()
    for _ in range(4):  # failed renewals (the API server out of reach)
        clock.now += 2.5
        standing.failed("connection refused")
    assert not standing.may_bind()
    assert standing.epoch == ticket + 1
    assert standing.lapses == 1


def test_a_lapse_refuses_every_bind_assumed_before_it_even_after_the_standing_is_back() -> None:
    clock = Clock()
    standing = _standing(clock)
    standing.renewed(clock.now, LEADING)
    before = standing.ticket()
    clock.now += 11
    standing.renewed(clock.now, LEADING)  # confirmed again, alone in the peering
    assert standing.refresh_due()
    assert not standing.may_bind()  # the view first
    standing.refreshed(standing.epoch)
    assert standing.may_bind()
    assert not standing.may_bind(before)  # assumed on the old view: forgotten and queued again
    assert standing.may_bind(standing.ticket())


def test_a_pause_is_detected_by_an_overslept_retry_period_and_forces_a_refresh() -> None:
    clock = Clock()
    standing = _standing(clock)
    standing.renewed(clock.now, LEADING)
    started = clock.now
    clock.now += 2 + 6  # a sleep of 2 s took 8 s: paused for 6 s, within the renew deadline
    standing.slept(2, started)
    assert not standing.may_bind()
    standing.renewed(clock.now, LEADING)
    assert not standing.may_bind()
    assert standing.refresh_due()
    standing.refreshed(standing.epoch)
    assert standing.may_bind()


def test_a_short_overrun_is_no_pause() -> None:
    clock = Clock()
    standing = _standing(clock)
    standing.renewed(clock.now, LEADING)
    started = clock.now
    clock.now += 2 + 4.9
    standing.slept(2, started)
    assert standing.may_bind()


def test_back_from_a_freeze_with_a_live_peer_waits_the_renew_deadline_then_refreshes() -> None:
    """The frozen active replica resumes after the standby took over: the standby may bind until it reads our
    record or its own deadline passes; only then does our view get refreshed, and only then do we bind."""
    clock = Clock()
    standing = _standing(clock)
    standing.renewed(clock.now, LEADING)
    clock.now += 30  # frozen: the standby's takeover came at +15
    standing.renewed(clock.now, LEADING_WITH_PEERS)  # we still have the higher priority
    assert not standing.may_bind()
    assert not standing.refresh_due()
    clock.now += 9.9
    standing.renewed(clock.now, LEADING_WITH_PEERS)
    assert not standing.refresh_due()
    clock.now += 0.2
    standing.renewed(clock.now, LEADING_WITH_PEERS)
    assert standing.refresh_due()
    assert not standing.may_bind()
    standing.refreshed(standing.epoch)
    assert standing.may_bind()


def test_a_standby_whose_record_stayed_alive_takes_over_at_once() -> None:
    """The standby renewed all along; the active one's record expired: it leads, binds at once, no refresh (the
    warm standby's cache is current) even with another live standby of lower priority."""
    clock = Clock()
    standing = _standing(clock)
    for _ in range(5):
        standing.renewed(clock.now, NOT_LEADING)
        clock.now += 2
    standing.renewed(clock.now, LEADING_WITH_PEERS)
    assert standing.may_bind()
    assert not standing.refresh_due()


def test_first_confirmation_with_a_live_peer_waits_the_renew_deadline() -> None:
    """A replica that starts (or restarts) with a higher priority than the one that leads: that one binds until
    it reads our record, so we wait its renew deadline (as a Lease is acquired only once it expired)."""
    clock = Clock()
    standing = _standing(clock)
    standing.renewed(clock.now, LEADING_WITH_PEERS)
    assert not standing.may_bind()
    clock.now += 6
    standing.renewed(clock.now, LEADING_WITH_PEERS)
    assert not standing.may_bind()
    clock.now += 4
    assert standing.may_bind()


def test_losing_to_a_higher_peer_stops_binds_at_once() -> None:
    clock = Clock()
    standing = _standing(clock)
    standing.renewed(clock.now, LEADING)
    clock.now += 2
    standing.renewed(clock.now, NOT_LEADING)
    assert not standing.may_bind()


def test_an_answer_later_than_the_renew_deadline_confirms_nothing() -> None:
    clock = Clock()
    standing = _standing(clock)
    started = clock.now
    clock.now += 10
    standing.renewed(started, LEADING)
    assert not standing.may_bind()


def test_a_refresh_started_before_another_lapse_does_not_count() -> None:
    clock = Clock()
    standing = _standing(clock)
    standing.renewed(clock.now, LEADING)
    clock.now += 11
    standing.renewed(clock.now, LEADING)
    epoch = standing.epoch
    clock.now += 11  # lapsed again while the LIST was in flight
    standing.renewed(clock.now, LEADING)
    standing.refreshed(epoch)
    assert not standing.may_bind()
    standing.refreshed(standing.epoch)
    assert standing.may_bind()


def test_a_disabled_standing_always_allows_binds() -> None:
    standing = Standing(Timings(), enabled=False)
    assert standing.may_bind()
    assert standing.may_bind(ticket=42)


# -- the renewer ------------------------------------------------------------------------------------------------
class PeeringApi:
    def __init__(self, status: dict[str, Any]) -> None:
        self.status = status
        self.calls: list[tuple[str, str, str]] = []
        self.error: Exception | None = None

    async def renew_peering_record(self, *, name: str, identity: str, lastseen: str) -> dict[str, Any]:
        self.calls.append((name, identity, lastseen))
        if self.error is not None:
            raise self.error
        self.status[identity]["lastseen"] = lastseen
        return {"metadata": {"name": name}, "status": self.status}


def _renewer(standing: Standing, api: PeeringApi, clock: Clock, refreshes: list[int]) -> PeeringRenewer:
    async def refresh() -> None:
        refreshes.append(standing.epoch)

    return PeeringRenewer(
        standing,
        client=lambda: api,
        name="peering",
        identity="me",
        priority=100,
        refresh=refresh,
        clock=clock,
        wall=lambda: NOW,
    )


def test_the_renewer_writes_lastseen_and_confirms_from_the_object_it_reads_back() -> None:
    clock = Clock()
    standing = _standing(clock)
    api = PeeringApi({"me": _entry(5, 100), "standby": _entry(1, 50)})
    refreshes: list[int] = []
    asyncio.run(_renewer(standing, api, clock, refreshes).renew_once())
    assert api.calls == [("peering", "me", NOW.isoformat())]
    assert not standing.may_bind()  # first confirmation, another live peer: waits its renew deadline
    clock.now += 6
    asyncio.run(_renewer(standing, api, clock, refreshes).renew_once())
    clock.now += 4
    assert standing.may_bind()
    assert refreshes == []  # nothing lapsed: the view at start-up is the reconciling LIST's


def test_the_renewer_counts_a_failed_write_as_no_confirmation() -> None:
    clock = Clock()
    standing = _standing(clock)
    api = PeeringApi({"me": _entry(5, 100)})
    api.error = RuntimeError("422: the record is not there")
    asyncio.run(_renewer(standing, api, clock, []).renew_once())
    assert not standing.may_bind()


def test_the_renewer_refreshes_when_due_and_then_the_gate_opens() -> None:
    clock = Clock()
    standing = _standing(clock)
    api = PeeringApi({"me": _entry(0, 100)})
    refreshes: list[int] = []
    renewer = _renewer(standing, api, clock, refreshes)
    asyncio.run(renewer.renew_once())
    clock.now += 12
    asyncio.run(renewer.renew_once())
    assert standing.refresh_due()
    asyncio.run(renewer.refresh_once())
    assert refreshes == [standing.epoch]
    assert standing.may_bind()


def test_a_failed_refresh_keeps_the_gate_closed() -> None:
    clock = Clock()
    standing = _standing(clock)
    api = PeeringApi({"me": _entry(0, 100)})

    async def refresh() -> None:
        raise RuntimeError("LIST failed")

    renewer = PeeringRenewer(
        standing, client=lambda: api, name="p", identity="me", priority=100, refresh=refresh, clock=clock
    )
    asyncio.run(renewer.renew_once())
    clock.now += 12
    asyncio.run(renewer.renew_once())
    asyncio.run(renewer.refresh_once())
    assert not standing.may_bind()
    assert standing.refresh_due()


@pytest.mark.parametrize("identity", ["user@host/20261128/abc", "a~b"])
def test_the_kube_client_escapes_the_identity_in_the_json_pointer(identity: str) -> None:
    from kopf_scheduler.kube.client import KubeClient

    sent: dict[str, Any] = {}

    class Recording(KubeClient):
        async def _call(self, method: str, path: str, **kwargs: Any) -> bytes:
            sent.update(method=method, path=path, **kwargs)
            return b'{"status": {}}'

    asyncio.run(Recording(server="https://x").renew_peering_record(name="p", identity=identity, lastseen="t"))
    pointer = "/status/" + identity.replace("~", "~0").replace("/", "~1") + "/lastseen"
    assert sent["body"] == [{"op": "replace", "path": pointer, "value": "t"}]
    assert sent["content_type"] == "application/json-patch+json"
    assert sent["path"] == "/apis/kopf.dev/v1/clusterkopfpeerings/p"


def test_a_nudge_renews_at_once_instead_of_after_the_retry_period() -> None:
    """kopf resumed the replica (a takeover): the standing is confirmed now, so the loops need not wait up to a
    retry period; a nudge is not mistaken for a pause."""
    standing = Standing(Timings(lease_duration=600, renew_deadline=300, retry_period=100))
    api = PeeringApi({"me": _entry(0, 100)})

    async def scenario() -> None:
        async def refresh() -> None:
            return None

        renewer = PeeringRenewer(standing, client=lambda: api, name="p", identity="me", priority=100, refresh=refresh)
        task = asyncio.create_task(renewer.run())
        for _ in range(50):
            await asyncio.sleep(0.01)
            if api.calls:
                break
        renewer.nudge()
        for _ in range(50):
            await asyncio.sleep(0.01)
            if len(api.calls) == 2:
                break
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    assert len(api.calls) == 2
    assert standing.may_bind()
    assert standing.lapses == 0


def test_a_binding_is_not_written_when_the_bind_guard_says_no_at_the_last_moment() -> None:
    """A Binding that waited for a connection across a lapse (a freeze while it was queued) is not written."""
    from aiohttp import web

    from kopf_scheduler.framework import StandingLostError
    from tests.unit.test_kube_client import serve

    seen: list[str] = []
    allowed = [False]

    async def binding(request: web.Request) -> web.StreamResponse:
        seen.append(request.path)
        return web.Response(status=201)

    async def scenario(client: Any) -> None:
        client.bind_guard = lambda: allowed[0]
        with pytest.raises(StandingLostError):
            await client.bind(namespace="ns", name="p", uid="u1", node_name="n1")
        assert seen == []
        allowed[0] = True
        await client.bind(namespace="ns", name="p", uid="u1", node_name="n1")  # the kept connection still works

    serve({("POST", "/api/v1/namespaces/ns/pods/p/binding"): binding}, scenario)
    assert seen == ["/api/v1/namespaces/ns/pods/p/binding"]
