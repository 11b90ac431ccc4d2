"""The end-to-end benchmark's CPU pinning: CPU lists as ``taskset -c`` reads them, every thread of a process pinned,
and the pinning said in the report."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench._e2e_pinning import parse_cpus, pin_process
from bench._e2e_report import _pinning_text
from bench.e2e import Config


def test_parse_cpus_reads_lists_and_ranges() -> None:
    assert parse_cpus("") == frozenset()
    assert parse_cpus("3") == {3}
    assert parse_cpus("0,2-4, 7") == {0, 2, 3, 4, 7}
    with pytest.raises(ValueError, match="not a CPU range: '4-2'"):
        parse_cpus("4-2")
    with pytest.raises(ValueError, match="invalid literal"):
        parse_cpus("a")


def test_pin_process_pins_every_thread_of_a_running_process() -> None:
    cpu = min(os.sched_getaffinity(0))  # a CPU this test may use, whatever the machine's cpuset
    code = (
        "import threading, time\n"
        "for _ in range(3): threading.Thread(target=time.sleep, args=(30,)).start()\n"
        "print('up', flush=True); time.sleep(30)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"up\n"
        assert pin_process(child.pid, {cpu}) == 4  # the main thread and its three
        for task in os.listdir(f"/proc/{child.pid}/task"):
            assert os.sched_getaffinity(int(task)) == {cpu}
    finally:
        child.kill()
        child.wait()


def test_the_harness_reads_the_pinning_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_APISERVER_CPUS", "0-1")
    monkeypatch.setenv("BENCH_SCHEDULER_CPUS", "2,3")
    config = Config.from_env()
    assert (config.apiserver_cpus, config.scheduler_cpus) == ({0, 1}, {2, 3})
    monkeypatch.delenv("BENCH_APISERVER_CPUS")
    monkeypatch.delenv("BENCH_SCHEDULER_CPUS")
    assert Config.from_env().apiserver_cpus == frozenset()


def test_the_report_says_the_pinning_only_when_there_was_one() -> None:
    rows = [{"workload_id": "gangs"}]
    assert _pinning_text({"meta": {}, "rows": rows}) == []
    pinned = {"cpu_pinning": {"apiserver_cpus": [0, 1], "scheduler_cpus": []}}
    assert _pinning_text({"meta": pinned, "rows": rows}) == [
        "- CPU pinning: etcd and kube-apiserver on CPUs 0,1, the scheduler under test on CPUs not pinned."
    ]
