"""DefaultPreemption: evict lower-priority pods so a pod that fits nowhere gets a node (upstream
``pkg/scheduler/framework/plugins/defaultpreemption`` and ``pkg/scheduler/framework/preemption``).

A package, split along upstream's files: ``plugin`` (``default_preemption.go``: PreEnqueue, PostFilter,
eligibility, the per-node dry run and its PDB split), ``evaluator`` (``preemption.go``: candidates, dry runs
over the sampled nodes, the preempt extenders, ``pickOneNodeForPreemption``), ``executor`` (``executor.go``:
the victims evicted off the cycle), ``victims`` (what a candidate is, the victims' importance order),
``dry_run`` (victims taken off the shared cache and put back exactly) and ``pod_group`` (``podgrouppreemption.go``:
workload-aware preemption, victims chosen per group for a whole PodGroup).
"""

from kopf_scheduler.plugins.default_preemption.evaluator import (
    EXPLAIN_DROPPED_BY_EXTENDER,
    NO_VICTIMS,
    NOT_ELIGIBLE_NEVER,
    NOT_HELPFUL,
    potential_nodes,
)
from kopf_scheduler.plugins.default_preemption.plugin import (
    NOT_ELIGIBLE_TERMINATING,
    WAITING_FOR_PREEMPTION,
    DefaultPreemption,
)
from kopf_scheduler.plugins.default_preemption.victims import Candidate

__all__ = [
    "EXPLAIN_DROPPED_BY_EXTENDER",
    "NOT_ELIGIBLE_NEVER",
    "NOT_ELIGIBLE_TERMINATING",
    "NOT_HELPFUL",
    "NO_VICTIMS",
    "WAITING_FOR_PREEMPTION",
    "Candidate",
    "DefaultPreemption",
    "potential_nodes",
]
