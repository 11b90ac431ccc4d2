"""``make demo``: a full local cluster with three kwok nodes, our CRDs and examples, until Ctrl-C.

The cluster's files (kubeconfig, certs, component logs) live in ``.cluster/demo`` in the repository so the
printed ``KUBECONFIG`` path is stable between runs and the logs survive for debugging after Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import yaml
from kubernetes import client

from tools.localcluster import (
    REPO_ROOT,
    LocalCluster,
    create_kwok_nodes,
    kube_version,
    kwok_node,
    wait_nodes_ready,
)

ZONES = ("a", "b", "c")
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def _is_manifest(path: Path) -> bool:
    """Every YAML document in the file is a Kubernetes object (other YAML, e.g. Helm values, is skipped)."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except (OSError, yaml.YAMLError):
        return False
    return bool(docs) and all(isinstance(d, dict) and "apiVersion" in d and "kind" in d for d in docs)


def _manifests(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    candidates = sorted(p for p in directory.rglob("*") if p.suffix in MANIFEST_SUFFIXES and p.is_file())
    return [p for p in candidates if _is_manifest(p)]


def _kubectl(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    return subprocess.run([str(cluster.kubectl), *args], env=env, text=True, capture_output=True)


def _apply_dir(cluster: LocalCluster, directory: Path) -> bool:
    """``kubectl apply`` every manifest under ``directory`` (silently nothing if there are none)."""
    files = _manifests(directory)
    if not files:
        return True
    args = ["apply"]
    for path in files:
        args += ["-f", str(path)]
    result = _kubectl(cluster, *args)
    sys.stdout.write(result.stdout)
    if result.returncode != 0:
        print(f"!! applying {directory.name}/ failed:\n{result.stderr}", file=sys.stderr)
        return False
    return True


def _wait_crds_established(cluster: LocalCluster) -> None:
    result = _kubectl(cluster, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    if result.returncode != 0:
        print(f"!! CRDs not Established:\n{result.stderr}", file=sys.stderr)


def _instructions(cluster: LocalCluster) -> str:
    kubectl = cluster.kubectl
    # Only point at SchedulerProfiles once the CRD is part of the repository (crds/).
    crd_hint = f"    {kubectl} get crd,sp\n" if _manifests(REPO_ROOT / "crds") else ""
    return f"""
The local control plane is up (etcd, kube-apiserver, kube-controller-manager, kwok) on 127.0.0.1.
Component logs: {cluster.work_dir / "logs"}

    export KUBECONFIG={cluster.kubeconfig}
    export PATH={cluster.bin_dir}:$PATH   # kubectl/helm of the pinned release (v{kube_version()})

Try:
    {kubectl} get nodes -L topology.kubernetes.io/zone
{crd_hint}    {kubectl} create deployment web --image=registry.invalid/pause --replicas=3
    {kubectl} get pods -o wide          # Pending: no scheduler runs yet (the operator joins the demo later)
    {kubectl} get events --sort-by=.lastTimestamp

Press Ctrl-C to stop everything.
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, default=REPO_ROOT / ".cluster" / "demo")
    parser.add_argument("--nodes-only", action="store_true", help="do not apply crds/ and examples/")
    args = parser.parse_args(argv)

    print("starting the local control plane ...", flush=True)
    started = time.monotonic()
    with LocalCluster("full", work_dir=args.work_dir) as cluster:
        api = cluster.api_client()
        core = client.CoreV1Api(api)
        names = create_kwok_nodes(
            core,
            [kwok_node(f"kwok-node-{zone}", labels={"topology.kubernetes.io/zone": zone}) for zone in ZONES],
        )
        wait_nodes_ready(core, names, timeout=60)
        if not args.nodes_only:
            if _apply_dir(cluster, REPO_ROOT / "crds") and _manifests(REPO_ROOT / "crds"):
                _wait_crds_established(cluster)
            _apply_dir(cluster, REPO_ROOT / "examples")
        print(f"ready in {time.monotonic() - started:.1f}s", flush=True)
        print(_instructions(cluster), flush=True)
        try:
            while True:
                dead = cluster.dead_components()
                if dead:
                    print(f"!! {', '.join(dead)} exited; tearing down\n{cluster.log_tails()}", file=sys.stderr)
                    return 1
                time.sleep(1)
        except KeyboardInterrupt:
            print("\nstopping the local control plane ...", flush=True)
        finally:
            api.close()
    print("stopped.", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # interrupted during start-up: the cluster has already been torn down
        sys.exit(130)
