"""Label selectors (metav1.LabelSelector) and node selector requirements, parsed once, matched fast.

Pod selectors are matched against pods' label dicts (PodTopologySpread, InterPodAffinity counting); node
selectors, with their own parsing rules, live in :mod:`kopf_scheduler.state.node_affinity`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``key op values`` clause. Ops: In, NotIn, Exists, DoesNotExist (+ Gt, Lt for nodes)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            return labels.get(self.key) in self.values if self.key in labels else False
        if op == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        if op in ("Gt", "Lt"):
            if self.key not in labels or len(self.values) != 1:
                return False
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > want if op == "Gt" else have < want
        return False


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed ``metav1.LabelSelector``. ``None`` selectors are represented by :data:`NOTHING`."""

    requirements: tuple[Requirement, ...]
    matches_nothing: bool = False

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> LabelSelector:
        """Upstream ``LabelSelectorAsSelector``: nil → nothing; ``{}`` → everything."""
        if raw is None:
            return NOTHING
        reqs = [Requirement(k, "In", (v,)) for k, v in sorted((raw.get("matchLabels") or {}).items())]
        for expr in raw.get("matchExpressions") or ():
            reqs.append(Requirement(expr.get("key", ""), expr.get("operator", ""), tuple(expr.get("values") or ())))
        return cls(tuple(reqs))

    @property
    def is_empty(self) -> bool:
        """Matches everything (``{}``)."""
        return not self.requirements and not self.matches_nothing

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.matches_nothing:
            return False
        return all(r.matches(labels) for r in self.requirements)


#: The selector that matches no object (a nil selector in upstream terms).
NOTHING = LabelSelector((), matches_nothing=True)
