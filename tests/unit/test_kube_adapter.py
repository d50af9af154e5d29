"""The Kubernetes adapter against a small HTTP server that answers like an API server would:
401 for a token it does not know, 429 with Retry-After, 5xx. The credentials come from a
kubeconfig file through the adapter's own login (kopf's kubeconfig reader), so a token
rewritten in that file is what a rotated service-account token is to the operator."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from ironic_shard_operator.adapters.kube import Kube, KubeError, NotLeader

LEASES = "/apis/coordination.k8s.io/v1/namespaces/ops/leases"


class ApiServer:
    """Answers GET/PUT of one Lease; `valid` are the bearer tokens it accepts, `script` are
    canned failures (status, headers) answered before the real answer, in order."""

    def __init__(self) -> None:
        self.valid: set[str] = set()
        self.script: list[tuple[int, dict[str, str]]] = []
        self.seen: list[tuple[str, str, float]] = []  # (method, token, monotonic time)
        self.bodies: list[Any] = []  # the JSON body of each request that had one
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        self.seen.append((request.method, token, time.monotonic()))
        if request.can_read_body:
            self.bodies.append(await request.json())
        if token not in self.valid:
            return web.json_response({"kind": "Status", "code": 401, "message": "Unauthorized"}, status=401)
        if self.script:
            status, headers = self.script.pop(0)
            return web.json_response({"kind": "Status", "code": status, "message": f"canned {status}"},
                                     status=status, headers=headers)
        return web.json_response({"kind": "Lease", "metadata": {"name": "l"}})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def write_kubeconfig(path: Path, server: str, token: str) -> None:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))


@pytest.fixture
async def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    server = ApiServer()
    await server.start()
    server.kubeconfig = tmp_path / "kubeconfig"  # type: ignore[attr-defined]
    write_kubeconfig(server.kubeconfig, server.url, "token-1")  # type: ignore[attr-defined]
    server.valid = {"token-1"}
    monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig))  # type: ignore[attr-defined]
    yield server
    await server.stop()


async def test_a_rotated_token_is_read_again_after_a_401_and_the_request_sent_once_more(api):
    async with Kube() as kube:
        assert await kube.request("GET", f"{LEASES}/l")
        # The token is rotated under the running client; the API server stops accepting the old one.
        write_kubeconfig(api.kubeconfig, api.url, "token-2")
        api.valid = {"token-2"}
        assert await kube.request("PUT", f"{LEASES}/l", body={"metadata": {"name": "l"}})
        assert [(m, t) for m, t, _ in api.seen] == [
            ("GET", "token-1"), ("PUT", "token-1"), ("PUT", "token-2")]
        assert await kube.request("GET", f"{LEASES}/l")  # and keeps the new one
        assert api.seen[-1][1] == "token-2"


async def test_a_401_with_unchanged_credentials_is_not_sent_again(api):
    api.valid = set()  # e.g. the token was revoked and nothing renewed it
    async with Kube() as kube:
        with pytest.raises(KubeError) as failed:
            await kube.request("GET", f"{LEASES}/l")
    assert failed.value.status == 401
    assert len(api.seen) == 1


async def test_429_waits_for_its_retry_after(api):
    api.script = [(429, {"Retry-After": "1"})]
    async with Kube() as kube:
        assert await kube.request("GET", f"{LEASES}/l")
    assert len(api.seen) == 2
    assert api.seen[1][2] - api.seen[0][2] >= 1.0


async def test_a_retry_after_beyond_the_budget_is_not_waited_for(api):
    api.script = [(429, {"Retry-After": "60"})]
    async with Kube(retry_budget=5.0) as kube:
        started = time.monotonic()
        with pytest.raises(KubeError) as failed:
            await kube.request("GET", f"{LEASES}/l")
    assert failed.value.status == 429
    assert time.monotonic() - started < 2.0
    assert len(api.seen) == 1


async def test_5xx_is_retried_with_backoff(api):
    api.script = [(503, {}), (500, {})]
    async with Kube(backoff=0.1) as kube:
        assert await kube.request("PUT", f"{LEASES}/l", body={})
        assert kube.writes == 3
    gaps = [b[2] - a[2] for a, b in zip(api.seen, api.seen[1:])]
    assert gaps[0] >= 0.1 and gaps[1] >= 0.2  # doubling


async def test_5xx_retries_are_bounded_in_count_and_time(api):
    api.script = [(503, {})] * 100
    async with Kube(retries=3, backoff=0.05) as kube:
        with pytest.raises(KubeError) as failed:
            await kube.request("GET", f"{LEASES}/l")
    assert failed.value.status == 503 and len(api.seen) == 4
    api.seen.clear()
    async with Kube(retries=100, backoff=0.2, retry_budget=1.0) as kube:
        started = time.monotonic()
        with pytest.raises(KubeError):
            await kube.request("GET", f"{LEASES}/l")
    assert time.monotonic() - started < 1.5
    assert 2 <= len(api.seen) <= 4  # waits 0.2 + 0.4, then 0.8 would pass the budget


async def test_a_fenced_write_is_not_sent_and_reads_go_on(api):
    allowed = [True]
    async with Kube(may_write=lambda: allowed[0]) as kube:
        assert await kube.request("PUT", f"{LEASES}/l", body={})
        allowed[0] = False
        with pytest.raises(NotLeader):
            await kube.request("PUT", f"{LEASES}/l", body={})
        assert await kube.request("GET", f"{LEASES}/l")
        assert kube.writes == 1
    assert [m for m, _, _ in api.seen] == ["PUT", "GET"]


async def test_the_fence_is_asked_again_before_a_retried_write(api):
    api.script = [(503, {})]
    answers = iter([True, False])
    async with Kube(backoff=0.05, may_write=lambda: next(answers)) as kube:
        with pytest.raises(NotLeader):
            await kube.request("PUT", f"{LEASES}/l", body={})
    assert len(api.seen) == 1


async def test_a_member_pod_is_deleted_with_the_pools_grace_whatever_the_pod_was_made_with(api):
    """A pod made before spec.terminationGracePeriodSeconds existed (or changed) has another grace:
    the delete request carries the pool's, which overrides the pod's (as kubectl's --grace-period)."""
    async with Kube() as kube:
        assert await kube.delete_pod("ops", "rack-0", uid="u-1", grace_seconds=200)
        assert await kube.delete_pod("ops", "rack-1", uid="u-2", force=True, grace_seconds=200)
    graceful, forced = api.bodies[-2:]
    assert graceful["gracePeriodSeconds"] == 200 and graceful["preconditions"] == {"uid": "u-1"}
    assert forced["gracePeriodSeconds"] == 0
