"""kopf wiring: which Kubernetes events run which pool's cycle. Nothing here decides.

- One kopf daemon per IronicComputeShard runs that pool's loop (reconcile.py). kopf
  starts it when the CR appears or the operator resumes, and stops it when the CR is
  deleted: create, resume and delete are the daemon's start and stop. One loop per pool
  is what keeps one cycle per pool at a time.
- Every trigger only wakes that loop: a CR event whose generation moved (an update of
  the spec; status writes do not count), and any event of a pod labelled with a pool.
  The loop also runs every `spec.ironic.pollIntervalSeconds` on its own.
- An index of all pools (kopf fills it before any daemon starts) tells each cycle which
  other pools exist, so the later of two overlapping pools refuses to write (Conflict).
- Deleting the CR: kopf stops the daemon and removes its finalizer; Kubernetes garbage-
  collects the pods and ConfigMaps (owner references). Ironic shards are left as they
  are: the nodes keep their owner for whoever manages them next.

Handlers that touch the operator's state are coroutines: kopf runs them on the event loop
(plain functions would run in a worker thread, where waking a pool's loop is not safe).

kopf's own event posting is switched off (the operator posts its Events itself, only for
actions and transitions), so a quiet cycle writes nothing.
"""

from __future__ import annotations

from typing import Any

import kopf

from ironic_shard_operator.core.podspec import POOL_LABEL
from ironic_shard_operator.controller.reconcile import Operator
from ironic_shard_operator.core.claims import PoolClaim
from ironic_shard_operator.core.model import Selector
from ironic_shard_operator.core.spec import GROUP, PLURAL, VERSION

FINALIZER = f"{GROUP}/operator"


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.posting.enabled = False
    settings.persistence.finalizer = FINALIZER
    if getattr(memo, "operator", None) is None:
        raise kopf.PermanentError("handlers need memo.operator (start through runner.main)")


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    await memo.operator.kube.close()


@kopf.index(GROUP, VERSION, PLURAL)
def pool_claims(namespace: str, name: str, meta: Any, spec: Any, **_: Any) -> dict[str, PoolClaim]:
    selector = spec.get("selector") or {}
    return {"pools": PoolClaim(
        key=f"{namespace}/{name}",
        created=meta.get("creationTimestamp") or "",
        selector=Selector(selector.get("conductorGroup"), selector.get("resourceClass")),
    )}


@kopf.on.event(GROUP, VERSION, PLURAL)
async def pool_changed(type: str | None, namespace: str, name: str, meta: Any, memo: kopf.Memo,
                 **_: Any) -> None:
    operator: Operator = memo.operator
    key = f"{namespace}/{name}"
    if type == "DELETED":
        operator.forget(key)
        return
    runtime = operator.runtime(key)
    if runtime.generation != meta.get("generation"):
        operator.wake(key)


@kopf.on.event("", "v1", "pods", labels={POOL_LABEL: kopf.PRESENT})
async def pod_changed(namespace: str, labels: Any, memo: kopf.Memo, **_: Any) -> None:
    memo.operator.wake(f"{namespace}/{labels[POOL_LABEL]}")


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=30.0)
async def pool_loop(body: kopf.Body, stopped: kopf.DaemonStopped, memo: kopf.Memo,
                    pool_claims: kopf.Index[str, PoolClaim], **_: Any) -> None:
    operator: Operator = memo.operator
    await operator.run_pool(
        body, stopped,
        claims=lambda: [
            PoolClaim(c.key, c.created, c.selector, operator.runtime(c.key).cloud)
            for c in pool_claims.get("pools", [])
        ])
