"""The callers blocked in :meth:`SchedulingQueue.pop`, and how a queue change wakes them.

Upstream's ``PriorityQueue.Pop`` waits on a ``sync.Cond`` that every add/move broadcasts. Here ``pop`` is a
coroutine that parks an ``asyncio.Future`` and re-checks the queue once it resolves; every change that may
give it a pod resolves all parked futures (a broadcast, as upstream).

The queue has no lock and no thread hand-over: the operator only calls it from kopf's event loop (see
:mod:`kopf_scheduler.queue.scheduling_queue`), so a wake resolves the parked futures on the spot. Calling
the queue from another thread is not supported.
"""

from __future__ import annotations

import asyncio


class Waiters:
    """The futures parked by pop, oldest first."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending: list[asyncio.Future[None]] = []

    def park(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """A new future on ``loop`` that the next :meth:`wake_all` resolves."""
        waiter: asyncio.Future[None] = loop.create_future()
        self.pending.append(waiter)
        return waiter

    def forget(self, waiter: asyncio.Future[None]) -> None:
        """Drop a waiter whose pop ended (woken, cancelled or timed out)."""
        if waiter in self.pending:
            self.pending.remove(waiter)

    def wake_all(self) -> None:
        """Resolve every parked future (each pop then re-checks the queue)."""
        waiters, self.pending = self.pending, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
