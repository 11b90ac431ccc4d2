"""The launcher's own guarantees: clean teardown, and no orphans even when its owner is SIGKILLed.

These start extra light-mode clusters (etcd + apiserver, ~3 s each), so they only run locally.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kubernetes import client

from tools.localcluster import REPO_ROOT, LocalCluster, sweep_stale_dirs


@pytest.fixture(autouse=True)
def _local_only(request: pytest.FixtureRequest) -> None:
    if request.config.getoption("--kubeconfig"):
        pytest.skip("tests the local launcher, not the cluster under test")


def _gone(pids: list[int], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive:
            return True
        time.sleep(0.1)
    return False


def test_light_cluster_serves_and_stops_cleanly() -> None:
    with LocalCluster("light") as cluster:
        pids = [c.pid for c in cluster.components.values()]
        assert sorted(cluster.components) == ["etcd", "kube-apiserver"]
        dirs = [cluster.work_dir, cluster.etcd_dir]
        api = cluster.api_client()
        # ServiceAccount admission is off in light mode: pods are accepted without a controller-manager.
        pod = client.V1Pod(
            metadata=client.V1ObjectMeta(name="p"),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="x")]),
        )
        client.CoreV1Api(api).create_namespaced_pod("default", pod)
        api.close()
    for component in cluster.components.values():
        assert component.process.returncode is not None
    assert _gone(pids)
    assert not any(d.exists() for d in dirs)


def test_components_die_with_a_sigkilled_owner(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG: a SIGKILLed owner (no atexit, no handlers) still takes its components along."""
    owner = textwrap.dedent(
        """
        import sys, time
        from tools.localcluster import LocalCluster
        cluster = LocalCluster("light").start()
        print(" ".join(str(c.pid) for c in cluster.components.values()), flush=True)
        time.sleep(600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", owner], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2, f"owner did not start a cluster: {line!r}"
        assert not _gone(pids, timeout=0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert _gone(pids), f"components outlived their SIGKILLed owner: {pids}"
    # Its work dir and tmpfs etcd dir are left behind; the next cluster start sweeps them.
    swept = sweep_stale_dirs()
    assert len([p for p in swept if p.name.startswith(f"kopf-scheduler-cluster-{proc.pid}-")]) == 2
