"""The size of the fault and frozen-replica e2e scenarios: ``make test`` runs them at scale 1, ``make soak``
(bench/soak.py) bigger, through ``KOPF_SCHEDULER_SOAK_SCALE`` (a whole multiplier of their nodes and bursts)."""

from __future__ import annotations

import os

SCALE_ENV = "KOPF_SCHEDULER_SOAK_SCALE"


def soak_scale() -> int:
    """The multiplier of the scenarios' nodes and bursts (at least 1)."""
    return max(1, int(os.environ.get(SCALE_ENV) or 1))
