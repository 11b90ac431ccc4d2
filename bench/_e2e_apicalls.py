"""What a scheduler asks of the API server during a run: the server's own request counters, before and after.

Both schedulers and the API server share the machine's CPUs, so the requests a scheduler makes per pod cost
throughput even when its own CPU time is small. kube-apiserver counts every request it serves in
``apiserver_request_total`` (labels ``verb``, ``resource``, ``subresource``, ``code``, ...); the difference of
two scrapes around a run is what that run asked for (the bench's own watch and creations happen outside the
window: pods are created before the scheduler starts, and the harness's watch is one long request).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Awaitable, Callable

#: One sample line of the counter: its labels and value.
_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')

#: The verbs that change something; reads (GET, LIST, WATCH) are counted apart.
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"})


def parse_request_counts(metrics_text: str) -> Counter[str]:
    """``"VERB resource[/subresource]"`` → requests served so far, summed over codes and scopes."""
    counts: Counter[str] = Counter()
    for line in metrics_text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        counts[f"{labels.get('verb', '?')} {resource}"] += int(float(match["value"]))
    return counts


def requests_between(before: Counter[str], after: Counter[str]) -> dict[str, int]:
    """The requests served between two scrapes, most frequent first (zero differences left out)."""
    diff = {key: after[key] - before.get(key, 0) for key in after}
    return dict(sorted(((k, v) for k, v in diff.items() if v > 0), key=lambda kv: (-kv[1], kv[0])))


def writes_per_pod(requests: dict[str, int], pods: int) -> float:
    """Writes (every verb but GET, LIST and WATCH) per scheduled pod; leases (peering, leader election) included."""
    writes = sum(n for key, n in requests.items() if key.split(" ", 1)[0] in WRITE_VERBS)
    return round(writes / pods, 2) if pods else 0.0


async def scrape(get_text: Callable[[str], Awaitable[str]]) -> Counter[str]:
    """The API server's request counters now, read through ``get_text`` (a GET of a path returning text)."""
    return parse_request_counts(await get_text("/metrics"))
