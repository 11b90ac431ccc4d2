"""The operator's own HTTP endpoints on the metrics port: ``/metrics`` and ``/explain/<namespace>/<pod>``.

Both are served by aiohttp on kopf's event loop, so ``/explain`` reads the explanations the scheduling cycle
wrote without a lock (prometheus_client's own server would answer from another thread). kopf's liveness
endpoint (``/healthz``) stays on its own port, served by kopf.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Explain = Callable[[str], dict[str, Any] | None]


def build_app(*, registry: CollectorRegistry, explain: Explain) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(registry))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    async def explanation(request: web.Request) -> web.Response:
        key = f"{request.match_info['namespace']}/{request.match_info['name']}"
        account = explain(key)
        if account is None:
            message = (
                f"no failed scheduling attempt recorded for pod {key}: it was never attempted by this replica, "
                "it is bound or deleted, or it is not pending any more (only the active replica schedules)"
            )
            return web.json_response({"pod": key, "message": message}, status=404)
        return web.json_response(account)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/explain/{namespace}/{name}", explanation)
    return app


async def serve(*, registry: CollectorRegistry, explain: Explain, port: int, address: str) -> web.AppRunner:
    """Start serving; returns the runner to ``cleanup()`` on shutdown."""
    runner = web.AppRunner(build_app(registry=registry, explain=explain), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, address, port).start()
    return runner
