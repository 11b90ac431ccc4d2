"""One benchmark at a time on this machine.

Why: every figure under ``bench/`` is a ratio of two schedulers sharing the machine's CPUs with one control plane.
A second benchmark started beside the first (by another terminal, a helper, a CI job on the same host) takes CPU
from both runs, and neither says so: twice in one session two ``bench.e2e`` runs overlapped and their rows had to
be thrown away (one kube-scheduler run failed "no bind in 120 s" at load 13). So each benchmark's ``main`` holds an
exclusive ``flock`` on one lock file for its whole run; a second one refuses to start and names the holder.

The lock is advisory and dies with its process (the kernel drops a ``flock`` when the file is closed), so a killed
run never leaves the machine locked. ``BENCH_LOCK_FILE`` moves the file (tests use a temporary one).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import os
import sys
from collections.abc import Iterator
from pathlib import Path

DEFAULT_LOCK_FILE = Path.home() / ".cache" / "kopf-scheduler" / "bench.lock"


class MachineBusy(RuntimeError):
    """Another benchmark holds the machine."""


def lock_file() -> Path:
    return Path(os.environ.get("BENCH_LOCK_FILE") or DEFAULT_LOCK_FILE)


@contextlib.contextmanager
def machine_to_ourselves(what: str, path: Path | None = None) -> Iterator[None]:
    """Hold the benchmark lock for the block; :class:`MachineBusy` (naming the holder) if another run has it."""
    path = lock_file() if path is None else path
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "a process that did not say"
            raise MachineBusy(
                f"another benchmark is running on this machine ({holder}; lock {path}): figures measured beside it "
                "would measure it too. Wait for it to end, or stop it."
            ) from None
        since = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}: {what}, since {since}")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()


@contextlib.contextmanager
def refuse_if_busy(what: str) -> Iterator[None]:
    """:func:`machine_to_ourselves` for a ``main``: prints the refusal and exits 2 instead of a traceback."""
    try:
        with machine_to_ourselves(what):
            yield
    except MachineBusy as busy:
        print(f"{what}: {busy}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
