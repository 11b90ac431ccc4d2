"""ResolvedProfile: a profile after defaults, merging and multiPoint expansion — what the runtime builds.

The builder (``builder.py``) turns a SchedulerProfile spec into this; the runtime (``runtime.py``) turns
this into plugin instances. Keeping the hand-off a plain frozen value makes both sides testable alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from kopf_scheduler.framework.extension_points import ExtensionPoint


@dataclass(frozen=True, slots=True)
class PluginRef:
    """One enabled plugin at one extension point; ``weight`` matters only for Score (≥ 1)."""

    name: str
    weight: int = 1


@dataclass(frozen=True, slots=True)
class ResolvedProfile:
    scheduler_name: str
    #: None → the adaptive default (upstream's global percentageOfNodesToScore 0).
    percentage_of_nodes_to_score: int | None = None
    #: Effective ordered plugins per extension point (points with no plugins may be absent).
    plugins: Mapping[ExtensionPoint, tuple[PluginRef, ...]] = field(default_factory=dict)
    #: Plugin name → typed args (the plugin's ``args_model``) or the raw dict for plugins without one.
    plugin_args: Mapping[str, BaseModel | dict[str, Any]] = field(default_factory=dict)
    #: Plugins of upstream's default profile that the registry lacks, left out of ``plugins``; reported so
    #: status can say what of the default profile does not run.
    omitted_defaults: tuple[str, ...] = ()

    def enabled(self, point: ExtensionPoint) -> tuple[PluginRef, ...]:
        return tuple(self.plugins.get(point, ()))

    def plugin_names(self) -> list[str]:
        """Every plugin enabled anywhere, in first-seen order (one instance per name is built)."""
        seen: dict[str, None] = {}
        for point in ExtensionPoint:
            for ref in self.plugins.get(point, ()):
                seen.setdefault(ref.name, None)
        return list(seen)
