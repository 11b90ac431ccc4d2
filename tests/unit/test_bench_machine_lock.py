"""bench/_machine_lock.py: one benchmark at a time; a second one is refused and told who holds the machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench._machine_lock import MachineBusy, machine_to_ourselves, refuse_if_busy


def test_a_second_benchmark_is_refused_and_named_the_holder(tmp_path: Path) -> None:
    lock = tmp_path / "bench.lock"
    with machine_to_ourselves("bench.e2e", lock):
        assert lock.read_text().startswith("pid ")
        assert ": bench.e2e, since " in lock.read_text()
        busy = r"another benchmark is running on this machine \(pid \d+: bench\.e2e"
        with pytest.raises(MachineBusy, match=busy), machine_to_ourselves("bench.scale", lock):
            pass


def test_the_machine_is_free_again_once_the_run_ends(tmp_path: Path) -> None:
    lock = tmp_path / "bench.lock"
    with machine_to_ourselves("bench.e2e", lock):
        pass
    assert lock.read_text() == ""
    with machine_to_ourselves("bench.scale", lock):
        assert "bench.scale" in lock.read_text()


def test_a_refused_main_exits_2_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = tmp_path / "bench.lock"
    monkeypatch.setenv("BENCH_LOCK_FILE", str(lock))
    ran = False
    with machine_to_ourselves("bench.soak", lock), pytest.raises(SystemExit) as exited, refuse_if_busy("bench.e2e"):
        ran = True
    assert exited.value.code == 2
    assert not ran
    assert "bench.e2e: another benchmark is running on this machine (pid" in capsys.readouterr().err
