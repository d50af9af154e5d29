"""The IronicComputeShard CRD, checked offline the way the API server checks a CR.

No API server runs here, so this module emulates what admission does with a CR that the
CRD decides, in the API server's order:

1. Defaulting: schema `default`s are filled in before validation, so CEL rules can rely
   on defaulted fields (`apply_defaults`).
2. Structural validation: the openAPIV3Schema (OpenAPI 3.0 flavoured) is converted to a
   JSON Schema draft 4 document and checked with `jsonschema` (`as_json_schema`):
   `x-kubernetes-int-or-string` becomes integer-or-string, `nullable` admits null,
   `x-kubernetes-preserve-unknown-fields` leaves an object open.
3. Unknown fields: the API server never stores a field the schema does not list. By
   default it prunes it silently; under strict field validation, which kubectl asks for
   by default (`--validate=strict`), it REJECTS the request. We emulate strict mode: every
   object schema that lists properties, and neither preserves unknown fields nor declares
   additionalProperties, gets `additionalProperties: false`. `metadata` is checked by the
   API server's own ObjectMeta rules and stays open here.
4. List types: `x-kubernetes-list-type: map` refuses two items with the same key, `set` the same item twice.
5. CEL: every `x-kubernetes-validations` rule is evaluated for real with cel-python
   (`celpy`), `self` and `oldSelf` bound as the API server binds them. A rule using
   `oldSelf` (a transition rule) runs only on an update where the old value exists. The
   API server skips CEL when type errors block it; we skip it after any schema error,
   which can only hide a message, never admit an object.

Not emulated: CEL cost budgets (a real API server refuses a CRD whose rules may cost too
much), `format` checks, ObjectMeta validation. A real API server stays the final judge;
these tests catch what can be caught without one.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator

import celpy
import jsonschema
import kubernetes_validate
import pytest
import yaml

from ironic_shard_operator.core import autoscale, model, nova_policy
from ironic_shard_operator.core.spec import JOB_GRACE_SECONDS, MAX_GRACE_SECONDS, MEMBER_GRACE_SECONDS
from ironic_shard_operator.core.status import CycleFacts, build_status
from ironic_shard_operator.core.tracker_interval import IntervalSettings
from tests.support.manifest_edits import delete_at, set_at

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "crds"
CRD_FILE = CRD_DIR / "ironicshards.io_ironiccomputeshards.yaml"
EXAMPLES = ROOT / "examples"
KUBERNETES_VERSION = "1.30"  # the oldest we validate core objects against


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses duplicate keys (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.load_all(path.read_text(), Loader=_UniqueKeyLoader) if d]


def example_pool(name: str) -> dict[str, Any]:
    """The IronicComputeShard document of examples/<name>.yaml (a fresh copy)."""
    pools = [d for d in load_documents(EXAMPLES / f"{name}.yaml") if d["kind"] == "IronicComputeShard"]
    assert len(pools) == 1, f"examples/{name}.yaml should hold exactly one IronicComputeShard"
    return pools[0]


@functools.cache
def crd() -> dict[str, Any]:
    (document,) = load_documents(CRD_FILE)
    return document


def version() -> dict[str, Any]:
    (only,) = crd()["spec"]["versions"]
    return only


def schema() -> dict[str, Any]:
    return version()["schema"]["openAPIV3Schema"]


# --- the emulated admission (see the module docstring) ---------------------------------


def apply_defaults(value: Any, node: dict[str, Any]) -> None:
    """Fill in absent properties that have a default, top-down (defaults' own children too)."""
    if isinstance(value, dict):
        for key, child in node.get("properties", {}).items():
            if key not in value and "default" in child:
                value[key] = copy.deepcopy(child["default"])
        for key, item in value.items():
            child = _child_schema(node, key)
            if child is not None:
                apply_defaults(item, child)
    elif isinstance(value, list) and "items" in node:
        for item in value:
            apply_defaults(item, node["items"])


def as_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema (draft 4) equivalent of one OpenAPI schema node, strict on unknowns."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in ("nullable", "default", "description"):
            continue
        if key == "properties":
            out[key] = {name: as_json_schema(child) for name, child in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = as_json_schema(value)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [as_json_schema(child) for child in value]
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    strict = (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    )
    if strict:
        out["additionalProperties"] = False
    return out


def _child_schema(node: dict[str, Any], key: str) -> dict[str, Any] | None:
    if key in node.get("properties", {}):
        return node["properties"][key]
    extra = node.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def present_values(value: Any, old: Any, node: dict[str, Any], path: str
                   ) -> Iterator[tuple[str, Any, Any, dict[str, Any]]]:
    """(path, value, old value or None, schema) for every value present, parents first.

    Old values are correlated as the API server does for transition rules: object fields
    by name, items of a `map` list by their keys; other list items have no old value.
    """
    yield path, value, old, node
    if isinstance(value, dict):
        for key, item in value.items():
            child = _child_schema(node, key)
            if child is not None:
                old_item = old.get(key) if isinstance(old, dict) else None
                yield from present_values(item, old_item, child, f"{path}.{key}" if path else key)
    elif isinstance(value, list) and "items" in node:
        keys = node.get("x-kubernetes-list-map-keys")
        old_by_key = {}
        if keys and isinstance(old, list):
            old_by_key = {_map_key(item, keys): item for item in old if isinstance(item, dict)}
        for index, item in enumerate(value):
            old_item = old_by_key.get(_map_key(item, keys)) if keys and isinstance(item, dict) else None
            yield from present_values(item, old_item, node["items"], f"{path}[{index}]")


def _map_key(item: dict[str, Any], keys: list[str]) -> tuple:
    return tuple(item.get(k) for k in keys)


def list_map_errors(obj: dict[str, Any]) -> list[str]:
    errors = []
    for path, value, _, node in present_values(obj, None, schema(), ""):
        keys = node.get("x-kubernetes-list-map-keys")
        if node.get("x-kubernetes-list-type") == "map" and isinstance(value, list):
            seen = [_map_key(item, keys) for item in value]
            errors += [f"{path or '<root>'}: duplicate entries for key {key}"
                       for key in sorted({k for k in seen if seen.count(k) > 1})]
        if node.get("x-kubernetes-list-type") == "set" and isinstance(value, list):
            errors += [f"{path or '<root>'}: duplicate value {item!r}"
                       for item in sorted({i for i in value if value.count(i) > 1})]
    return errors


_CEL = celpy.Environment()


def _substring(text: celpy.celtypes.StringType, start: celpy.celtypes.IntType,
               end: celpy.celtypes.IntType | None = None) -> celpy.celtypes.StringType:
    """Kubernetes' CEL strings extension (ext.Strings): `s.substring(start[, end])`."""
    if not 0 <= start <= (len(text) if end is None else end) <= len(text):
        raise ValueError(f"substring({start}, {end}) out of range for a string of {len(text)}")
    return celpy.celtypes.StringType(text[start:end])


# The functions of Kubernetes' CEL environment that the CRD's rules use beyond CEL's own.
KUBERNETES_CEL_FUNCTIONS = {"substring": _substring}


@functools.cache
def cel_program(rule: str) -> celpy.Runner:
    return _CEL.program(_CEL.compile(rule), functions=KUBERNETES_CEL_FUNCTIONS)


def cel_errors(obj: dict[str, Any], old: dict[str, Any] | None) -> list[str]:
    errors = []
    for path, value, old_value, node in present_values(obj, old, schema(), ""):
        for rule in node.get("x-kubernetes-validations", []):
            if "oldSelf" in rule["rule"] and old_value is None:
                continue  # a transition rule: only on update, with an old value
            activation = {"self": celpy.json_to_cel(value)}
            if old_value is not None:
                activation["oldSelf"] = celpy.json_to_cel(old_value)
            try:
                result = cel_program(rule["rule"]).evaluate(activation)
            except celpy.CELEvalError as error:
                result = error
            if not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
                failed = "" if isinstance(result, celpy.celtypes.BoolType) else f" (error: {result!r})"
                errors.append(f"{path or '<root>'}: {rule.get('message') or rule['rule']}{failed}")
    return errors


@functools.cache
def strict_validator() -> jsonschema.Draft4Validator:
    json_schema = as_json_schema(schema())
    # metadata lists only name/generateName bounds; the rest of ObjectMeta is the API
    # server's own business, so other metadata keys (labels, ...) stay allowed.
    json_schema["properties"]["metadata"].pop("additionalProperties")
    return jsonschema.Draft4Validator(json_schema)


def defaulted(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of `obj` with the schema's defaults filled in, as the API server stores it."""
    obj = copy.deepcopy(obj)
    apply_defaults(obj, schema())
    return obj


def admit(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    """The reasons the API server would refuse `obj` (an update when `old` is given).

    An empty list means admitted. Defaults are applied to (copies of) both objects first.
    """
    obj = defaulted(obj)
    old = defaulted(old) if old is not None else None
    errors = [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
              for e in strict_validator().iter_errors(obj)]
    errors += list_map_errors(obj)
    if errors:
        return errors
    return cel_errors(obj, old)


def schema_fields(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, schema) of every field the schema declares: properties, list items, map values."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from schema_fields(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from schema_fields(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from schema_fields(node["additionalProperties"], f"{path}{{}}")


# --- the CRD itself ---------------------------------------------------------------------


def test_crd_is_a_valid_customresourcedefinition():
    """Checked against Kubernetes' own CRD schema, rejecting unknown keys (typos such as
    `x-kubernetes-validation` would otherwise be ignored by the API server)."""
    kubernetes_validate.validate(crd(), KUBERNETES_VERSION, strict=True)
    kubernetes_validate.validate(crd(), kubernetes_validate.utils.latest_version(), strict=True)


def test_crd_names_scale_subresource_and_printer_columns():
    """What `kubectl get ics`, `kubectl scale ics/NAME` and the chart depend on."""
    spec = crd()["spec"]
    assert crd()["metadata"]["name"] == "ironiccomputeshards.ironicshards.io"
    assert (spec["group"], spec["scope"]) == ("ironicshards.io", "Namespaced")
    assert spec["names"]["kind"] == "IronicComputeShard"
    assert spec["names"]["shortNames"] == ["ics"]
    assert (version()["name"], version()["served"], version()["storage"]) == ("v1alpha1", True, True)
    assert version()["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }
    columns = {c["name"]: c["jsonPath"] for c in version()["additionalPrinterColumns"]
               if c.get("priority", 0) == 0}
    assert columns == {
        "Desired": ".spec.replicas",
        "Ready Members": ".status.readyReplicas",
        "Ready": '.status.conditions[?(@.type=="Ready")].status',
        "Degraded": '.status.conditions[?(@.type=="Degraded")].status',
        "Nodes": ".status.nodes.total",
        "Pinned": ".status.nodes.pinned",
        "Pending": ".status.nodes.pendingMoves",
        "Age": ".metadata.creationTimestamp",
    }
    # every column points at a field the schema declares
    declared = {path for path, _ in schema_fields(schema(), "")}
    for column in version()["additionalPrinterColumns"]:
        path = re.sub(r"\[\?\(@\.type==\"\w+\"\)\]", "[]", column["jsonPath"])  # a condition's field
        assert path in declared | {".metadata.creationTimestamp"}, column


def test_every_field_has_a_description():
    """`kubectl explain ics.spec.failover.fencing` (or any other field) teaches something.

    `metadata` is the exception the API server imposes: it refuses a CRD whose metadata
    schema says anything but its type and bounds on name/generateName, a description
    included ("must not specify anything other than name and generateName").
    """
    missing = [path or "<root>" for path, node in schema_fields(schema(), "")
               if path != ".metadata" and len(node.get("description", "").strip()) < 8]
    assert missing == []
    metadata = schema()["properties"]["metadata"]
    assert set(metadata) == {"type", "properties"}
    assert set(metadata["properties"]) <= {"name", "generateName"}


def test_every_cel_rule_compiles_and_has_a_message():
    rules = [(path, rule) for path, node in schema_fields(schema(), "")
             for rule in node.get("x-kubernetes-validations", [])]
    assert len(rules) >= 8
    for path, rule in rules:
        cel_program(rule["rule"])
        assert rule.get("message"), f"{path}: a refused user deserves a message, not the rule"


def test_pool_name_rule_is_the_models_pattern():
    """The CRD refuses exactly the names the operator refuses (model.POOL_NAME)."""
    (rule,) = [r for r in schema()["x-kubernetes-validations"] if r["rule"].startswith("self.metadata.name")]
    assert f"'{model.POOL_NAME.pattern}'" in rule["rule"]


def test_defaults_match_the_model():
    """One set of defaults: the CRD's (applied by the API server) equal the model's."""
    pool = defaulted({"spec": {"autoscale": {}}})
    autoscale, failover = pool["spec"]["autoscale"], pool["spec"]["failover"]
    assert (autoscale["minReplicas"], autoscale["maxReplicas"], autoscale["maxNodesPerMember"],
            autoscale["scaleDownStabilizationSeconds"]) == (
        model.Autoscale().min_replicas, model.Autoscale().max_replicas,
        model.Autoscale().max_nodes_per_member, model.Autoscale().scale_down_stabilization_seconds)
    assert failover["rebalanceAfterSeconds"] == model.PoolSpec(name="x").rebalance_after_seconds
    interval = defaulted({"spec": {}})["spec"]["nova"]["updateResourcesInterval"]
    assert (interval["secondsPerNode"], interval["minSeconds"], interval.get("fixedSeconds")) == (
        IntervalSettings().seconds_per_node, IntervalSettings().min_seconds, IntervalSettings().fixed_seconds)
    graced = defaulted({"spec": {"handover": {}}})["spec"]
    assert (graced["terminationGracePeriodSeconds"], graced["handover"]["jobTerminationGracePeriodSeconds"]) == (
        MEMBER_GRACE_SECONDS, JOB_GRACE_SECONDS)


def test_termination_grace_bounds_are_the_readers():
    """The CRD's bounds of the two grace periods are core/spec.py's (what an older CRD lets
    through, the operator refuses with the same words)."""
    properties = schema()["properties"]["spec"]["properties"]
    for field in (properties["terminationGracePeriodSeconds"],
                  properties["handover"]["properties"]["jobTerminationGracePeriodSeconds"]):
        assert (field["type"], field["minimum"], field["maximum"]) == ("integer", 1, MAX_GRACE_SECONDS)


def test_minimal_pool_is_fully_spelled_out_by_defaults():
    """What `kubectl get ics rack-a -o yaml` shows for the minimal example."""
    spec = defaulted(example_pool("minimal"))["spec"]
    assert spec["novaConfig"]["secretRef"]["key"] == "nova.conf"
    assert spec["cloud"]["secretRef"]["key"] == "clouds.yaml"
    assert spec["cloud"]["cloudName"] == "ironic"
    assert spec["selector"] == {}
    assert spec["failover"] == {
        "rebalanceAfterSeconds": 120,
        "podPendingTimeoutSeconds": 300,
        "fencing": {"mode": "Wait"},
    }
    assert spec["ironic"] == {"pollIntervalSeconds": 30, "maxConcurrentWrites": 4, "writesPerSecond": 20,
                              "fullResyncSeconds": 600}
    assert spec["nova"] == {"repairMisplaced": False, "leakedAllocationSeconds": 600,
                            "updateResourcesInterval": {"secondsPerNode": 0.05, "minSeconds": 10}}
    assert spec["paused"] is False
    assert "autoscale" not in spec and "affinity" not in spec


# --- the examples -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["minimal", "full"])
def test_example_is_admitted(name):
    assert admit(example_pool(name)) == []


def test_full_example_uses_every_field():
    """examples/full.yaml is the reference: a new spec field must appear in it.

    `replicas` is the one exception: it excludes `autoscale`, which the example uses.
    """
    spec_schema = schema()["properties"]["spec"]
    declared = {path for path, _ in schema_fields(spec_schema, "spec") if not path.endswith("{}")}
    used = {re.sub(r"\[\d+\]", "[]", path)
            for path, _, _, _ in present_values(example_pool("full")["spec"], None, spec_schema, "spec")}
    assert declared - used == {"spec.replicas"}


def test_full_example_pod_settings_are_valid_core_objects():
    """affinity, the probes, the security contexts and the volumes pass through unchecked by the
    CRD; the example's must be what Kubernetes accepts in a Pod, so a copied example never fails
    at pod creation."""
    spec = example_pool("full")["spec"]
    container = {"name": "nova-compute", "image": spec["image"]}
    container.update({k: spec[k] for k in (
        "imagePullPolicy", "command", "args", "env", "resources", "readinessProbe", "livenessProbe",
        "securityContext", "volumeMounts")})
    pod_spec = {"containers": [container], "securityContext": spec["podSecurityContext"]}
    pod_spec.update({k: spec[k] for k in (
        "nodeSelector", "tolerations", "affinity", "priorityClassName", "serviceAccountName", "imagePullSecrets",
        "volumes", "topologySpreadConstraints")})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rack-b-0"}, "spec": pod_spec}
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


def test_example_support_objects_are_valid_and_match_what_the_pools_reference():
    """secrets.yaml and full.yaml's ServiceAccount / PriorityClass: valid core objects,
    holding the keys and the cloud the two example pools point at."""
    support = load_documents(EXAMPLES / "secrets.yaml") + [
        d for d in load_documents(EXAMPLES / "full.yaml") if d["kind"] != "IronicComputeShard"]
    for document in support:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    secrets = {d["metadata"]["name"]: d["stringData"] for d in support if d["kind"] == "Secret"}
    names = {(d["kind"], d["metadata"]["name"]) for d in support}
    for example in ("minimal", "full"):
        spec = defaulted(example_pool(example))["spec"]
        nova, cloud = spec["novaConfig"]["secretRef"], spec["cloud"]["secretRef"]
        assert "[DEFAULT]" in secrets[nova["name"]][nova["key"]]
        clouds = yaml.safe_load(secrets[cloud["name"]][cloud["key"]])
        assert spec["cloud"]["cloudName"] in clouds["clouds"]
        for kind, field in (("ServiceAccount", "serviceAccountName"), ("PriorityClass", "priorityClassName")):
            if field in spec:
                assert (kind, spec[field]) in names


# --- bad input is refused ---------------------------------------------------------------


def _minimal_with(change) -> dict[str, Any]:
    pool = example_pool("minimal")
    change(pool)
    return pool


_set, _delete = set_at, delete_at


def _both(*changes):
    def change(pool: dict[str, Any]) -> None:
        for one in changes:
            one(pool)
    return change


REFUSED = {
    "negative replicas": (_set("spec.replicas", -1), "-1 is less than the minimum of 0"),
    "replicas beyond the bound": (_set("spec.replicas", 1001), "greater than the maximum"),
    "replicas as a string": (_set("spec.replicas", "3"), "is not of type 'integer'"),
    "replicas and autoscale": (_set("spec.autoscale", {"maxReplicas": 5}), "mutually exclusive"),
    "neither replicas nor autoscale": (_delete("spec.replicas"), "set spec.replicas"),
    "unknown spec field": (_set("spec.replica", 3), "'replica' was unexpected"),
    "unknown nested field": (_set("spec.failover", {"fencing": {"forceAfter": 60}}),
                             "'forceAfter' was unexpected"),
    "unknown root field": (_set("specs", {}), "'specs' was unexpected"),
    "bad fencing mode": (_set("spec.failover", {"fencing": {"mode": "Yolo"}}), "is not one of"),
    "minReplicas above maxReplicas": (
        _both(_delete("spec.replicas"), _set("spec.autoscale", {"minReplicas": 6, "maxReplicas": 5})),
        "minReplicas must not exceed"),
    "minReplicas above the default maxReplicas": (
        _both(_delete("spec.replicas"), _set("spec.autoscale", {"minReplicas": 11})),
        "minReplicas must not exceed"),
    "forceAfterSeconds without ForceAfter": (
        _set("spec.failover", {"fencing": {"forceAfterSeconds": 60}}), "applies only to mode ForceAfter"),
    "ForceAfter without forceAfterSeconds": (
        _set("spec.failover", {"fencing": {"mode": "ForceAfter"}}), "required when mode is ForceAfter"),
    "name longer than 52": (_set("metadata.name", "r" * 53), "metadata.name must be at most 52"),  # the rule that says why (maxLength is 253)
    "name with a dot": (_set("metadata.name", "rack.a"), "metadata.name must be at most 52"),
    "name with a trailing dash": (_set("metadata.name", "rack-"), "metadata.name must be at most 52"),
    "missing image": (_delete("spec.image"), "'image' is a required property"),
    "image of only spaces": (_set("spec.image", "   "), "spec.image must be a container image reference"),
    "image with a space": (_set("spec.image", "quay.io/nova compute:1"), "no spaces or other whitespace"),
    "image with a trailing newline": (_set("spec.image", "quay.io/nova-compute:1\n"), "no spaces or other"),
    "missing nova.conf Secret name": (_set("spec.novaConfig", {"secretRef": {}}), "'name' is a required property"),
    "missing cloud": (_delete("spec.cloud"), "'cloud' is a required property"),
    "one Secret key for both files": (
        _set("spec.cloud", {"secretRef": {"name": "nova-config", "key": "nova.conf"}}), "same Secret key"),
    "poll interval too short": (_set("spec.ironic", {"pollIntervalSeconds": 1}), "less than the minimum of 5"),
    "too many concurrent writes": (_set("spec.ironic", {"maxConcurrentWrites": 65}), "greater than the maximum of 64"),
    "zero writes per second": (_set("spec.ironic", {"writesPerSecond": 0}), "less than or equal to the minimum"),
    "uppercase conductor group": (_set("spec.selector", {"conductorGroup": "Rack-A"}), "does not match"),
    "empty resource class": (_set("spec.selector", {"resourceClass": ""}), "should be non-empty"),
    "bad pull policy": (_set("spec.imagePullPolicy", "Sometimes"), "is not one of"),
    "bad quantity": (_set("spec.resources", {"limits": {"memory": "lots"}}), "does not match"),
    "duplicate env names": (_set("spec.env", [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]),
                            "duplicate entries for key ('A',)"),
    "env value and valueFrom": (
        _set("spec.env", [{"name": "A", "value": "1",
                           "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
        "value or valueFrom, not both"),
    "env valueFrom with two sources": (
        _set("spec.env", [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"},
                                                      "secretKeyRef": {"name": "s", "key": "k"}}}]),
        "exactly one of"),
    "paused as a string": (_set("spec.paused", "yes"), "is not of type 'boolean'"),
    "retiring another pool's member": (_set("spec.retireMembers", ["rack-b-1"]), "name members of this pool"),
    "retiring a member with a leading zero": (_set("spec.retireMembers", ["rack-a-01"]), "name members of this pool"),
    "fencing a name that is no member": (_set("spec.fencedMembers", ["rack-a"]), "name members of this pool"),
    "retiring one member twice": (_set("spec.retireMembers", ["rack-a-1", "rack-a-1"]), "duplicate"),
    "negative scale-down stabilization": (
        _both(_delete("spec.replicas"), _set("spec.autoscale", {"scaleDownStabilizationSeconds": -1})),
        "less than the minimum of 0"),
    "scale-down stabilization beyond an hour": (
        _both(_delete("spec.replicas"), _set("spec.autoscale", {"scaleDownStabilizationSeconds": 3601})),
        "greater than the maximum of 3600"),
    "a pull secret without a name": (_set("spec.imagePullSecrets", [{}]), "'name' is a required property"),
    "one pull secret twice": (_set("spec.imagePullSecrets", [{"name": "r"}, {"name": "r"}]), "duplicate"),
    "a volume named as the operator's": (
        _set("spec.volumes", [{"name": "nova-conf", "emptyDir": {}}]), "are the operator's own volumes"),
    "a volume name that is no DNS label": (_set("spec.volumes", [{"name": "CA_bundle", "emptyDir": {}}]),
                                           "does not match"),
    "a mount of no volume": (
        _both(_set("spec.volumes", [{"name": "ca", "emptyDir": {}}]),
              _set("spec.volumeMounts", [{"name": "cas", "mountPath": "/etc/ca"}])),
        "names a volume that spec.volumes does not have"),
    "a mount without volumes": (_set("spec.volumeMounts", [{"name": "ca", "mountPath": "/etc/ca"}]),
                                "names a volume that spec.volumes does not have"),
    "a mount over the operator's nova.conf": (
        _both(_set("spec.volumes", [{"name": "ca", "emptyDir": {}}]),
              _set("spec.volumeMounts", [{"name": "ca", "mountPath": "/etc/nova/nova.conf"}])),
        "are the files the operator mounts itself"),
    "two mounts at one path": (
        _both(_set("spec.volumes", [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}]),
              _set("spec.volumeMounts", [{"name": "a", "mountPath": "/x"}, {"name": "b", "mountPath": "/x"}])),
        "mount two volumes at one mountPath"),
    "a relative mount path": (
        _both(_set("spec.volumes", [{"name": "ca", "emptyDir": {}}]),
              _set("spec.volumeMounts", [{"name": "ca", "mountPath": "etc/ca"}])), "does not match"),
    "a spread without its key": (
        _set("spec.topologySpreadConstraints", [{"maxSkew": 1, "whenUnsatisfiable": "ScheduleAnyway"}]),
        "'topologyKey' is a required property"),
    "a spread of skew 0": (
        _set("spec.topologySpreadConstraints", [{"maxSkew": 0, "topologyKey": "zone",
                                                 "whenUnsatisfiable": "ScheduleAnyway"}]),
        "less than the minimum of 1"),
    "a tracker cost per node of 0": (_set("spec.nova.updateResourcesInterval", {"secondsPerNode": 0}),
                                      "less than the minimum of 0.001"),
    "a tracker cost per node beyond 10 s": (_set("spec.nova.updateResourcesInterval", {"secondsPerNode": 11}),
                                            "greater than the maximum of 10"),
    "a tracker floor of 0": (_set("spec.nova.updateResourcesInterval", {"minSeconds": 0}), "less than the minimum of 1"),
    "a fractional tracker floor": (_set("spec.nova.updateResourcesInterval", {"minSeconds": 1.5}), "is not of type"),
    "a fixed tracker interval beyond a day": (_set("spec.nova.updateResourcesInterval", {"fixedSeconds": 86401}),
                                              "greater than the maximum of 86400"),
    "a member grace of 0 (SIGKILL at once)": (_set("spec.terminationGracePeriodSeconds", 0),
                                              "less than the minimum of 1"),
    "a member grace beyond an hour": (_set("spec.terminationGracePeriodSeconds", 3601),
                                      "greater than the maximum of 3600"),
    "a fractional member grace": (_set("spec.terminationGracePeriodSeconds", 1.5), "is not of type"),
    "a Job grace of 0": (_set("spec.handover", {"novaManageConfig": {"secretRef": {"name": "nm"}},
                                                "jobTerminationGracePeriodSeconds": 0}), "less than the minimum of 1"),
    "a spread that is unsatisfiable otherwise": (
        _set("spec.topologySpreadConstraints", [{"maxSkew": 1, "topologyKey": "zone",
                                                 "whenUnsatisfiable": "Sometimes"}]), "is not one of"),
}


@pytest.mark.parametrize("change, reason", REFUSED.values(), ids=REFUSED.keys())
def test_bad_pool_is_refused(change, reason):
    errors = admit(_minimal_with(change))
    assert errors, "admitted"
    assert any(reason in error for error in errors), errors


def test_unknown_fields_inside_passthrough_core_types_are_left_to_kubernetes():
    """affinity and probes are core/v1 types passed through; the pod's API checks them."""
    pool = _minimal_with(_set("spec.affinity", {"nodeAffinity": {"anything": True}}))
    assert admit(pool) == []


# --- updates: transition rules ----------------------------------------------------------


def test_selector_is_immutable():
    old = _minimal_with(_set("spec.selector", {"conductorGroup": "rack-a"}))
    for new_selector in ({"conductorGroup": "rack-b"},
                         {"conductorGroup": "rack-a", "resourceClass": "gold"},
                         {}):
        new = _minimal_with(_set("spec.selector", new_selector))
        errors = admit(new, old)
        assert any("spec.selector is immutable" in e and "new pool" in e for e in errors), errors
    # dropping the field is a change too: it defaults to {} (every node)
    errors = admit(_minimal_with(lambda pool: None), old)
    assert any("spec.selector is immutable" in e for e in errors), errors
    # the same selector with any other change is fine
    assert admit(_minimal_with(_both(_set("spec.selector", {"conductorGroup": "rack-a"}),
                                     _set("spec.replicas", 5))), old) == []


def test_selector_is_free_on_create():
    assert admit(_minimal_with(_set("spec.selector", {"conductorGroup": "rack-b"}))) == []


def test_kubectl_scale_is_refused_while_autoscale_decides():
    """`kubectl scale` writes spec.replicas through the scale subresource."""
    old = _minimal_with(_both(_delete("spec.replicas"), _set("spec.autoscale", {})))
    scaled = _minimal_with(_set("spec.autoscale", {}))  # replicas: 3 plus autoscale
    assert any("mutually exclusive" in e for e in admit(scaled, old))
    assert admit(_minimal_with(_set("spec.replicas", 7)), example_pool("minimal")) == []


# --- status -----------------------------------------------------------------------------


def _status() -> dict[str, Any]:
    return {
        "observedGeneration": 3, "replicas": 2, "readyReplicas": 2, "desiredReplicas": 2,
        "selector": "ironicshards.io/pool=rack-a",
        "members": [
            {"name": "rack-a-0", "phase": "Ready", "ready": True, "nodes": 300, "pinnedNodes": 90,
             "since": "2025-01-01T00:00:00Z", "podUID": "0b6c0b0e-6a4e-4a8f-9a3c-6f3b8d2a1c11"},
            {"name": "rack-a-1", "phase": "Ready", "ready": True, "nodes": 300, "pinnedNodes": 60,
             "since": "2025-01-01T00:00:00Z"},
        ],
        "ring": {"members": ["rack-a-0", "rack-a-1"], "generation": 4, "digest": "9f2c1e"},
        "nodes": {"total": 600, "free": 450, "pinned": 150, "unassigned": 0, "pendingMoves": 0,
                  "misplaced": 0},
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "AllMembersReady", "message": "2/2 ready",
             "lastTransitionTime": "2025-01-01T00:00:00Z", "observedGeneration": 3},
        ],
        "kopf": {"progress": {}},  # kopf's bookkeeping: kept, not an API
    }


def test_status_as_the_operator_writes_it_is_admitted():
    assert admit({**example_pool("minimal"), "status": _status()}) == []


@pytest.mark.parametrize("change, reason", [
    (lambda s: s["conditions"][0].update(status="Maybe"), "is not one of"),
    (lambda s: s["conditions"].append(dict(s["conditions"][0])), "duplicate entries for key ('Ready',)"),
    (lambda s: s["conditions"][0].pop("reason"), "'reason' is a required property"),
    (lambda s: s["members"].append(dict(s["members"][0])), "duplicate entries for key ('rack-a-0',)"),
    (lambda s: s["nodes"].update(total=-1), "less than the minimum of 0"),
], ids=["condition status", "duplicate condition", "condition without reason",
        "duplicate member", "negative count"])
def test_bad_status_is_refused(change, reason):
    status = _status()
    change(status)
    errors = admit({**example_pool("minimal"), "status": status})
    assert any(reason in e for e in errors), errors


def _nova_section() -> dict[str, Any]:
    """status.nova as the operator builds it: an audit with findings and a retired host."""
    report = nova_policy.AuditReport(
        findings=(nova_policy.Finding(nova_policy.DUPLICATE, "n-1", "node n-1 is listed under 2 computes"),
                  nova_policy.Finding(nova_policy.UNMAPPED, "rack-a-1", "member rack-a-1 ...")),
        waiting={"rack-a-2": "Nova refused to delete its service: host has instances"})
    return nova_policy.status_section(nova_policy.ENABLED, nova_policy.summary(report.findings), report, ["rack-a-1"],
                                      ["rack-a-2"])


@pytest.mark.parametrize("section", [
    _nova_section(),
    nova_policy.status_section(nova_policy.ENABLED, "Nova answers", None, ["rack-a-1"]),
    nova_policy.status_section(nova_policy.DISABLED, "cloud 'ironic' has no compute endpoint"),
    nova_policy.status_section(nova_policy.UNAVAILABLE, "Nova is not answering", None, ()),
], ids=["enabled with findings", "enabled before the first audit", "disabled", "unavailable"])
def test_status_nova_as_the_operator_writes_it_is_admitted(section):
    declared = schema()["properties"]["status"]["properties"]["nova"]["properties"]
    assert set(section) == set(declared)
    assert set(declared["findings"]["properties"]) == set(nova_policy.FINDING_KINDS)
    assert set(declared["state"]["enum"]) == {nova_policy.ENABLED, nova_policy.DISABLED, nova_policy.UNAVAILABLE}
    assert admit({**example_pool("minimal"), "status": {**_status(), "nova": section}}) == []


@pytest.mark.parametrize("change, reason", [
    (lambda n: n.update(state="Enabeld"), "is not one of"),
    (lambda n: n["findings"].update(duplicate=-1), "less than the minimum of 0"),
    (lambda n: n["findings"].update(orphaned=1), "Additional properties are not allowed"),
    (lambda n: n.update(forcedDown="rack-a-1"), "is not of type 'array'"),
    (lambda n: n.update(retired="rack-a-2"), "is not of type 'array'"),
    (lambda n: n.update(retired=[f"rack-a-{i}" for i in range(nova_policy.RETIRED_LIMIT + 1)]), "is too long"),
], ids=["unknown state", "negative count", "unknown finding kind", "forcedDown not a list", "retired not a list",
        "retired beyond its bound"])
def test_bad_status_nova_is_refused(change, reason):
    section = _nova_section()
    change(section)
    errors = admit({**example_pool("minimal"), "status": {**_status(), "nova": section}})
    assert any(reason in e for e in errors), errors


def _written_status(plan: model.Plan) -> dict[str, Any]:
    """The status build_status writes for a pool of two Ready members with `plan`."""
    members = (model.Member("rack-a-0", True, 1.7e9), model.Member("rack-a-1", True, 1.7e9))
    status, _ = build_status(CycleFacts(
        generation=1, members=members, plan=plan, pods_existing=2, pods_ready=2,
        selector="ironicshards.io/pool=rack-a", now=1.8e9), None)
    return status


def _converged_plan(**kw: Any) -> model.Plan:
    values = dict(desired_replicas=2, ring_members=("rack-a-0", "rack-a-1"), moves=(), members_to_create=(),
                  members_to_delete=(), scale_down_blocked={},
                  loads=(model.MemberLoad("rack-a-0", 300, 2, True), model.MemberLoad("rack-a-1", 300, 1, True)),
                  counts=model.NodeCounts(total=600, free=597, pinned=3))
    return model.Plan(**{**values, **kw})


def _autoscaled_plan(nodes: int = 600) -> model.Plan:
    earlier = autoscale.decide(model.Autoscale(1, 10, 300), 1200, model.AutoscaleHistory(), 1.8e9 - 60)
    decision = autoscale.decide(model.Autoscale(1, 10, 300), nodes, earlier.history, 1.8e9)
    return _converged_plan(desired_replicas=decision.desired, autoscale=decision)


@pytest.mark.parametrize("plan", [_converged_plan(), _autoscaled_plan(1200), _autoscaled_plan(600)],
                         ids=["replicas", "autoscale", "autoscale held by the stabilization"])
def test_status_as_build_status_writes_it_is_admitted_and_every_field_declared(plan):
    """status keeps unknown fields (for kopf), so an undeclared field would pass unnoticed."""
    status = _written_status(plan)
    assert admit({**example_pool("minimal"), "status": status}) == []
    assert set(status) <= set(schema()["properties"]["status"]["properties"])


def _undeclared(value: Any, node: dict[str, Any], path: str) -> Iterator[str]:
    """Paths in `value` the schema `node` does not declare below a preserve-unknown-fields
    level: what a real API server prunes, silently, from what the operator writes."""
    if isinstance(value, dict):
        if node.get("x-kubernetes-preserve-unknown-fields") and not node.get("properties"):
            return
        for key, child in value.items():
            declared = node.get("properties", {}).get(key) or node.get("additionalProperties")
            if not isinstance(declared, dict):
                yield f"{path}.{key}"
            else:
                yield from _undeclared(child, declared, f"{path}.{key}")
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for item in value:
            yield from _undeclared(item, node["items"], f"{path}[]")


def test_no_field_of_a_status_with_members_handovers_and_guard_holds_is_pruned():
    """Every field of a busy pool's status (a member held by a handover, with its reason; a
    source waiting for a busy node; nodes the guard holds; a host-mapping Job failed) is
    declared in the CRD, down to the leaves: an undeclared nested field would be pruned by the
    API server and never seen."""
    from ironic_shard_operator.core import handover
    from ironic_shard_operator.core.guard_holds import guard_section
    from ironic_shard_operator.core.pods import MemberState
    from ironic_shard_operator.core.shard_write import GuardHold
    from ironic_shard_operator.core.host_mapping import (
        MAPPED, MAPPING_FAILED, NOT_MAPPED, MappingStep, MemberMapping,
    )
    from ironic_shard_operator.core.status import handover_section, host_mapping_section

    members = (model.Member("rack-a-0", True, 1.7e9, kubernetes_node="k-0"),
               model.Member("rack-a-1", False, 1.7e9, counted_out="its Kubernetes node k-1 was deleted",
                            kubernetes_node="k-1"))
    step = handover.HandoverStep(progress=(handover.SourceProgress(
        "rack-a-1", handover.SCALE_DOWN, handover.MOVING_FREE, nodes=3, waiting=3, message="busy", held=False,
        busy=(handover.BusyNode("n-1", "deploying -> active", 1.7e9),)),),
        problems=(handover.Problem(handover.SCALE_DOWN, "HandoverWaitingForBusyNodes", "n-1"),))
    guard, _ = guard_section({}, [GuardHold("n-2", ("consumer-1",))], {"n-2"}, 1.8e9, 600)
    mapping = host_mapping_section(MappingStep(entries=(
        MemberMapping("rack-a-0", "id-0", MAPPED, "Nova lists nodes under rack-a-0"),
        MemberMapping("rack-a-1", "id-1", NOT_MAPPED, "Job rack-a-map-hosts-1 failed", MAPPING_FAILED,
                      "rack-a-map-hosts-1", 2, 1.8e9))))
    status, _ = build_status(CycleFacts(
        generation=1, members=members, plan=_converged_plan(), pods_existing=1, pods_ready=1,
        selector="ironicshards.io/pool=rack-a", now=1.8e9, handover=handover_section(step), handover_enabled=True,
        guard=guard, states=(MemberState("rack-a-0", "Ready"),
                             MemberState("rack-a-1", "HandingOver", "no pod while held: its Job runs")),
        host_mapping=mapping, intervals={"rack-a-0": 10.0, "rack-a-1": 15.0}), None)
    assert status["members"][1]["message"] and status["handover"]["sources"][0]["busyNodes"]
    assert status["members"][1]["countedOut"] and status["members"][1]["updateResourcesIntervalSeconds"] == 15.0
    assert status["hostMapping"]["members"][1]["nextRetryAt"]
    assert admit({**example_pool("minimal"), "status": status}) == []
    assert list(_undeclared(status, schema()["properties"]["status"], ".status")) == []


# The printer columns of `kubectl get ics` read from these statuses, as the real API server prints
# them: tests/integration/test_crd_printer_columns.py.


# --- kubectl ----------------------------------------------------------------------------


def test_kubectl_reads_the_crd_and_examples(tmp_path):
    """kubectl, offline, decodes every manifest into the objects PyYAML sees.

    `kubectl apply --dry-run=client` cannot run without an API server: even in client
    mode it asks the server for discovery ("unable to recognize ...: connection
    refused"), and `--validate` needs the server's OpenAPI. `kubectl label --local`
    decodes the same files with kubectl's own YAML reader and needs no server; the schema
    checks a server would make are the emulated admission above.
    """
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH: the kubectl decode check did not run")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("")  # never reach whatever cluster the developer has configured
    result = subprocess.run(
        [kubectl, "label", "--local", "--dry-run=client", "-o", "name",
         "-f", str(CRD_DIR), "-f", str(EXAMPLES), "ironicshards.io/checked=true"],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    expected = set()
    for path in [CRD_FILE, *sorted(EXAMPLES.glob("*.yaml"))]:
        for document in load_documents(path):
            group = document["apiVersion"].rpartition("/")[0]
            kind = document["kind"].lower() + (f".{group}" if group else "")
            expected.add(f"{kind}/{document['metadata']['name']}")
    assert set(result.stdout.split()) == expected
    assert "customresourcedefinition.apiextensions.k8s.io/ironiccomputeshards.ironicshards.io" in expected
