"""ImageLocality: prefer nodes that already hold the pod's images, weighted by how rare they are (§2.12).

Upstream ``plugins/imagelocality``, v1.36. For every image of the pod (init containers, containers and,
since image volumes went GA in 1.36, ``volumes[].image.reference``), in order and with repeats, a node
holding it adds ``int(size × spread)``, where spread = nodes holding the image / nodes in the snapshot:
an image present everywhere is worth its full size, a rare one little, so pods do not pile onto the few
nodes that happen to have pulled it ("node heating"). The sum is clamped to [23 MiB, 1000 MiB × number of
init + regular containers] (image volumes add to the sum, not to the bound) and mapped linearly onto
0..100 with integer division. There is no NormalizeScore.

Image names are compared after upstream's ``normalizedImageName``: ``:latest`` is appended when the name
has no tag, i.e. when its last ``:`` is not after its last ``/`` (so ``host:5000/app`` gets a tag and a
digest reference ``app@sha256:…`` does not). Node names are used as reported in ``status.images``.

The cache keeps image name → holding slots (``ClusterCache.image_nodes``), so a score costs one lookup per
distinct image plus one masked add over the candidate nodes.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from kopf_scheduler.framework import MAX_NODE_SCORE, ClusterEventWithHint, CycleState, ScorePlugin
from kopf_scheduler.plugins.helper.volumes import pod_volumes

if TYPE_CHECKING:
    from kopf_scheduler.state.cache import Snapshot
    from kopf_scheduler.state.pod_info import PodInfo

NAME = "ImageLocality"

MB = 1024 * 1024
#: Sums below this score 0 (23 MiB; upstream ``minThreshold``).
MIN_THRESHOLD = 23 * MB
#: Per container: sums at or above ``MAX_CONTAINER_THRESHOLD × containers`` score 100.
MAX_CONTAINER_THRESHOLD = 1000 * MB

_MEMO_IMAGES = NAME + "/images"


def normalized_image_name(name: str) -> str:
    """Upstream ``normalizedImageName``: append ``:latest`` unless a tag follows the last path segment."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


def pod_image_names(pod: PodInfo) -> Counter[str]:
    """Normalised image name → how many times the pod uses it (containers, init containers, image volumes)."""
    found: Counter[str] | None = pod.memo.get(_MEMO_IMAGES)
    if found is None:
        names = list(pod.images)
        for volume in pod_volumes(pod):
            image = volume.get("image")
            if image is not None:
                names.append(image.get("reference") or "")
        found = pod.memo[_MEMO_IMAGES] = Counter(normalized_image_name(n) for n in names)
    return found


def scaled_image_score(size: int, num_holders: int, total_nodes: int) -> int:
    """Upstream ``scaledImageScore``: float64 size × float64 spread, truncated to int64."""
    spread = float(num_holders) / float(total_nodes)
    return int(float(size) * spread)


def calculate_priority(sums: np.ndarray, num_containers: int) -> np.ndarray:
    """Upstream ``calculatePriority``, element-wise: clamp, then 100 × (sum − min) / (max − min), truncated."""
    max_threshold = MAX_CONTAINER_THRESHOLD * num_containers
    clamped = np.where(sums < MIN_THRESHOLD, MIN_THRESHOLD, np.where(sums > max_threshold, max_threshold, sums))
    numerator = MAX_NODE_SCORE * (clamped - MIN_THRESHOLD)
    denominator = max_threshold - MIN_THRESHOLD
    # Go's division truncates toward zero; numpy's // floors. They differ only for a negative quotient,
    # which needs a pod without containers (max below min) and so never happens for a valid pod.
    quotient = np.abs(numerator) // abs(denominator)
    scores: np.ndarray = np.where((numerator < 0) != (denominator < 0), -quotient, quotient).astype(np.int64)
    return scores


class ImageLocality(ScorePlugin):
    name: ClassVar[str] = NAME

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return []  # it never rejects a pod, so no event needs to requeue one

    def score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> np.ndarray:
        total_nodes = snapshot.num_nodes
        sums: np.ndarray | None = None
        image_nodes = snapshot.cache.image_nodes
        capacity = snapshot.table.capacity
        for name, uses in pod_image_names(pod).items():
            holders = image_nodes.get(name)
            if not holders or total_nodes == 0:
                continue
            # Upstream's image state keeps the size reported by the first node that registered the name.
            size = next(iter(holders.values()))
            contribution = scaled_image_score(size, len(holders), total_nodes) * uses
            if contribution == 0:
                continue
            if len(holders) < len(nodes):
                held = np.zeros(capacity, dtype=bool)
                held[np.fromiter(holders, dtype=np.int64, count=len(holders))] = True
                has_image = held[nodes]
            else:
                has_image = np.fromiter((slot in holders for slot in nodes.tolist()), dtype=bool, count=len(nodes))
            sums = contribution * has_image if sums is None else sums + contribution * has_image
        if sums is None:  # no node has any of the pod's images (or none counts): a sum of 0 is clamped up to
            return np.zeros(len(nodes), dtype=np.int64)  # the minimum threshold, which scores 0 on every node
        return calculate_priority(sums, pod.num_containers)
