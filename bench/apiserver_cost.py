"""The API server's CPU per request of the kinds a scheduler sends for each pod, and per watch event.

``python -m bench.apiserver_cost [requests] [rounds]`` (defaults 3000 and 2) starts a light control plane of its
own (etcd + kube-apiserver v1.36.3), creates ``requests`` pods, and times the API server's and etcd's CPU (from
``/proc``) over ``requests`` calls of each kind, one connection, one call at a time:

* the nomination write of ``pods/status`` as a strategic-merge patch (what kube-scheduler and we send) and as a
  JSON merge patch, each with the answer in JSON and in protobuf, and as a PUT of the whole pod (as LISTed just
  before);
* the same merge patch with one JSON watcher, then one protobuf watcher, of all pods open (the encoding of each
  event for a watcher);
* a ``pods/binding`` POST and an ``events.k8s.io/v1`` Event POST (the other two writes of a bound pod), each with
  the answer in JSON and in protobuf.

Why: the gang benchmark is bound by the API server's CPU on two cores (docs/benchmarks.md, "Gangs and
Coscheduling on a quiet machine"); before changing how we write, this says what a change of patch type or
encoding would save. A measurement, not a test: it prints ms of CPU per request and writes
``bench/results/apiserver-cost.json``; the benchmark lock keeps other benchmarks off the machine meanwhile.
"""

from __future__ import annotations

import datetime
import http.client
import json
import os
import ssl
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._machine_lock import machine_to_ourselves
from tools.localcluster import LocalCluster, kube_version

RESULTS = Path(__file__).parent / "results" / "apiserver-cost.json"
TICKS = os.sysconf("SC_CLK_TCK")
JSON_TYPE = "application/json"
PROTOBUF = "application/vnd.kubernetes.protobuf"
#: What a client that cannot read protobuf errors would ask for: protobuf where the server has it, else JSON.
PROTOBUF_OR_JSON = f"{PROTOBUF}, application/json"
PROTOBUF_WATCH = "application/vnd.kubernetes.protobuf;stream=watch"
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
NAMESPACE = "bench"
#: Seconds for the API server to finish what a phase started (watch fan-out) before its CPU is read again.
SETTLE = 1.0


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class Connection:
    """One keep-alive HTTPS connection with the cluster's admin token."""

    def __init__(self, cluster: LocalCluster, timeout: float = 60.0) -> None:
        context = ssl.create_default_context(cafile=str(cluster.ca_file))
        self.http = http.client.HTTPSConnection("127.0.0.1", cluster.apiserver_port, context=context, timeout=timeout)
        self.headers = {"Authorization": f"Bearer {cluster.token}"}

    def call(
        self, method: str, path: str, body: object = None, *, kind: str = JSON_TYPE, accept: str = JSON_TYPE
    ) -> bytes:
        data = json.dumps(body).encode() if body is not None else None
        self.http.request(method, path, body=data, headers={**self.headers, "Content-Type": kind, "Accept": accept})
        answer = self.http.getresponse()
        payload = answer.read()
        if answer.status >= 300:
            raise RuntimeError(f"{method} {path}: {answer.status} {payload[:300]!r}")
        return payload


def _watch(cluster: LocalCluster, accept: str, stop: threading.Event, received: list[int]) -> None:
    """Read a watch of all pods until ``stop``; ``received[0]`` counts its bytes."""
    listed = json.loads(Connection(cluster).call("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?limit=1"))
    version = listed["metadata"]["resourceVersion"]
    connection = Connection(cluster, timeout=3600)
    connection.http.request(
        "GET", f"/api/v1/pods?watch=1&resourceVersion={version}", headers={**connection.headers, "Accept": accept}
    )
    answer = connection.http.getresponse()
    try:
        while not stop.is_set() and (chunk := answer.read1(65536)):
            received[0] += len(chunk)
    except (OSError, http.client.HTTPException):
        pass  # the control plane stopped under it


def _status_path(pod: str) -> str:
    return f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}/status"


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {
            "schedulerName": "nobody",
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "100m"}}}
            ],
        },
    }


def _event(pod: str, index: int) -> dict[str, Any]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{pod}.{index}"},
        "eventTime": now,
        "reportingController": "bench",
        "reportingInstance": "bench-1",
        "action": "Binding",
        "reason": "Scheduled",
        "type": "Normal",
        "note": f"Successfully assigned {NAMESPACE}/{pod} to node-1",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": NAMESPACE, "name": pod},
    }


