"""scheduler-plugins' Coscheduling plugin (``plugin.py``), its PodGroup manager (``core.py``) and the Go quantity
arithmetic its "resource gap" message prints (``go_quantity.py``)."""

from kopf_scheduler.plugins.coscheduling.plugin import NAME, Coscheduling

__all__ = ["NAME", "Coscheduling"]
