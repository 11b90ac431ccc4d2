"""``kopf-scheduler convert`` output is what the API server and the operator accept (issue 14, point 4).

A realistic KubeSchedulerConfiguration (two profiles, pluginConfig args, score weights, multiPoint,
percentageOfNodesToScore at both levels, the process settings a real file carries) goes through the console
script (kube-scheduler v1.36.3 accepts the same file); its stdout passes ``kubectl apply --dry-run=server``
against the real API server with the CRD, then is applied for real with the operator running: each profile
becomes Ready with the pipeline the config asked for (the same one ``kopf-scheduler validate`` printed
offline), and schedules a pod. And the other way round: files kube-scheduler refuses, convert refuses, with
upstream's words where they are meant to be the same.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conformance.profile_validation import upstream_binary, upstream_error, write_kubeconfig
from tests.conftest import Cluster, NodeFactory
from tests.e2e.operator_process import (
    OperatorProcess,
    create_pods,
    delete_profile,
    kubectl,
    operator_command,
    pod_manifest,
    wait_pods_bound,
    wait_profile_status,
)


def _config(packer: str, spread: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "parallelism": 16,
        "leaderElection": {
            "leaderElect": True,
            "resourceLock": "leases",
            "resourceName": "kube-scheduler",
            "resourceNamespace": "kube-system",
        },
        "clientConnection": {"kubeconfig": "/etc/kubernetes/scheduler.conf", "qps": 100, "burst": 200},
        "percentageOfNodesToScore": 50,
        "podInitialBackoffSeconds": 2,
        "podMaxBackoffSeconds": 20,
        "profiles": [
            {
                "schedulerName": packer,
                "percentageOfNodesToScore": 100,
                "plugins": {
                    "score": {
                        "disabled": [{"name": "NodeResourcesBalancedAllocation"}, {"name": "ImageLocality"}],
                        "enabled": [{"name": "NodeResourcesFit", "weight": 5}],
                    }
                },
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {
                            "apiVersion": "kubescheduler.config.k8s.io/v1",
                            "kind": "NodeResourcesFitArgs",
                            "scoringStrategy": {
                                "type": "MostAllocated",
                                "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
                            },
                        },
                    }
                ],
            },
            {
                "schedulerName": spread,
                "plugins": {"multiPoint": {"disabled": [{"name": "ImageLocality"}]}},
                "pluginConfig": [
                    {
                        "name": "PodTopologySpread",
                        "args": {
                            "defaultingType": "List",
                            "defaultConstraints": [
                                {
                                    "maxSkew": 1,
                                    "topologyKey": "kubernetes.io/hostname",
                                    "whenUnsatisfiable": "ScheduleAnyway",
                                }
                            ],
                        },
                    }
                ],
            },
        ],
    }


def _upstream_accepts(config: dict[str, Any], work_dir: Path) -> None:
    """kube-scheduler v1.36.3 validates the file and builds both profiles' frameworks (``--write-config-to``
    exits right after that, before connecting; the kubeconfig names a closed port)."""
    own = {**config, "clientConnection": {**config["clientConnection"], "kubeconfig": str(work_dir / "kc.yaml")}}
    write_kubeconfig(work_dir / "kc.yaml")
    path = work_dir / "upstream.json"
    path.write_text(json.dumps(own))
    args = [f"--config={path}", "--secure-port=0", f"--write-config-to={work_dir / 'written.yaml'}", "-v=0"]
    proc = subprocess.run([str(upstream_binary()), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, upstream_error(proc.stderr)


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*operator_command(), *args], input=stdin, capture_output=True, text=True, timeout=120)


def test_converted_profiles_apply_and_become_ready(
    cluster: Cluster,
    crds: list[str],
    kwok_nodes: NodeFactory,
    namespace: str,
    operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    suffix = secrets.token_hex(3)
    packer, spread = f"packer-{suffix}", f"spread-{suffix}"
    config = tmp_path / "kube-scheduler-config.yaml"
    config.write_text(yaml.safe_dump(_config(packer, spread), sort_keys=False))
    _upstream_accepts(_config(packer, spread), tmp_path)

    converted = _cli("convert", str(config))
    assert converted.returncode == 0, converted.stderr
    manifests = list(yaml.safe_load_all(converted.stdout))
    assert [m["metadata"]["name"] for m in manifests] == [packer, spread]
    for dropped in ("parallelism", "leaderElection", "clientConnection"):
        assert f"  - {dropped}: " in converted.stderr.split("not carried over:")[1]
    assert "--pod-initial-backoff-seconds 2" in converted.stderr

    dry_run = kubectl(cluster.kubeconfig, "apply", "--dry-run=server", "-f", "-", stdin=converted.stdout)
    assert dry_run.returncode == 0, dry_run.stderr
    assert dry_run.stdout.count("(server dry run)") == 2

    offline = _cli("validate", "-o", "json", "-", stdin=converted.stdout)
    assert offline.returncode == 0, offline.stdout + offline.stderr
    predicted = {entry["name"]: entry for entry in json.loads(offline.stdout)}

    labels = {"e2e-group": secrets.token_hex(4)}
    kwok_nodes(cpu="8", memory="32Gi", labels=labels)
    kwok_nodes(cpu="8", memory="32Gi", labels=labels)
    try:
        applied = kubectl(cluster.kubeconfig, "apply", "-f", "-", stdin=converted.stdout)
        assert applied.returncode == 0, applied.stderr
        for name in (packer, spread):
            profile = wait_profile_status(cluster.api, name, ready=True, timeout=60)
            status = profile["status"]
            assert status["effectivePlugins"] == predicted[name]["effectivePlugins"]
            assert status["scorePlugins"] == predicted[name]["scorePlugins"]
        packer_score = predicted[packer]["scorePlugins"].split(",")
        assert packer_score[0] == "NodeResourcesFit:5"
        assert not any(p.startswith(("ImageLocality:", "NodeResourcesBalancedAllocation:")) for p in packer_score)
        assert not any(p.startswith("ImageLocality:") for p in predicted[spread]["scorePlugins"].split(","))

        pods = [pod_manifest(f"pod-{name}", name, cpu="100m", node_selector=labels) for name in (packer, spread)]
        create_pods(cluster.core, namespace, pods)
        wait_pods_bound(cluster.core, namespace, [p["metadata"]["name"] for p in pods], timeout=30)
    finally:
        for name in (packer, spread):
            delete_profile(cluster.api, name, force=True)


#: Files kube-scheduler v1.36.3 refuses: convert refuses each too. ``UPSTREAM_TEXT``: our message contains
#: upstream's whole error; otherwise the text both messages contain (upstream prints a duplicate's path as
#: ``{}``, ours names it; the version check is worded differently).
UPSTREAM_TEXT = "<upstream's error>"
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("unknown fields", {"featureGates": {"A": True}, "profiles": [{"schedulerName": "a", "weight": 1}]}, UPSTREAM_TEXT),
    (
        "nested unknown field",
        {"profiles": [{"schedulerName": "a", "plugins": {"score": {"enable": []}}}]},
        UPSTREAM_TEXT,
    ),
    ("parallelism 0", {"parallelism": 0}, UPSTREAM_TEXT),
    ("max backoff below initial", {"podInitialBackoffSeconds": 20}, UPSTREAM_TEXT),
    ("percentage 150", {"percentageOfNodesToScore": 150}, UPSTREAM_TEXT),
    (
        "duplicate names",
        {"profiles": [{"schedulerName": "a"}, {"schedulerName": "a"}]},
        "profiles[1].schedulerName: Duplicate value: ",
    ),
    ("second profile unnamed", {"profiles": [{"schedulerName": "a"}, {}]}, UPSTREAM_TEXT),
    ("v1beta3", {"apiVersion": "kubescheduler.config.k8s.io/v1beta3"}, "kubescheduler.config.k8s.io/v1beta3"),
]


@pytest.mark.parametrize(("fields", "common"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_convert_refuses_what_kube_scheduler_refuses(fields: dict[str, Any], common: str, tmp_path: Path) -> None:
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(write_kubeconfig(tmp_path / "kc.yaml"))},
        **fields,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    args = [f"--config={path}", "--secure-port=0", f"--write-config-to={tmp_path / 'written.yaml'}", "-v=0"]
    upstream = subprocess.run([str(upstream_binary()), *args], capture_output=True, text=True, timeout=60)
    ours = _cli("convert", str(path))
    assert upstream.returncode != 0
    assert (ours.returncode, ours.stdout) == (1, "")
    upstream_text = upstream_error(upstream.stderr)
    if common == UPSTREAM_TEXT:
        assert upstream_text in ours.stderr
    else:
        assert common in upstream_text
        assert common in ours.stderr