class Probe:
    def __init__(self, cluster: LocalCluster, requests: int) -> None:
        self.cluster = cluster
        self.requests = requests
        self.connection = Connection(cluster)
        self.apiserver = cluster.components["kube-apiserver"].pid
        self.etcd = cluster.components["etcd"].pid
        self.rounds = 0
        self.rows: list[dict[str, Any]] = []

    def create_pods(self, prefix: str) -> list[str]:
        names = [f"{prefix}{index}" for index in range(self.requests)]
        for name in names:
            self.connection.call("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", _pod(name))
        return names

    def measure(self, label: str, send: Callable[[int], None], watch: str | None = None) -> None:
        stop, received = threading.Event(), [0]
        if watch:
            threading.Thread(target=_watch, args=(self.cluster, watch, stop, received), daemon=True).start()
            time.sleep(SETTLE)
        api, etcd, started = cpu_seconds(self.apiserver), cpu_seconds(self.etcd), time.monotonic()
        for index in range(self.requests):
            send(index)
        time.sleep(SETTLE)
        row = {
            "label": label,
            "apiserver_ms": round(1000 * (cpu_seconds(self.apiserver) - api) / self.requests, 3),
            "etcd_ms": round(1000 * (cpu_seconds(self.etcd) - etcd) / self.requests, 3),
            "seconds": round(time.monotonic() - started - SETTLE, 1),
            "watch_bytes_per_event": round(received[0] / self.requests),
        }
        stop.set()
        self.rows.append(row)
        print(
            f"{label:52s} apiserver {row['apiserver_ms']:6.3f} ms  etcd {row['etcd_ms']:6.3f} ms  "
            f"{row['seconds']:5.1f} s  watch {row['watch_bytes_per_event']} B/event",
            flush=True,
        )

    def _next_node(self) -> str:
        """A nominated node name new to this phase, so that every write of the phase changes the pod."""
        self.rounds += 1
        return f"node-{self.rounds}"

    def nominations(self, pods: list[str], kind: str, accept: str) -> Callable[[int], None]:
        node = self._next_node()

        def send(index: int) -> None:
            path = _status_path(pods[index])
            self.connection.call("PATCH", path, {"status": {"nominatedNodeName": node}}, kind=kind, accept=accept)

        return send

    def one_round(self, pods: list[str], round_index: int) -> None:
        for kind, kind_name in ((STRATEGIC, "strategic merge"), (MERGE, "merge patch")):
            for accept, accept_name in ((JSON_TYPE, "JSON"), (PROTOBUF, "protobuf")):
                self.measure(f"nomination, {kind_name}, {accept_name} answer", self.nominations(pods, kind, accept))
        self.measure("nomination, PUT of the whole pod, JSON answer", self.replacements(pods))
        for watch, watch_name in ((JSON_TYPE, "JSON"), (PROTOBUF_WATCH, "protobuf")):
            label = f"nomination, strategic merge, + one {watch_name} watcher"
            self.measure(label, self.nominations(pods, STRATEGIC, JSON_TYPE), watch)
        for accept, accept_name in ((JSON_TYPE, "JSON"), (PROTOBUF_OR_JSON, "protobuf")):
            self.bound_pod_writes(self.create_pods(f"b{round_index}-{accept_name.lower()}-"), round_index, accept)

    def bound_pod_writes(self, fresh: list[str], round_index: int, accept: str) -> None:
        """A Binding of each of ``fresh``, then its Event, the answers asked for in ``accept``."""
        suffix = "" if accept == JSON_TYPE else ", protobuf answer"
        self.measure(f"binding POST{suffix}", lambda index: self._bind(fresh[index], accept))
        self.measure(
            f"Event POST (events.k8s.io/v1){suffix}", lambda index: self._record(fresh[index], round_index, accept)
        )

    def replacements(self, pods: list[str]) -> Callable[[int], None]:
        """The nomination as a PUT of ``pods/status`` with the whole pod as last read (a LIST before the phase,
        as a scheduler has each pod in its cache)."""
        node = self._next_node()
        listed = json.loads(self.connection.call("GET", f"/api/v1/namespaces/{NAMESPACE}/pods"))
        current = {item["metadata"]["name"]: item for item in listed["items"]}

        def send(index: int) -> None:
            pod = current[pods[index]]
            pod["status"]["nominatedNodeName"] = node
            self.connection.call("PUT", _status_path(pods[index]), pod)

        return send

    def _bind(self, pod: str, accept: str = JSON_TYPE) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod},
            "target": {"kind": "Node", "name": "node-1"},
        }
        self.connection.call("POST", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}/binding", body, accept=accept)

    def _record(self, pod: str, round_index: int, accept: str = JSON_TYPE) -> None:
        path = f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events"
        self.connection.call("POST", path, _event(pod, round_index), accept=accept)


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per label: the median of its rounds' CPU per request."""
    labels = dict.fromkeys(row["label"] for row in rows)
    return {
        label: {
            "apiserver_ms": statistics.median(r["apiserver_ms"] for r in rows if r["label"] == label),
            "etcd_ms": statistics.median(r["etcd_ms"] for r in rows if r["label"] == label),
        }
        for label in labels
    }


def main(argv: list[str]) -> None:
    requests = int(argv[0]) if argv else 3000
    rounds = int(argv[1]) if len(argv) > 1 else 2
    with machine_to_ourselves("bench.apiserver_cost"), LocalCluster("light") as cluster:
        probe = Probe(cluster, requests)
        probe.connection.call(
            "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        pods = probe.create_pods("p")
        started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        for round_index in range(rounds):
            probe.one_round(pods, round_index)
        load = os.getloadavg()
    data = {
        "started": started,
        "requests": requests,
        "rounds": rounds,
        "kube_apiserver": f"v{kube_version()}",
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(x, 2) for x in load],
        "median": summary(probe.rows),
        "rows": probe.rows,
    }
    RESULTS.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main(sys.argv[1:])
