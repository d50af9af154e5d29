"""Kubernetes adapter: the few API calls the operator makes, and nothing that decides.

Invariants: every method is one API request (two for an upsert that finds the object) and
`writes` counts the mutating ones (invariant 6: a quiet cycle writes nothing); a write is sent
only while `may_write()` holds (the Lease); `KubeRefused` is a refusal no retry fixes (400, 403,
422); expected outcomes (exists, gone, uid changed) are return values. Retries (401, 429, 5xx) and
their bounds: docs/design.md, "Kubernetes adapter".
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable, Mapping
from urllib.parse import quote

import aiohttp
import kopf

from ironic_shard_operator.core.events import Event
from ironic_shard_operator.core.redact import redact
from ironic_shard_operator.core.spec import GROUP, KIND, PLURAL, VERSION

COMPONENT = "ironic-shard-operator"


class KubeError(Exception):
    """A Kubernetes API request failed: `status` is the HTTP status (0: no answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Kubernetes API {status}: {message}" if status else message)
        self.status = status


class KubeRefused(KubeError):
    """The API server refused the request itself: 400 BadRequest, 403 Forbidden (RBAC, an
    admission plugin such as ResourceQuota or Pod Security) or 422 Invalid. Sending it again
    changes nothing until the object, the permissions or the cluster's policy change.
    `api_message` is the API's own message, without the request line."""

    def __init__(self, status: int, request: str, api_message: str) -> None:
        super().__init__(status, f"{request}: {api_message}")
        self.api_message = api_message


REFUSED_STATUS = frozenset({400, 403, 422})


class NotLeader(KubeError):
    """A write was not sent: `may_write()` said this replica may not write now."""

    def __init__(self, method: str, path: str) -> None:
        super().__init__(0, f"{method} {path}: not sent, this replica may not write now "
                            f"(its Lease is not renewed within the renew deadline)")


def connection_info() -> kopf.ConnectionInfo:
    """In a pod the service account, else $KUBECONFIG / ~/.kube/config (as kopf logs in).

    Reads the files each time: call it again to pick up a rotated token."""
    settings = kopf.OperatorSettings()
    info = kopf.login_with_service_account(settings=settings) or kopf.login_with_kubeconfig(settings=settings)
    if info is None:
        raise KubeError(0, "no Kubernetes credentials: not in a pod, and no KUBECONFIG or ~/.kube/config")
    return info


RETRIED_STATUS = frozenset({429, 500, 502, 503, 504})


def _transport(info: kopf.ConnectionInfo) -> tuple[Any, ...]:
    """What the HTTP session is built from (TLS material), as opposed to per-request auth."""
    return (info.ca_path, info.ca_data, info.insecure, info.certificate_path, info.certificate_data,
            info.private_key_path, info.private_key_data)


def _retry_after(reply: aiohttp.ClientResponse) -> float | None:
    """The Retry-After header in seconds (the API server sends whole seconds), or None."""
    try:
        return max(0.0, float(reply.headers.get("Retry-After", "")))
    except ValueError:
        return None


class Kube:
    """One HTTP session to one API server. Use `async with Kube() as kube:`.

    `login` gives the credentials (read again after a 401); `retries` and `retry_budget`
    bound the retries of 429 and 5xx per call (see the module doc); `may_write` fences
    writes. `writes` counts the mutating requests sent.
    """

    def __init__(self, login: Callable[[], kopf.ConnectionInfo] = connection_info, *,
                 timeout: float = 30.0, retries: int = 3, retry_budget: float = 10.0,
                 backoff: float = 0.25, may_write: Callable[[], bool] | None = None) -> None:
        self._login = login
        self._info = login()
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._session_transport: tuple[Any, ...] | None = None
        self._retired: list[aiohttp.ClientSession] = []  # replaced while requests may be in flight
        self.retries, self.retry_budget, self.backoff = retries, retry_budget, backoff
        self.may_write = may_write
        self.writes = 0  # mutating requests sent (create, replace, patch, delete), each try
        self.logins = 1  # times the credentials were read

    async def __aenter__(self) -> "Kube":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for session in [*self._retired, self._session]:
            if session is not None:
                await session.close()
        self._session, self._retired = None, []

    def _open(self) -> aiohttp.ClientSession:
        info = self._info
        if self._session is not None and self._session_transport != _transport(info):
            self._retired.append(self._session)  # new TLS material; in-flight requests finish
            self._session = None
        if self._session is None:
            ssl: Any = False if info.insecure else info.as_ssl_context()
            self._session = aiohttp.ClientSession(
                timeout=self._timeout, connector=aiohttp.TCPConnector(ssl=ssl, limit=8))
            self._session_transport = _transport(info)
        return self._session

    def _relogin(self, rejected: Mapping[str, str]) -> bool:
        """Read the credentials again; True when they differ from the `rejected` ones."""
        self._info = self._login()
        self.logins += 1
        return self._info.as_http_headers() != dict(rejected)

    async def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                      body: Any = None, content_type: str = "application/json", text: bool = False) -> Any:
        """One API call; returns the decoded JSON answer (`text`: the answer as text, e.g. a
        pod's log), raises KubeError on >= 400.

        Retries as the module doc says: once after a 401 with new credentials, and 429/5xx
        within `retries` and `retry_budget`. A fenced write raises NotLeader unsent."""
        data = None if body is None else json.dumps(body)
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + self.retry_budget
        relogged = False
        retries = 0
        while True:
            if method != "GET":
                if self.may_write is not None and not self.may_write():
                    raise NotLeader(method, path)
                self.writes += 1
            auth = self._info.as_http_headers()
            status, message, answer, wait = await self._send(method, path, params, data, content_type, auth, text)
            if status < 400:
                return answer
            if status == 401 and not relogged:
                relogged = True
                if self._relogin(auth):
                    continue
            elif status in RETRIED_STATUS and retries < self.retries:
                delay = wait if wait is not None else self.backoff * 2 ** retries
                if loop.time() + delay <= give_up_at:
                    retries += 1
                    await asyncio.sleep(delay)
                    continue
            if status in REFUSED_STATUS:
                raise KubeRefused(status, f"{method} {path}", message)
            raise KubeError(status, f"{method} {path}: {message}")

    async def _send(self, method: str, path: str, params: Mapping[str, str] | None, data: str | None,
                    content_type: str, auth: Mapping[str, str],
                    as_text: bool = False) -> tuple[int, str, Any, float | None]:
        """One HTTP request: (status, the API's message, the decoded answer, Retry-After)."""
        url = self._info.server.rstrip("/") + path
        headers = dict(auth, **({"Content-Type": content_type} if data is not None else {}))
        try:
            async with self._open().request(method, url, params=params, data=data, headers=headers) as reply:
                text = await reply.text()
                if reply.status < 400:
                    return reply.status, "", text if as_text else json.loads(text) if text else None, None
                try:
                    message = json.loads(text).get("message") or text
                except (ValueError, AttributeError):
                    message = text
                return reply.status, message, None, _retry_after(reply)
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            raise KubeError(0, f"{method} {path}: {type(error).__name__}: {error}") from error

    # --- the IronicComputeShard resource -------------------------------------------------

    def _pool_path(self, namespace: str, name: str = "") -> str:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
        return f"{path}/{name}" if name else path

    async def get_pool(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._get_or_none(self._pool_path(namespace, name))

    async def patch_pool_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch `.status` through the status subresource (spec is left alone)."""
        await self.request("PATCH", self._pool_path(namespace, name) + "/status",
                           body={"status": status}, content_type="application/merge-patch+json")

    # --- pods and config maps ----------------------------------------------------------

    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        answer = await self.request("GET", f"/api/v1/namespaces/{namespace}/pods",
                                    params={"labelSelector": selector})
        return list(answer.get("items") or [])

    async def create_pod(self, namespace: str, pod: Mapping[str, Any]) -> bool:
        """Create the pod; False when a pod of that name exists (the API refused a twin)."""
        try:
            await self.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod)
            return True
        except KubeError as error:
            if error.status == 409:
                return False
            raise

    async def delete_pod(self, namespace: str, name: str, *, uid: str, force: bool = False,
                         grace_seconds: int | None = None) -> bool:
        """Delete the pod only if it is still the object `uid`; `force`: grace period 0, else
        `grace_seconds` when given (it overrides the pod's own terminationGracePeriodSeconds, as
        kubectl's --grace-period does).

        False when it is already gone or is another object by now (a replacement).
        """
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions",
                                   "preconditions": {"uid": uid}}
        if force:
            options["gracePeriodSeconds"] = 0
        elif grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        try:
            await self.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body=options)
            return True
        except KubeError as error:
            if error.status in (404, 409):
                return False
            raise

    async def list_configmaps(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        answer = await self.request("GET", f"/api/v1/namespaces/{namespace}/configmaps",
                                    params={"labelSelector": selector})
        return list(answer.get("items") or [])

    async def put_configmap(self, namespace: str, configmap: Mapping[str, Any]) -> None:
        """Create the ConfigMap, or replace the data of the one of that name."""
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        try:
            await self.request("POST", path, body=configmap)
        except KubeError as error:
            if error.status != 409:
                raise
            name = configmap["metadata"]["name"]
            await self.request("PATCH", f"{path}/{name}", content_type="application/merge-patch+json",
                               body={"metadata": {"labels": configmap["metadata"]["labels"]},
                                     "data": configmap["data"]})

    async def delete_configmap(self, namespace: str, name: str) -> None:
        try:
            await self.request("DELETE", f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        except KubeError as error:
            if error.status != 404:
                raise

    # --- the pool's PodDisruptionBudget (policy/v1) ------------------------------------------

    def _budget_path(self, namespace: str, name: str = "") -> str:
        path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
        return f"{path}/{name}" if name else path

    async def get_budget(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._get_or_none(self._budget_path(namespace, name))

    async def create_budget(self, namespace: str, budget: Mapping[str, Any]) -> bool:
        """Create the PodDisruptionBudget; False when one of that name exists already."""
        try:
            await self.request("POST", self._budget_path(namespace), body=budget)
            return True
        except KubeError as error:
            if error.status == 409:
                return False
            raise

    async def patch_budget(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """Merge-patch the PodDisruptionBudget (its spec: policy/v1 lets it change)."""
        await self.request("PATCH", self._budget_path(namespace, name), body=patch,
                           content_type="application/merge-patch+json")

    # --- handover Jobs (batch/v1) and their pods' logs --------------------------------------

    async def list_jobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        answer = await self.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs",
                                    params={"labelSelector": selector})
        return list(answer.get("items") or [])

    async def create_job(self, namespace: str, job: Mapping[str, Any]) -> bool:
        """Create the Job; False when a Job of that name exists (the same batch, or the last
        one of that name still being deleted)."""
        try:
            await self.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body=job)
            return True
        except KubeError as error:
            if error.status == 409:
                return False
            raise

    async def delete_job(self, namespace: str, name: str) -> bool:
        """Delete the Job and, in the background, its pods; False when it was gone already."""
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        try:
            await self.request("DELETE", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}", body=options)
            return True
        except KubeError as error:
            if error.status == 404:
                return False
            raise

    async def job_log_tail(self, namespace: str, job: str, lines: int = 20) -> str:
        """The last `lines` lines of the log of the Job's newest pod ("" when it has none)."""
        pods = await self.list_pods(namespace, f"batch.kubernetes.io/job-name={job}") \
            or await self.list_pods(namespace, f"job-name={job}")
        if not pods:
            return ""
        newest = max(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
        name = newest["metadata"]["name"]
        try:
            return await self.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}/log",
                                      params={"tailLines": str(lines)}, text=True) or ""
        except KubeError as error:
            if error.status in (400, 404):  # no container started, or the pod went meanwhile
                return ""
            raise

    # --- reads for decisions ------------------------------------------------------------

    async def get_node(self, name: str) -> dict[str, Any] | None:
        return await self._get_or_none(f"/api/v1/nodes/{quote(name)}")

    async def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._get_or_none(f"/api/v1/namespaces/{namespace}/secrets/{quote(name)}")

    async def _get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            return await self.request("GET", path)
        except KubeError as error:
            if error.status == 404:
                return None
            raise

    # --- events -------------------------------------------------------------------------

    async def post_event(self, pool: Mapping[str, Any], event: Event, now: str) -> None:
        """Post a core/v1 Event about the pool CR `pool` (its body, for name/uid); its message
        redacted (core/redact.py: no URL userinfo or `password=...` leaves in an Event)."""
        meta = pool.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": meta.get("name"),
                "namespace": namespace, "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": event.reason,
            "message": redact(event.message)[:1024],
            "type": event.type,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        await self.request("POST", f"/api/v1/namespaces/{namespace}/events", body=body)

    # --- leases (leader election) -------------------------------------------------------

    def _lease_path(self, namespace: str, name: str = "") -> str:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        return f"{path}/{name}" if name else path

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._get_or_none(self._lease_path(namespace, name))

    async def create_lease(self, namespace: str, lease: Mapping[str, Any]) -> dict[str, Any] | None:
        """Create the Lease; None when another replica created it first."""
        try:
            return await self.request("POST", self._lease_path(namespace), body=lease)
        except KubeError as error:
            if error.status == 409:
                return None
            raise

    async def replace_lease(self, namespace: str, lease: Mapping[str, Any]) -> dict[str, Any] | None:
        """Replace the Lease if its resourceVersion is still current; None when it is not."""
        try:
            return await self.request("PUT", self._lease_path(namespace, lease["metadata"]["name"]), body=lease)
        except KubeError as error:
            if error.status == 409:
                return None
            raise
