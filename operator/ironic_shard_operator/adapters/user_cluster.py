"""The user's cluster, for the commands a person runs (`kubectl ics`, `preflight --pool`), through
the official `kubernetes` Python client. Talks, decides nothing.

The client reads the user's kubeconfig as kubectl does (KUBECONFIG, a list of files included,
`--kubeconfig`, `--context`, exec credential plugins, the context's namespace) and never writes
it back. Objects come from the API server itself, typed where the client has a model (Events,
Pods, Jobs, Leases, Secrets: its strict parsing refuses an answer a real server would not
give), and are handed on as the API's own JSON shape (camelCase keys). Lists are filtered by
the server (label and field selectors), never by this side. The operator itself never uses this
module: its own client is adapters/kube.py (asyncio, in the operator's process).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ironic_shard_operator.core.lease import LEASE_NAME
from ironic_shard_operator.core.spec import GROUP, KIND, PLURAL, VERSION

RESOURCE = f"{PLURAL}.{GROUP}"
REQUEST_TIMEOUT_SECONDS = 30.0


class ClusterError(Exception):
    """A request failed; the message is the API server's own (or why nothing answered)."""


class NotFound(ClusterError):
    """The object does not exist."""


class Conflict(ClusterError):
    """The object changed since it was read (a write with its resourceVersion was refused)."""


