"""Taints and tolerations, with component-helpers' matching rules (reference §2.5).

Shared by TaintToleration, NodeUnschedulable and PodTopologySpread's ``nodeTaintsPolicy``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> Taint:
        return cls(obj.get("key", ""), obj.get("value", "") or "", obj.get("effect", ""))


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: Taint) -> bool:
        """Upstream ``Toleration.ToleratesTaint``."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return False


#: Parsed tolerations by their raw shape: nearly every pod carries the same few (the two that admission adds
#: for not-ready and unreachable nodes), so pods share one tuple instead of holding ~0.5 KB each.
_TOLERATIONS_BY_SHAPE: dict[tuple[tuple[tuple[str, Any], ...], ...], tuple[Toleration, ...]] = {}
_MAX_SHAPES = 1024


def parse_tolerations(raw: Iterable[dict[str, Any]] | None) -> tuple[Toleration, ...]:
    if not raw:
        return ()
    try:
        shape = tuple(tuple(t.items()) for t in raw)
        found = _TOLERATIONS_BY_SHAPE.get(shape)
    except TypeError:  # an unhashable value: parse it alone
        return _parse_tolerations(raw)
    if found is None:
        if len(_TOLERATIONS_BY_SHAPE) >= _MAX_SHAPES:
            _TOLERATIONS_BY_SHAPE.clear()
        found = _TOLERATIONS_BY_SHAPE[shape] = _parse_tolerations(raw)
    return found


def _parse_tolerations(raw: Iterable[dict[str, Any]]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            t.get("key", "") or "", t.get("operator", "") or "", t.get("value", "") or "", t.get("effect", "") or ""
        )
        for t in raw
    )


def parse_taints(raw: Iterable[dict[str, Any]] | None) -> tuple[Taint, ...]:
    return tuple(Taint.from_obj(t) for t in raw or ())


def tolerates(tolerations: Sequence[Toleration], taint: Taint) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


def first_untolerated(
    taints: Sequence[Taint], tolerations: Sequence[Toleration], effects: frozenset[str]
) -> Taint | None:
    """The first taint with one of ``effects`` that no toleration tolerates (upstream order matters)."""
    for taint in taints:
        if taint.effect in effects and not tolerates(tolerations, taint):
            return taint
    return None
