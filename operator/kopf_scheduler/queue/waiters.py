"""The callers blocked in :meth:`SchedulingQueue.pop`, and how a queue change wakes them.

Upstream's ``PriorityQueue.Pop`` waits on a ``sync.Cond`` that every add/move broadcasts. Here ``pop`` is a
coroutine that parks an ``asyncio.Future`` and re-checks the queue once it resolves; every change that may
give it a pod resolves all parked futures (a broadcast, as upstream).

The queue has no lock: the operator only calls it from kopf's event loop (see
:mod:`kopf_scheduler.queue.scheduling_queue`). A wake that comes from the waiter's own loop resolves it on
the spot. One that comes from outside that loop (another thread, or another loop, while the waiter's loop
idles in ``pop``) is handed over with ``call_soon_threadsafe``: resolving a future from a foreign thread
would not wake the loop's selector, and the pod would wait for the next timeout. This hand-over is all the
queue offers threads; it does not make concurrent changes safe.
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
        if not waiters:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for waiter in waiters:
            loop = waiter.get_loop()
            if loop is running:
                _resolve(waiter)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, waiter)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
