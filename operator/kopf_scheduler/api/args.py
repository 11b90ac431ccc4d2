"""Typed plugin args (``pluginConfig[].args``) with upstream's v1 defaults (reference §2, §7.3).

Field names are upstream's JSON names (camelCase aliases) so KubeSchedulerConfiguration snippets paste in;
Python code uses the snake_case attributes. Unknown fields are rejected, as upstream's strict decoding does.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class ArgsModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class ResourceSpec(ArgsModel):
    """A resource and its weight in a scoring strategy."""

    name: str = Field(description="Resource name, e.g. cpu, memory or an extended resource.")
    weight: int = Field(default=1, description="Weight of this resource; 0 or unset means 1.")


def _default_resources() -> list[ResourceSpec]:
    return [ResourceSpec(name="cpu", weight=1), ResourceSpec(name="memory", weight=1)]


class UtilizationShapePoint(ArgsModel):
    utilization: int = Field(description="Utilization (x axis), 0..100.")
    score: int = Field(description="Score (y axis), 0..10.")


class RequestedToCapacityRatioParam(ArgsModel):
    shape: list[UtilizationShapePoint] = Field(description="Piecewise-linear function of utilization → score.")


class ScoringStrategy(ArgsModel):
    type: Literal["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"] = Field(
        default="LeastAllocated", description="How NodeResourcesFit scores nodes."
    )
    resources: list[ResourceSpec] = Field(default_factory=_default_resources)
    requested_to_capacity_ratio: RequestedToCapacityRatioParam | None = None


class NodeResourcesFitArgs(ArgsModel):
    ignored_resources: list[str] = Field(default_factory=list)
    ignored_resource_groups: list[str] = Field(default_factory=list)
    scoring_strategy: ScoringStrategy = Field(default_factory=ScoringStrategy)


class NodeResourcesBalancedAllocationArgs(ArgsModel):
    resources: list[ResourceSpec] = Field(default_factory=_default_resources)


class NodeAffinityArgs(ArgsModel):
    #: A v1.NodeAffinity applied to every pod of the profile (kept raw: it has the pod API's shape).
    added_affinity: dict[str, Any] | None = None


class PodTopologySpreadArgs(ArgsModel):
    #: v1.TopologySpreadConstraint objects without labelSelector (raw API shape).
    default_constraints: list[dict[str, Any]] = Field(default_factory=list)
    defaulting_type: Literal["System", "List"] = "System"


class InterPodAffinityArgs(ArgsModel):
    hard_pod_affinity_weight: int = 1
    ignore_preferred_terms_of_existing_pods: bool = False


class DefaultPreemptionArgs(ArgsModel):
    min_candidate_nodes_percentage: int = 10
    min_candidate_nodes_absolute: int = 100


class VolumeBindingArgs(ArgsModel):
    bind_timeout_seconds: int = 600
    shape: list[UtilizationShapePoint] | None = None
