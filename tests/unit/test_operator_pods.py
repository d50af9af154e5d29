"""The environment the operator pods' node agent (testbed/operator_pods.py) gives a container,
resolved as a kubelet resolves it, and the one thing it cannot do: move a port that nothing in
the environment names."""

from __future__ import annotations

import pytest

from testbed.operator_pods import IMAGE_ENV, CannotRun, container_env

POD = {"metadata": {"name": "op-7d4b9c6f5-x1", "namespace": "iso-system", "uid": "u-1",
                    "labels": {"app": "op"}},
       "spec": {"nodeName": "node-iso-system-0", "serviceAccountName": "op"}}


def env_of(*env: dict, ports: dict[int, int] | None = None, keys: dict | None = None) -> dict[str, str]:
    spec = {"name": "operator", "env": list(env)}
    return container_env(POD, spec, ports or {}, lambda source: (keys or {}).get(
        (source.get("secretKeyRef") or source.get("configMapKeyRef"))["key"]))


def test_values_field_refs_and_expansion_as_a_kubelet_resolves_them() -> None:
    env = env_of({"name": "EMPTY"},  # the real API server omits an empty value
                 {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                 {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                 {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                 {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                 {"name": "WHO", "value": "$(POD_NAME).$(POD_NAMESPACE) $$(POD_NAME) $(UNSET)"},
                 {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
                 {"name": "MAYBE", "valueFrom": {"secretKeyRef": {"name": "s", "key": "gone", "optional": True}}},
                 keys={"token": "t0ken"})
    assert env == dict(IMAGE_ENV, HOSTNAME="op-7d4b9c6f5-x1", EMPTY="", POD_NAME="op-7d4b9c6f5-x1",
                       POD_NAMESPACE="iso-system", APP="op", IP="127.0.0.1",
                       WHO="op-7d4b9c6f5-x1.iso-system $(POD_NAME) $(UNSET)", TOKEN="t0ken")


def test_ports_named_in_the_environment_are_remapped_and_one_that_is_not_cannot_run() -> None:
    env = env_of({"name": "METRICS_PORT", "value": "8080"}, {"name": "HEALTH_PORT", "value": "8081"},
                 ports={8080: 41000, 8081: 41001})
    assert (env["METRICS_PORT"], env["HEALTH_PORT"]) == ("41000", "41001")
    with pytest.raises(CannotRun, match=r"containerPort \[8081\] is named by no env value"):
        env_of({"name": "METRICS_PORT", "value": "8080"}, ports={8080: 41000, 8081: 41001})
