"""DefaultBinder (reference §2.19): a Binding through the Handle's client; any failure is an Error status."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kopf_scheduler.framework import APIError, Code
from kopf_scheduler.plugins.default_binder import ERR_NO_CLIENT, DefaultBinder
from tests.unit.factories import FakeHandle, make_pod, new_state, pod_info


class RecordingClient:
    def __init__(self, error: BaseException | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.error = error

    async def bind(self, *, namespace: str, name: str, uid: str, node_name: str) -> None:
        self.calls.append({"namespace": namespace, "name": name, "uid": uid, "node_name": node_name})
        if self.error is not None:
            raise self.error


def binder(client: RecordingClient | None) -> DefaultBinder:
    handle = FakeHandle()
    handle.client = client  # type: ignore[assignment]
    return DefaultBinder(handle=handle)


def test_binds_with_pod_identity_and_target_node() -> None:
    client = RecordingClient()
    pod = pod_info(make_pod("web-0", namespace="shop", uid="uid-123"))
    status = asyncio.run(binder(client).bind(new_state(), pod, "node-7"))
    assert status.is_success
    assert client.calls == [{"namespace": "shop", "name": "web-0", "uid": "uid-123", "node_name": "node-7"}]


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(APIError(409, 'pods "web-0" is already assigned to node "node-1"'), id="conflict"),
        pytest.param(APIError(404, 'pods "web-0" not found'), id="gone"),
        pytest.param(ConnectionResetError("connection reset by peer"), id="transport"),
    ],
)
def test_api_failure_is_an_error_status(error: BaseException) -> None:
    status = asyncio.run(binder(RecordingClient(error)).bind(new_state(), pod_info(make_pod("web-0")), "node-7"))
    assert status.code is Code.ERROR
    assert status.reasons == (str(error),)
    assert status.error is error
    assert status.plugin == "DefaultBinder"


def test_no_client_is_an_error_status() -> None:
    status = asyncio.run(binder(None).bind(new_state(), pod_info(make_pod()), "node-7"))
    assert status.code is Code.ERROR
    assert status.reasons == (ERR_NO_CLIENT,)


def test_registers_no_events() -> None:
    # It never rejects a pod, so no cluster event needs to requeue one.
    assert DefaultBinder(handle=FakeHandle()).events_to_register() == []
