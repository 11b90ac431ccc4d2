"""The same HTTP extender configured for both schedulers (issue 11: "Extenders: the same test extender
configured for both").

Upstream configures extenders once per kube-scheduler (``KubeSchedulerConfiguration.extenders``, for every
profile); ours are per SchedulerProfile (``spec.extenders``). So the extender comparison is a run of its own:
a harness whose only profile, :data:`EXTENDER_PROFILE`, is the default profile plus the extender; upstream
gets the extender at the top level of its configuration (:func:`upstream_config_extenders`) and the profile
without it.

The extender (:class:`ConformanceExtender`, a threaded HTTP server on 127.0.0.1) answers from the node names
alone, so both schedulers get the same answers for the same question, whatever order they ask in:

- ``filter``: refuses the nodes whose CRC-32 is divisible by 5, with one reason (FailedNodes), and the nodes
  whose CRC-32 leaves 1 modulo 17 as unresolvable (FailedAndUnresolvableNodes);
- ``prioritize``: scores each node CRC-32 mod 11 (0 to 10), weight 2;
- ``preempt``: keeps the candidates (with the victims it was sent, by UID) whose CRC-32 is not divisible by
  3, and none its filter refuses (a node refused after preemption would make the preemptor preempt again on
  its next attempt, which the harness follows on our side only).

``nodeCacheCapable`` is on: both send node names and victims' UIDs only.
"""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.conformance import page_sections

REFUSED_REASON = "the conformance extender refuses this node"
UNRESOLVABLE_REASON = "the conformance extender can never use this node"
EXTENDER_PROFILE_NAME = "extender-equivalent"


def _crc(name: str) -> int:
    return zlib.crc32(name.encode())


def answer(verb: str, body: Mapping[str, Any]) -> Any:
    """The extender's answer to one call (pure: the node names decide)."""
    if verb == "filter":
        names = list(body.get("NodeNames") or ())
        refused = {n: REFUSED_REASON for n in names if _crc(n) % 5 == 0}
        unresolvable = {n: UNRESOLVABLE_REASON for n in names if n not in refused and _crc(n) % 17 == 1}
        kept = [n for n in names if n not in refused and n not in unresolvable]
        return {"NodeNames": kept, "FailedNodes": refused, "FailedAndUnresolvableNodes": unresolvable, "Error": ""}
    if verb == "prioritize":
        return [{"Host": n, "Score": _crc(n) % 11} for n in body.get("NodeNames") or ()]
    if verb == "preempt":
        # A node its filter refuses is no use to the pod after preemption either: dropped (else the preemptor
        # would preempt again on its next attempt, which the harness does not follow on upstream's side).
        victims = body.get("NodeNameToMetaVictims") or {}
        return {"NodeNameToMetaVictims": {n: v for n, v in victims.items() if _kept_for_preemption(n)}}
    raise ValueError(f"unknown verb {verb}")


def _kept_for_preemption(name: str) -> bool:
    crc = _crc(name)
    return crc % 3 != 0 and crc % 5 != 0 and crc % 17 != 1


class ExtenderServer:
    """A threaded HTTP server on 127.0.0.1 speaking the extender protocol: POST ``<url>/<verb>`` with JSON, the
    answer from ``answer(verb, body)`` (an exception becomes a 500 with its text); it counts calls per verb.
    Shared by this harness and the e2e extender tests."""

    def __init__(self, answer: Callable[[str, dict[str, Any]], Any], path: str = "/scheduler") -> None:
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                verb = self.path.rsplit("/", 1)[-1]
                with server._lock:
                    server.calls[verb] = server.calls.get(verb, 0) + 1
                try:
                    payload = json.dumps(answer(verb, body)).encode()
                    self.send_response(200)
                except Exception as exc:  # a test bug shows up as a 500 in the schedulers' logs
                    payload = str(exc).encode()
                    self.send_response(500)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def start(self) -> ExtenderServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class ConformanceExtender(ExtenderServer):
    """The conformance extender's server; ``url`` is the urlPrefix both schedulers call."""

    def __init__(self) -> None:
        super().__init__(answer, path="/conformance")

    def config(self) -> dict[str, Any]:
        """The extender's configuration, in both schedulers' (identical) field names."""
        return {
            "urlPrefix": self.url,
            "filterVerb": "filter",
            "prioritizeVerb": "prioritize",
            "preemptVerb": "preempt",
            "weight": 2,
            "nodeCacheCapable": True,
            "httpTimeout": "5s",
        }


#: SchedulerProfile fields that are not KubeSchedulerConfiguration profile fields: extenders (upstream's top
#: level) and explain (ours only: what the operator keeps for ``kopf-scheduler explain``).
OURS_ONLY = ("extenders", "explain")


def split_extenders(spec: Mapping[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """A profile spec without our own fields (upstream's profile) and the extenders (upstream's top level)."""
    rest = {k: v for k, v in spec.items() if k not in OURS_ONLY}
    return rest, list(spec.get("extenders") or ())


# -- the report section ---------------------------------------------------------------------------------------
SECTION_START = "<!-- extender comparison: generated by python -m tests.conformance -->"
SECTION_END = "<!-- end of extender comparison -->"


def section(data: Mapping[str, Any], calls: Mapping[str, int]) -> str:
    """The Markdown section of one extender run (``data``: report.summary of its scenarios)."""
    run = data.get("run") or {}
    lines = [
        SECTION_START,
        "## HTTP extenders",
        "",
        "The same extender configured for both (issue 11): upstream gets it at the top of its",
        "KubeSchedulerConfiguration (upstream configures extenders per scheduler), ours in the compared",
        f"SchedulerProfile's `spec.extenders`; the profile is otherwise the default one (`{EXTENDER_PROFILE_NAME}`).",
        "The extender (`tests/conformance/extender_harness.py`) answers from node names alone: `filter` refuses",
        "some nodes (with a reason, some as unresolvable), `prioritize` scores every node 0-10 (weight 2), `preempt`",
        "drops some candidates; `nodeCacheCapable` is on. Compared per pod as above (verdict, texts, node among",
        "upstream's top nodes, nomination and victims).",
        "",
        f"- scenarios: {data.get('scenarios')}, pods: {data.get('pods')}, agree: **{data.get('agree')}**, "
        f"disagree: {data.get('disagree')} ({data.get('known')} known)",
        f"- extender calls (both schedulers): {', '.join(f'{v} {k}' for k, v in sorted(calls.items())) or 'none'}",
        f"- run: `{run.get('command', '')}`, {run.get('seconds', '?')} s, seeds {run.get('seeds', '?')}"
        f"{' (drawn fresh for this run)' if run.get('seeds_fresh') else ''}, started {run.get('date', '?')}, "
        f"commit {run.get('commit', '?')}",
    ]
    for item in data.get("disagreements") or ():
        lines.append(f"- disagreement: seed {item['seed']} {item['pod']}: {item['problems']}")
    lines.append(SECTION_END)
    return "\n".join(lines)


def put_section(text: str, path: Any) -> None:
    """Replace the page's extender section with ``text``, or append it."""
    page_sections.put_section(text, path, SECTION_START, SECTION_END)


def current_section(path: Any) -> str | None:
    """The extender section as the page has it now (markers included), or None."""
    return page_sections.current_section(path, SECTION_START, SECTION_END)
