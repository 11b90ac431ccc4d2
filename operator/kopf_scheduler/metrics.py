"""Prometheus metrics under kube-scheduler's names, so existing dashboards and alerts work unchanged.

Buckets follow upstream's (reference §8). Each operator process owns one :class:`SchedulerMetrics` on a
private registry, so tests can create as many as they like without colliding in the global registry. It is
also the plugins' ``framework.interface.PluginMetrics`` (the preemption metrics upstream's DefaultPreemption
observes itself), handed to them through the profiles' Handle.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


def _exponential(start: float, factor: float, count: int) -> list[float]:
    return [start * factor**i for i in range(count)]


#: Upstream's result label for an attempt: bound → scheduled; U/UUR → unschedulable; anything else → error.
SCHEDULED, UNSCHEDULABLE, ERROR = "scheduled", "unschedulable", "error"


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.schedule_attempts = Counter(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result.",
            ["result", "profile"],
            registry=r,
        )
        self.scheduling_attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            ["result", "profile"],
            buckets=_exponential(0.001, 2, 15),
            registry=r,
        )
        self.scheduling_algorithm_duration = Histogram(
            "scheduler_scheduling_algorithm_duration_seconds",
            "Scheduling algorithm latency in seconds",
            buckets=_exponential(0.001, 2, 15),
            registry=r,
        )
        self.pending_pods = Gauge(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type.",
            ["queue"],
            registry=r,
        )
        self.pod_scheduling_sli_duration = Histogram(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue.",
            ["attempts"],
            buckets=_exponential(0.01, 2, 20),
            registry=r,
        )
        self.pod_scheduling_attempts = Histogram(
            "scheduler_pod_scheduling_attempts",
            "Number of attempts to successfully schedule a pod.",
            buckets=_exponential(1, 2, 5),
            registry=r,
        )
        self.framework_extension_point_duration = Histogram(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point.",
            ["extension_point", "status", "profile"],
            buckets=_exponential(0.0001, 2, 12),
            registry=r,
        )
        self.preemption_attempts = Counter(
            "scheduler_preemption_attempts",
            "Total preemption attempts in the cluster till now",
            registry=r,
        )
        self.preemption_victims_count = Histogram(
            "scheduler_preemption_victims",
            "Number of selected preemption victims",
            # Upstream: #victims > 64 is rare, so [64, +Inf) is one bucket.
            buckets=_exponential(1, 2, 7),
            registry=r,
        )
        self.cache_size = Gauge(
            "scheduler_cache_size",
            "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
            ["type"],
            registry=r,
        )

    def observe_attempt(self, *, result: str, profile: str, seconds: float) -> None:
        self.schedule_attempts.labels(result=result, profile=profile).inc()
        self.scheduling_attempt_duration.labels(result=result, profile=profile).observe(seconds)

    def observe_scheduled(self, *, attempts: int, seconds_since_first_enqueue: float) -> None:
        label = str(attempts) if attempts < 15 else "15+"
        self.pod_scheduling_sli_duration.labels(attempts=label).observe(seconds_since_first_enqueue)
        self.pod_scheduling_attempts.observe(attempts)

    # -- PluginMetrics (framework.interface) ------------------------------------------------------------
    def preemption_attempt(self) -> None:
        self.preemption_attempts.inc()

    def preemption_victims(self, count: int) -> None:
        self.preemption_victims_count.observe(count)

    def set_pending(self, counts: dict[str, int]) -> None:
        for queue in ("active", "backoff", "unschedulable", "gated"):
            self.pending_pods.labels(queue=queue).set(counts.get(queue, 0))