@dataclass
class UserCluster:
    """The cluster of the user's kubeconfig (`kubeconfig`: a file, else $KUBECONFIG or
    ~/.kube/config; `context`: else the current one) and the namespace commands act in
    (`namespace`: else the context's, else "default")."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace_flag: str | None = None
    _client: Any = field(default=None, init=False, repr=False)

    # --- connection -------------------------------------------------------------------

    @property
    def api(self) -> Any:
        """The ApiClient, loaded from the kubeconfig once (ClusterError when it cannot be)."""
        if self._client is None:
            from kubernetes import config
            from kubernetes.config.config_exception import ConfigException

            try:
                self._client = config.new_client_from_config(config_file=self.kubeconfig, context=self.context,
                                                             persist_config=False)
            except (ConfigException, OSError, ValueError) as error:
                raise ClusterError(f"cannot use the kubeconfig: {error}") from None
        return self._client

    @property
    def namespace(self) -> str:
        """-n, else the context's namespace, else 'default' (kubectl's rule)."""
        if self.namespace_flag:
            return self.namespace_flag
        from kubernetes import config
        from kubernetes.config.config_exception import ConfigException

        try:
            contexts, current = config.list_kube_config_contexts(self.kubeconfig)
        except (ConfigException, OSError, ValueError):
            return "default"
        chosen = next((c for c in contexts if c.get("name") == self.context), current) if self.context else current
        return ((chosen or {}).get("context") or {}).get("namespace") or "default"

    def _call(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        """One API call; its ApiException or transport failure as a ClusterError naming `what`."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return call(*args, _request_timeout=REQUEST_TIMEOUT_SECONDS, **kwargs)
        except ApiException as error:
            message = _api_message(error)
            kind = NotFound if error.status == 404 else Conflict if error.status == 409 else ClusterError
            raise kind(message or f"{what}: HTTP {error.status} {error.reason or ''}".strip()) from None
        except HTTPError as error:
            host = getattr(self.api.configuration, "host", "the API server")
            raise ClusterError(f"{what}: cannot reach {host}: {error}") from None

    def _plain(self, model: Any) -> Any:
        """A typed answer back in the API's JSON shape (camelCase keys, RFC 3339 times)."""
        return self.api.sanitize_for_serialization(model)

    # --- pools ------------------------------------------------------------------------

    def _custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api)

    def get_pool(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self._call(f"get {RESOURCE}/{name}", self._custom().get_namespaced_custom_object,
                          GROUP, VERSION, namespace or self.namespace, PLURAL, name)

    def list_pools(self, *, all_namespaces: bool = False) -> list[dict[str, Any]]:
        if all_namespaces:
            answer = self._call(f"list {RESOURCE}", self._custom().list_cluster_custom_object, GROUP, VERSION, PLURAL)
        else:
            answer = self._call(f"list {RESOURCE}", self._custom().list_namespaced_custom_object,
                                GROUP, VERSION, self.namespace, PLURAL)
        return list(answer.get("items") or [])

    def patch_pool(self, name: str, patch: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """A JSON merge patch of the pool (a `metadata.resourceVersion` in it makes the write
        conditional: Conflict when the pool changed since); the pool as the server returns it."""
        return self._call(f"patch {RESOURCE}/{name}", self._custom().patch_namespaced_custom_object,
                          GROUP, VERSION, namespace or self.namespace, PLURAL, name, dict(patch))

    # --- what the pools refer to and make -----------------------------------------------

    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api)

    def secret_text(self, name: str, key: str, namespace: str | None = None) -> str | None:
        """The decoded value of `key` in Secret `name` (None: no such key)."""
        secret = self._call(f"get secret {name}", self._core().read_namespaced_secret, name,
                            namespace or self.namespace)
        value = (secret.data or {}).get(key)
        return None if value is None else base64.b64decode(value).decode("utf-8", errors="replace")

    def secret_keys(self, name: str, namespace: str | None = None) -> list[str] | None:
        """The keys of Secret `name` (None: no such Secret); its values are not kept."""
        try:
            secret = self._call(f"get secret {name}", self._core().read_namespaced_secret, name,
                                namespace or self.namespace)
        except NotFound:
            return None
        return sorted(secret.data or {})

    def events_of(self, kind: str, name: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """The Events about object `kind`/`name`, selected by the API server."""
        answer = self._call(f"list events of {kind} {name}", self._core().list_namespaced_event,
                            namespace or self.namespace,
                            field_selector=f"involvedObject.kind={kind},involvedObject.name={name}")
        return [self._plain(item) for item in answer.items or ()]

    def pods(self, selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
        answer = self._call("list pods", self._core().list_namespaced_pod, namespace or self.namespace,
                            label_selector=selector)
        return [self._plain(item) for item in answer.items or ()]

    def jobs(self, selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
        from kubernetes import client

        answer = self._call("list jobs", client.BatchV1Api(self.api).list_namespaced_job,
                            namespace or self.namespace, label_selector=selector)
        return [self._plain(item) for item in answer.items or ()]

    def pod_log(self, name: str, namespace: str | None = None, *, container: str | None = None,
                tail_lines: int = 200) -> str:
        """The last `tail_lines` lines of a pod's container log."""
        extra = {"container": container} if container else {}
        return self._call(f"get log of pod {name}", self._core().read_namespaced_pod_log, name,
                          namespace or self.namespace, tail_lines=tail_lines, **extra) or ""

    # --- the operator -----------------------------------------------------------------

    def operator_leases(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """The operator's leader Lease (`ironic-shard-operator`): in `namespace`, else looked
        for in every namespace (the API server selects it by name)."""
        from kubernetes import client

        api = client.CoordinationV1Api(self.api)
        if namespace:
            try:
                return [self._plain(self._call(f"get lease {LEASE_NAME}", api.read_namespaced_lease,
                                               LEASE_NAME, namespace))]
            except NotFound:
                return []
        answer = self._call(f"list leases named {LEASE_NAME}", api.list_lease_for_all_namespaces,
                            field_selector=f"metadata.name={LEASE_NAME}")
        return [self._plain(item) for item in answer.items or ()]


def _api_message(error: Any) -> str:
    """The Status message of an API error's body, on one line."""
    try:
        body = json.loads(error.body or "")
    except (TypeError, ValueError):
        return ""
    return " ".join(str(body.get("message") or "").split()) if isinstance(body, dict) else ""


__all__ = ["KIND", "RESOURCE", "ClusterError", "Conflict", "NotFound", "UserCluster"]
