"""An object's status conditions read as Kubernetes' own helpers read them: a condition holds
only when its status is exactly "True" (False, Unknown and a missing condition do not). The
one reading of pod and node readiness in the test bed (API server, controllers, kubelets)."""
from __future__ import annotations

from typing import Any


def condition_true(obj: dict[str, Any], kind: str) -> bool:
    """The object's condition `kind` has status "True"."""
    return any(c.get('type') == kind and c.get('status') == 'True'
               for c in (obj.get('status') or {}).get('conditions') or ())


def pod_ready(pod: dict[str, Any]) -> bool:
    """podutil.IsPodReady: the pod's Ready condition is True (a pod being deleted may still be)."""
    return condition_true(pod, 'Ready')


def node_ready(node: dict[str, Any]) -> bool:
    """nodeutil.IsNodeReady: the node's Ready condition is True (False and Unknown are not)."""
    return condition_true(node, 'Ready')
