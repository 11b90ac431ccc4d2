"""ImageLocality: name normalisation, spread scaling, clamping, init containers and image volumes (§2.12, §2.22)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kopf_scheduler.framework import CycleState
from kopf_scheduler.plugins.image_locality import (
    MAX_CONTAINER_THRESHOLD,
    MIN_THRESHOLD,
    ImageLocality,
    calculate_priority,
    normalized_image_name,
)
from tests.unit.factories import FakeHandle, make_cache, make_node, make_pod, pod_info, slots

MiB = 1024 * 1024


def image(size_mib: int, *names: str) -> dict[str, Any]:
    return {"names": list(names), "sizeBytes": size_mib * MiB}


def scores(
    node_images: list[list[dict[str, Any]]], spec: dict[str, Any], candidates: list[int] | None = None
) -> list[int]:
    """Scores of node i (``node_images[i]``), for all nodes or the ``candidates`` indices."""
    cache = make_cache([make_node(f"n{i}", images=imgs) for i, imgs in enumerate(node_images)])
    snapshot = cache.snapshot()
    indices = range(len(node_images)) if candidates is None else candidates
    nodes = slots(snapshot, [f"n{i}" for i in indices])
    result = ImageLocality(handle=FakeHandle(cache)).score(CycleState(), pod_info(make_pod(spec=spec)), nodes, snapshot)
    assert result.dtype == np.int64
    return result.tolist()


def containers(*images: str) -> list[dict[str, Any]]:
    return [{"name": f"c{i}", "image": name} for i, name in enumerate(images)]


@pytest.mark.parametrize(
    ("node_images", "spec", "candidates", "expected"),
    [
        pytest.param(
            [[image(500, "app:1")]] * 5 + [[]] * 5,
            {"containers": containers("app:1")},
            None,
            [23] * 5 + [0] * 5,
            id="worked-example-2.22",
        ),
        pytest.param(
            [[image(300, "app:1")]] * 3,
            {"containers": containers("app:1")},
            None,
            [28, 28, 28],
            id="everywhere-full-size",
        ),
        pytest.param(
            [[image(2000, "big:1")]] * 2,
            {"containers": containers("big:1")},
            None,
            [100, 100],
            id="clamped-to-max",
        ),
        pytest.param(
            [[image(30, "small:1")], [], []],
            {"containers": containers("small:1")},
            None,
            [0, 0, 0],
            id="below-min-is-zero",
        ),
        pytest.param(
            [[image(600, "app:1")], [image(600, "app:1")], [], []],
            {"initContainers": containers("app:1"), "containers": containers("app:1")},
            None,
            [29, 29, 0, 0],
            id="init-container-counts-and-raises-max",
        ),
        pytest.param(
            [[image(800, "data:1"), image(100, "app:1")], [image(800, "data:1")]],
            {
                "containers": containers("app:1"),
                "volumes": [{"name": "v", "image": {"reference": "data:1"}}],
            },
            None,
            [84, 79],
            id="image-volume-counts-not-in-max",
        ),
        pytest.param(
            [[image(400, "app:1")], [image(400, "app:1")], [], []],
            {"containers": containers("app:1")},
            [0, 2],
            [18, 0],
            id="spread-over-snapshot-not-candidates",
        ),
        pytest.param(
            [[image(500, "nginx:latest")]] * 5 + [[]] * 5,
            {"containers": containers("nginx")},
            [0, 5],
            [23, 0],
            id="untagged-gets-latest",
        ),
        pytest.param(
            [[image(500, "reg.io/app@sha256:abc", "reg.io/app:v1")]] * 5 + [[]] * 5,
            {"containers": containers("reg.io/app@sha256:abc")},
            [0, 9],
            [23, 0],
            id="digest-name-matches",
        ),
        pytest.param(
            [[image(500, "localhost:5000/app:latest")]] * 5 + [[]] * 5,
            {"containers": containers("localhost:5000/app")},
            [0],
            [23],
            id="registry-port-is-not-a-tag",
        ),
        pytest.param(
            [[image(500, "app:1")]] * 5 + [[]] * 5,
            {"containers": containers("app:2")},
            [0],
            [0],
            id="other-tag-no-match",
        ),
    ],
)
def test_score(
    node_images: list[list[dict[str, Any]]], spec: dict[str, Any], candidates: list[int] | None, expected: list[int]
) -> None:
    assert scores(node_images, spec, candidates) == expected


@pytest.mark.parametrize(
    ("name", "normalized"),
    [
        ("nginx", "nginx:latest"),
        ("nginx:1.27", "nginx:1.27"),
        ("library/nginx", "library/nginx:latest"),
        ("localhost:5000/app", "localhost:5000/app:latest"),
        ("localhost:5000/app:v1", "localhost:5000/app:v1"),
        ("reg.io/app@sha256:0123", "reg.io/app@sha256:0123"),
        ("", ":latest"),
    ],
)
def test_normalized_image_name(name: str, normalized: str) -> None:
    assert normalized_image_name(name) == normalized


@pytest.mark.parametrize(
    ("total", "num_containers", "expected"),
    [
        (0, 1, 0),
        (0, 0, 0),  # a sum of 0 scores 0 even without containers: score() returns 0 without the arithmetic
        (MIN_THRESHOLD, 1, 0),
        (262_144_000, 1, 23),
        (MAX_CONTAINER_THRESHOLD, 1, 100),
        (MAX_CONTAINER_THRESHOLD + 1, 1, 100),
        (MAX_CONTAINER_THRESHOLD, 2, 49),
    ],
)
def test_calculate_priority(total: int, num_containers: int, expected: int) -> None:
    assert calculate_priority(np.asarray([total], dtype=np.int64), num_containers).tolist() == [expected]


def test_image_shared_by_many_nodes_uses_node_scan_path() -> None:
    # More holders than candidates takes the per-candidate membership path; the verdict must be the same.
    node_images = [[image(500, "app:1")]] * 5 + [[]] * 5
    assert scores(node_images, {"containers": containers("app:1")}, [0, 7]) == [23, 0]


def test_node_image_update_and_removal_change_spread() -> None:
    cache = make_cache([make_node(f"n{i}", images=[image(500, "app:1")]) for i in range(5)] + [make_node("n5")])
    plugin = ImageLocality(handle=FakeHandle(cache))
    pod = pod_info(make_pod(spec={"containers": containers("app:1")}))

    def score_of(name: str) -> int:
        snapshot = cache.snapshot()
        return int(plugin.score(CycleState(), pod, slots(snapshot, [name]), snapshot)[0])

    assert score_of("n0") == 100 * (int(500 * MiB * 5 / 6) - MIN_THRESHOLD) // (MAX_CONTAINER_THRESHOLD - MIN_THRESHOLD)
    cache.add_or_update_node(make_node("n1"))  # image gone from n1
    cache.remove_node("n2")
    # 3 holders out of 5 nodes.
    assert score_of("n0") == 100 * (int(500 * MiB * 3 / 5) - MIN_THRESHOLD) // (MAX_CONTAINER_THRESHOLD - MIN_THRESHOLD)
    assert score_of("n1") == 0


def test_registers_no_events() -> None:
    # It never rejects a pod, so no cluster event needs to requeue one.
    assert ImageLocality(handle=FakeHandle()).events_to_register() == []
