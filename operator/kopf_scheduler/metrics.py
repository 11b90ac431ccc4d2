"""Prometheus metrics under kube-scheduler's names and buckets (reference §8, ``pkg/scheduler/metrics``).

The names, labels and buckets are upstream's, so queries written for kube-scheduler read ours; what a
dashboard also selects on is the ``job`` label, which the scrape configuration sets (the chart's
``metrics.serviceMonitor.jobLabel``: ``kube-scheduler`` makes kube-scheduler dashboards match). Each operator
process owns one :class:`SchedulerMetrics` on a private registry, so tests can create as many as they like
without colliding in the global registry; the process and Python collectors are registered on it too.
It is also the plugins' ``framework.interface.PluginMetrics`` (the preemption metrics upstream's
DefaultPreemption observes itself), handed to them through the profiles' Handle.
"""

from __future__ import annotations

import contextlib
import platform
import random
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from kopf_scheduler._version import __version__


def _exponential(start: float, factor: float, count: int) -> list[float]:
    return [start * factor**i for i in range(count)]


#: Upstream's result label for an attempt: bound → scheduled; U/UUR → unschedulable; anything else → error.
SCHEDULED, UNSCHEDULABLE, ERROR = "scheduled", "unschedulable", "error"
#: The pod-group attempt's fourth result: feasible once preemption completes (upstream ``WaitingOnPreemptionResult``).
WAITING_ON_PREEMPTION = "waiting_on_preemption"


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        #: (metric, label values) → its child, for the metrics observed per cycle (:meth:`_child`).
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
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
        self.resource_claim_creates = Counter(
            "scheduler_resourceclaim_creates",
            "Number of ResourceClaims creation requests within scheduler",
            ["status"],
            registry=r,
        )
        self.cache_size = Gauge(
            "scheduler_cache_size",
            "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
            ["type"],
            registry=r,
        )
        # The pod-group cycle's (upstream: with the GenericWorkload gate; here: workload-aware profiles).
        self.podgroup_schedule_attempts = Counter(
            "scheduler_podgroup_schedule_attempts",
            "Number of attempts to schedule pod group, by the result. 'unschedulable' means a pod group could not be "
            "scheduled, while 'error' means an internal scheduler problem.",
            ["result", "profile"],
            registry=r,
        )
        self.podgroup_scheduling_attempt_duration = Histogram(
            "scheduler_podgroup_scheduling_attempt_duration_seconds",
            "Pod group scheduling attempt latency in seconds (scheduling algorithm + binding)",
            ["result", "profile"],
            buckets=_exponential(0.001, 2, 15),
            registry=r,
        )
        self.podgroup_scheduling_algorithm_duration = Histogram(
            "scheduler_podgroup_scheduling_algorithm_duration_seconds",
            "Pod group scheduling algorithm latency in seconds",
            buckets=_exponential(0.001, 2, 15),
            registry=r,
        )
        # Ours, not upstream's (kube-scheduler has no extender error metric): failed calls per extender and verb
        # (unreachable, timeout, non-200, undecodable answer, or an Error in the answer), ignorable or not.
        self.extender_errors = Counter(
            "kopf_scheduler_extender_errors",
            "Failed calls to HTTP scheduler extenders, by extender (its urlPrefix) and verb "
            "(filter, prioritize, preempt, bind)",
            ["extender", "verb"],
            registry=r,
        )
        self._init_monitoring()

    def _child(self, metric: MetricWrapperBase, *values: str) -> Any:
        """``metric.labels(*values)`` (values in the metric's label order), looked up once per label values:
        prometheus_client checks the labels and takes a lock on every ``labels()`` call, a measurable share of
        the per-pod bookkeeping. Children are never removed from these metrics, so a kept one stays current."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def observe_attempt(self, *, result: str, profile: str, seconds: float) -> None:
        self._child(self.schedule_attempts, result, profile).inc()
        self._child(self.scheduling_attempt_duration, result, profile).observe(seconds)

    def observe_pod_group_attempt(self, *, result: str, profile: str, seconds: float) -> None:
        """``scheduler_podgroup_schedule_attempts_total`` and ``…_scheduling_attempt_duration_seconds`` (upstream
        ``observePodGroupScheduleAttemptAndLatency``)."""
        self._child(self.podgroup_schedule_attempts, result, profile).inc()
        self._child(self.podgroup_scheduling_attempt_duration, result, profile).observe(seconds)

    def observe_scheduled(self, *, attempts: int, seconds_since_first_enqueue: float) -> None:
        label = str(attempts) if attempts < 15 else "15+"
        self._child(self.pod_scheduling_sli_duration, label).observe(seconds_since_first_enqueue)
        self.pod_scheduling_attempts.observe(attempts)

    def extender_error(self, extender: str, verb: str) -> None:
        self.extender_errors.labels(extender=extender, verb=verb).inc()

    # -- PluginMetrics (framework.interface) ------------------------------------------------------------
    def preemption_attempt(self) -> None:
        self.preemption_attempts.inc()

    def preemption_victims(self, count: int) -> None:
        self.preemption_victims_count.observe(count)

    def resource_claim_create(self, status: str) -> None:
        self.resource_claim_creates.labels(status=status).inc()

    def set_pending(self, counts: dict[str, int]) -> None:
        for queue in ("active", "backoff", "unschedulable", "gated"):
            self.pending_pods.labels(queue=queue).set(counts.get(queue, 0))

    # -- queue, plugin, process and peering metrics ----------------------------------------------------
    def _init_monitoring(self) -> None:
        r = self.registry
        self.queue_incoming_pods = Counter(
            "scheduler_queue_incoming_pods",
            "Number of pods added to scheduling queues by event and queue type.",
            ["queue", "event"],
            registry=r,
        )
        self.unschedulable_pods = Gauge(
            "scheduler_unschedulable_pods",
            "The number of unschedulable pods broken down by plugin name. A pod will increment the gauge for all "
            "plugins that caused it to not schedule and so this metric have meaning only when broken down by plugin.",
            ["plugin", "profile"],
            registry=r,
        )
        self._unschedulable_labels: dict[str, set[str]] = {}
        #: Ours (no upstream counterpart): what the "pods pending too long" alert of the chart reads.
        self.longest_waiting_pod = Gauge(
            "kopf_scheduler_longest_waiting_pod_seconds",
            "Seconds since the first scheduling attempt of the longest-waiting pod that failed and waits for "
            "another (backoff or unschedulable); 0 when there is none.",
            ["profile"],
            registry=r,
        )
        self.plugin_execution_duration = Histogram(
            "scheduler_plugin_execution_duration_seconds",
            "Duration for running a plugin at a specific extension point.",
            ["plugin", "extension_point", "status"],
            buckets=_exponential(0.00001, 1.5, 20),
            registry=r,
        )
        #: kube-scheduler's leader gauge (client-go ``leader_election_master_status``): 1 on the active peer.
        self.leader_election_master_status = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates "
            "master. 'name' is the string used to identify the lease. Please make sure to group by name.",
            ["name"],
            registry=r,
        )
        Gauge(
            "kopf_scheduler_build_info",
            "A metric with a constant '1' value labeled by the operator version, the kube-scheduler release whose "
            "behaviour it reproduces, and the Python version.",
            ["version", "kube_version", "python_version"],
            registry=r,
        ).labels(
            version=__version__, kube_version=KUBE_BEHAVIOUR_VERSION, python_version=platform.python_version()
        ).set(1)
        # process_* (CPU, memory, file descriptors, start time), python_info and python_gc_*, as the default
        # registry has them; kube-scheduler exposes process_* and its Go runtime's go_*.
        if r is not REGISTRY:  # the global registry has them already
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)

    def queue_incoming(self, queue: str, event: str) -> None:
        """``scheduler_queue_incoming_pods_total``: a pod entered ``queue`` because of ``event``."""
        self._child(self.queue_incoming_pods, queue, event).inc()

    def set_longest_waiting(self, profile: str, seconds: float) -> None:
        self.longest_waiting_pod.labels(profile=profile).set(seconds)

    def set_cache_size(self, sizes: Mapping[str, int]) -> None:
        for kind, size in sizes.items():
            self.cache_size.labels(type=kind).set(size)

    def forget_profile(self, profile: str) -> None:
        """A deleted profile's gauges go (its last values would otherwise stay for ever)."""
        for plugin in self._unschedulable_labels.pop(profile, set()):
            with contextlib.suppress(KeyError):
                self.unschedulable_pods.remove(plugin, profile)
        with contextlib.suppress(KeyError):
            self.longest_waiting_pod.remove(profile)

    def set_unschedulable(self, profile: str, counts: Mapping[str, int]) -> None:
        """``scheduler_unschedulable_pods{profile}``: queued pods per rejecting plugin; plugins no longer
        counted drop to 0 (as upstream's gauge does once their pods leave)."""
        seen = self._unschedulable_labels.setdefault(profile, set())
        for plugin in seen - set(counts):
            self.unschedulable_pods.labels(plugin=plugin, profile=profile).set(0)
        for plugin, count in counts.items():
            self.unschedulable_pods.labels(plugin=plugin, profile=profile).set(count)
        seen.update(counts)

    def observe_plugin(self, plugin: str, extension_point: str, status: str, seconds: float) -> None:
        """``scheduler_plugin_execution_duration_seconds``: one plugin call in a sampled cycle."""
        self._child(self.plugin_execution_duration, plugin, extension_point, status).observe(seconds)

    def track_active(self, name: str, is_active: Callable[[], bool]) -> None:
        """``leader_election_master_status{name}``: read from ``is_active()`` at every scrape."""
        self.leader_election_master_status.labels(name=name).set_function(lambda: 1.0 if is_active() else 0.0)


#: The kube-scheduler release whose behaviour the operator reproduces (``cli.TARGET_KUBE_VERSION``).
KUBE_BEHAVIOUR_VERSION = "1.36.3"
#: Upstream's ``pluginMetricsSamplePercent``: plugin durations are recorded in this share of cycles.
PLUGIN_METRICS_SAMPLE_PERCENT = 10


def sample_plugin_metrics(rng: random.Random | None = None) -> bool:
    """Upstream's per-cycle coin: record plugin durations in this cycle? (``rand.Intn(100) < 10``)."""
    return (rng or random).randrange(100) < PLUGIN_METRICS_SAMPLE_PERCENT
