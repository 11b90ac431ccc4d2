"""Peak RSS of pods kept as compact JSON: orjson's own results against :func:`json_codec.dumps`' copies.

``python -m bench.json_memory [pods]`` (default 50000) runs each way in a fresh interpreter: decode LIST pages of
500 API-shaped pods, drop ``managedFields`` and keep each pod's compact JSON, as the event handlers keep a pending
pod (``PodInfo.compact``). Prints the kept JSON's size and the process's peak RSS. The numbers behind the copy in
``json_codec.dumps`` (docs/benchmarks.md); a measurement, not a test.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from typing import Any

PAGE = 500


def api_pod(index: int) -> dict[str, Any]:
    """A pending pod as the API server returns it (scheduler_perf's pod-default, with managedFields)."""
    fields = {"f:spec": {"f:containers": {'k:{"name":"pause"}': {".": {}, "f:image": {}, "f:resources": {}}}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{index:06d}",
            "namespace": "bench",
            "uid": f"00000000-0000-4000-8000-{index:012d}",
            "resourceVersion": str(100000 + index),
            "creationTimestamp": "2026-11-26T11:28:00Z",
            "labels": {"app": "bench"},
            "managedFields": [{"manager": "bench", "operation": "Update", "fieldsV1": fields}],
        },
        "spec": {
            "containers": [
                {
                    "name": "pause",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "schedulerName": "kopf",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}],
            "priority": 0,
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def keep(way: str, pods: int) -> None:
    import orjson

    from kopf_scheduler import json_codec

    dumps = orjson.dumps if way == "orjson" else json_codec.dumps
    kept: list[bytes] = []
    for start in range(0, pods, PAGE):
        page = orjson.dumps({"items": [api_pod(i) for i in range(start, min(start + PAGE, pods))]})
        for item in json_codec.loads(page)["items"]:
            item["metadata"].pop("managedFields", None)
            kept.append(dumps(item))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kept_mib = round(sum(map(len, kept)) / 2**20, 1)
    print(json.dumps({"way": way, "pods": pods, "kept_mib": kept_mib, "peak_rss_mib": round(peak)}))


def main() -> None:
    pods = int(sys.argv[1]) if len(sys.argv) > 1 else 50000
    if len(sys.argv) > 2:
        keep(sys.argv[2], pods)
        return
    for way in ("orjson", "json_codec"):
        subprocess.run([sys.executable, "-m", "bench.json_memory", str(pods), way], check=True)


if __name__ == "__main__":
    main()
