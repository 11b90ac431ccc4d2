"""The scale benchmark's pure parts (``bench/_scale_checks.py``, ``bench/_scale_report.py``): its sizes from the
environment, the end-of-run check that nothing was lost (pods missing, unbound, bound twice, nodes over their
allocatable), the extrapolation to the issue's size and the generated doc section. No cluster: every pod and node
is given as the API server would list it."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import pytest

from bench._scale_checks import check_placement, env_int, env_size, extrapolate, lost, pod_requests, slope_per_1000
from bench._scale_report import BEGIN, END, render_section


def _node(name: str, cpu: str = "4", memory: str = "32Gi", pods: str = "110") -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods}}}


def _pod(name: str, node: str = "", cpu: str = "100m", memory: str = "500Mi") -> dict[str, Any]:
    container = {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    spec: dict[str, Any] = {"containers": [container]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec}


def test_sizes_default_to_the_issue_and_read_the_environment() -> None:
    assert env_size({}) == (15000, 150000)
    assert env_size({"BENCH_SCALE_NODES": "500", "BENCH_SCALE_PODS": "5_000"}) == (500, 5000)
    assert env_size({"BENCH_SCALE_NODES": " ", "BENCH_SCALE_PODS": ""}) == (15000, 150000)
    assert env_int({"X": "0"}, "X", 7) == 0


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"BENCH_SCALE_NODES": "lots"}, "not an integer"),
        ({"BENCH_SCALE_PODS": "0"}, "must be at least 1"),
        ({"BENCH_SCALE_NODES": "-3"}, "must be at least 1"),
    ],
)
def test_bad_sizes_are_refused_before_anything_runs(environ: dict[str, str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        env_size(environ)


def test_pod_requests_sum_containers_take_the_largest_init_container_and_add_overhead() -> None:
    pod = _pod("p", cpu="100m", memory="500Mi")
    pod["spec"]["containers"].append({"name": "d", "resources": {"requests": {"cpu": "200m"}}})
    pod["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "1", "memory": "1Mi"}}}]
    pod["spec"]["overhead"] = {"cpu": "50m"}
    assert pod_requests(pod) == {"cpu": Fraction(1) + Fraction(1, 20), "memory": 500 * 2**20, "pods": 1}


def test_a_clean_run_loses_nothing() -> None:
    nodes = [_node("n1"), _node("n2")]
    pods = [_pod(f"p{i}", node=f"n{1 + i % 2}") for i in range(40)]
    check = check_placement(pods, nodes)
    assert check["listed"] == check["bound"] == 40
    assert check["nodes_used"] == 2
    assert check["nodes_over_allocatable"] == 0
    assert lost(check, expected=40, rebound=0) == []


def test_missing_unbound_and_twice_bound_pods_are_reported() -> None:
    pods = [_pod("a", node="n1"), _pod("b"), _pod("c", node="ghost"), _pod("a", node="n1")]
    check = check_placement(pods, [_node("n1")])
    assert (check["listed"], check["bound"], check["unbound"], check["on_unknown_nodes"]) == (4, 2, 1, 1)
    assert check["unbound_examples"] == ["b"]
    assert check["duplicate_names"] == 1
    reasons = lost(check, expected=5, rebound=2)
    assert reasons == [
        "4 pods listed, 5 created",
        "1 pods unbound (e.g. b)",
        "1 pods bound to nodes that do not exist",
        "1 pod names listed twice",
        "2 pods seen bound to a second node",
    ]


@pytest.mark.parametrize(
    ("node", "count", "over"),
    [
        (_node("n1", cpu="1"), 10, []),  # 10 x 100m = 1 CPU: exactly full
        (_node("n1", cpu="1"), 11, ["n1: cpu 1.1 > 1"]),
        (_node("n1", memory="1000Mi"), 3, [f"n1: memory {1500 * 2**20} > {1000 * 2**20}"]),
        (_node("n1", pods="2"), 3, ["n1: pods 3 > 2"]),
    ],
)
def test_a_node_over_its_allocatable_is_lost(node: dict[str, Any], count: int, over: list[str]) -> None:
    check = check_placement([_pod(f"p{i}", node="n1") for i in range(count)], [node])
    assert check["over_examples"] == over
    assert check["nodes_over_allocatable"] == (1 if over else 0)
    assert bool(lost(check, expected=count, rebound=0)) == bool(over)


def test_the_memory_slope_is_the_least_squares_fit_per_1000_pods() -> None:
    assert slope_per_1000([(0, 400.0), (5000, 450.0), (10000, 500.0)]) == pytest.approx(10.0)
    assert slope_per_1000([(0, 400.0), (5000, 470.0), (10000, 500.0)]) == pytest.approx(10.0)  # noise around it
    assert slope_per_1000([(5000, 400.0), (5000, 900.0)]) == 0.0


def _result(pods: int = 5000, held: int | None = None) -> dict[str, Any]:
    row = {
        "scheduler": "kube-scheduler",
        "pods": held or pods,
        "throughput_avg": 250.0,
        "wall_s": 21.0,
        "ready_s": 0.8,
        "startup_s": 1.0,
        "duration_s": 20.0,
        "created_s": 10.0,
        "cleanup_s": 5.0,
        "peak_rss_mb": 300.0,
        "rss_base_mb": 100.0,
        "cpu_ms_per_pod": 2.5,
        "nothing_lost": True,
        "lost": [],
        "creation_stopped": "" if held is None else "MemAvailable 100 MiB < 6144 MiB after 4000 pods",
    }
    takeover = {
        "pods": pods,
        "created_s": 10.0,
        "active_startup_s": 5.0,
        "takeover_s": 16.0,
        "standby_all_bound_s": 36.0,
        "backlog_at_kill": pods - 10,
        "standby_active_s": 15.0,
        "peering_lifetime_s": 15,
        "standby_peak_rss_mib": 200.0,
        "nothing_lost": True,
        "lost": [],
    }
    plane = {
        "empty_mib": 400.0,
        "nodes_mib": 10.0,
        "nodes_created_s": 2.0,
        "pods_mib_per_1000": 20.0,
        "peak": {"apiserver_rss_mib": 900.0, "etcd_rss_mib": 100.0, "etcd_data_mib": 200.0, "total_mib": 1200.0},
    }
    return {
        "size": {"nodes": 500, "pods": held or pods, "requested_pods": pods},
        "rows": [row],
        "takeover": takeover,
        "control_plane": plane,
        "runtime_s": 300.0,
        "meta": {
            "nproc": 2,
            "cpu_model": "cpu",
            "ram_gib": 23.5,
            "kernel": "6",
            "kube_scheduler": "Kubernetes v1.36.3",
            "kube_apiserver": "Kubernetes v1.36.3",
            "etcd": ["etcd Version: 3.6.16"],
            "kopf_scheduler": "0.1.0",
            "kopf": "1.45.2",
            "python": "3.11.7",
            "commit": "abc1234",
            "date": "2026-11-28 13:00 UTC",
        },
    }


def test_the_extrapolation_scales_the_per_pod_phases_and_keeps_the_constant_ones() -> None:
    ext = extrapolate(_result(), 15000, 150000)  # 30 times the pods, 30 times the nodes
    assert ext["phases_s"] == {
        "nodes": 60.0,
        "kube-scheduler create": 300.0,
        "kube-scheduler start-up": 1.0,
        "kube-scheduler schedule": 600.0,
        "kube-scheduler cleanup": 150.0,
        "takeover create": 300.0,
        "takeover start-up and wait": 21.0,
        "takeover schedule": 600.0,
    }
    assert ext["total_min"] == round(2032 / 60, 1)
    assert ext["control_plane_mib"] == 400 + 300 + 3000
    assert ext["scheduler_peak_rss_mib"] == {"kube-scheduler": 100 + 200 * 30}


def test_the_section_has_its_markers_the_figures_and_where_the_machine_stopped() -> None:
    result = _result()
    result["extrapolation"] = extrapolate(result, 15000, 150000)
    text = render_section(result)
    assert text.startswith(BEGIN)
    assert text.rstrip().endswith(END)
    assert "| kube-scheduler | 5,000 | 250 | 21.0 | 0.8 | 1.0 | 300 | 2.50 | 10.0 | 0 |" in text
    assert "first bind **16.0 s** after the kill" in text
    assert "stopped short" not in text
    short = render_section(_result(pods=150000, held=4000))
    assert "stopped short of 150,000 pods" in short
    assert "MemAvailable 100 MiB" in short
    broken = copy.deepcopy(result)
    broken["rows"][0].update(nothing_lost=False, lost=["1 pods unbound (e.g. b)"])
    assert "| 1 pods unbound (e.g. b) |" in render_section(broken)


def test_the_capacity_probe_says_whether_the_control_plane_held_the_size() -> None:
    probe = {"created_s": 700.0, "creation_stopped": "", "bound": 150000, "bound_s": 800.0}
    capacity = {**_result(pods=150000), "capacity": probe}
    capacity["size"] = {"nodes": 15000, "pods": 150000, "requested_pods": 150000}
    snapshots = {"nodes created": {"total_mib": 800.0}, "capacity: pods bound": {"total_mib": 5300.0}}
    capacity["control_plane"] = {**capacity["control_plane"], "pending_mib_per_1000": 12.5, "snapshots": snapshots}
    text = render_section(_result(), capacity)
    assert "With every pod bound: 5,300 MiB, 30.0 MiB per 1000 bound pods over the 800 MiB" in text
    assert "150,000 pods would take ≈ 5,300 MiB" in text
    assert "it held all the 150,000 pods asked for, created in 700 s (12.5 MiB per 1000 pending pods" in text
    assert "150,000 bound by the e2e benchmark's ceiling binder in 800 s" in text
    capacity["size"]["pods"] = 90000
    capacity["capacity"]["creation_stopped"] = "MemAvailable 6000 MiB < 6144 MiB after 90000 pods"
    assert "**it stopped at 90,000 of 150,000 pods** (MemAvailable 6000 MiB" in render_section(_result(), capacity)
    assert "Where the control plane stops" not in render_section(_result())
