"""Score normalisation helpers shared by plugins (upstream ``plugins/helper/normalize_score.go``)."""

from __future__ import annotations

import numpy as np

from kopf_scheduler.framework.interface import MAX_NODE_SCORE


def default_normalize_score(scores: np.ndarray, *, reverse: bool, max_priority: int = MAX_NODE_SCORE) -> np.ndarray:
    """Scale to [0, max_priority] by the maximum (integer division); ``reverse`` flips high and low.

    All-zero input stays 0, or becomes max_priority everywhere when reversed, as upstream.
    """
    scores = np.asarray(scores, dtype=np.int64)
    max_count = int(scores.max(initial=0))
    if max_count == 0:
        return np.full_like(scores, max_priority) if reverse else scores.copy()
    scaled = max_priority * scores // max_count
    return max_priority - scaled if reverse else scaled
