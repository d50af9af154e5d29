"""docs/operating.md stays true: its example is a valid pool that shows every field, and its
metrics table and alert rules name exactly the metrics the operator exposes."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ironic_shard_operator.core.nova_policy import FINDING_KINDS
from ironic_shard_operator.controller.metrics import OperatorMetrics
from ironic_shard_operator.core.model import Member, MemberLoad, NodeCounts, Observation, Plan, PoolSpec
from ironic_shard_operator.core.pool_signals import signals
from tests.unit.test_crd_schema import admit, schema

DOC = Path(__file__).resolve().parents[2] / "docs" / "operating.md"
# Fields whose content is a Kubernetes type passed through unchanged: the doc shows the
# field, not every key of the Kubernetes type.
PASS_THROUGH = {"env", "resources", "nodeSelector", "tolerations", "affinity",
                "readinessProbe", "livenessProbe"}


def yaml_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)


def example_block() -> str:
    (block,) = [b for b in yaml_blocks() if "kind: IronicComputeShard" in b]
    return block


def spec_fields(node: dict, path: str = "spec") -> set[str]:
    fields = set()
    for name, child in node.get("properties", {}).items():
        fields.add(f"{path}.{name}")
        if name not in PASS_THROUGH:
            fields |= spec_fields(child, f"{path}.{name}")
    return fields


def test_the_example_pool_is_admitted_by_the_crd():
    assert admit(yaml.safe_load(example_block())) == []


def test_the_example_shows_every_spec_field():
    block = example_block()
    # a field counts as shown when its name is written as a key, possibly commented out
    shown = set(re.findall(r"^\s*#?\s*([A-Za-z]+):", block, flags=re.M))
    shown |= set(re.findall(r"[{,]\s*([A-Za-z]+):", block))
    missing = sorted(f for f in spec_fields(schema()["properties"]["spec"])
                     if f.rsplit(".", 1)[1] not in shown)
    assert missing == []


def exposed_families() -> list:
    """The metric families of an OperatorMetrics that has recorded one of everything."""
    metrics = OperatorMetrics()
    observation = Observation(PoolSpec("p", replicas=1), (Member("p-0", True),), (), 0.0)
    plan = Plan(1, ("p-0",), (), (), (), {}, (MemberLoad("p-0", 1, 0, True),), NodeCounts(total=1))
    metrics.record_cycle("ns/p", observation, plan, 0.1)
    metrics.record_moves("ns/p", 1)
    metrics.record_replacement("ns/p")
    metrics.record_fence("ns/p", "Wait")
    metrics.record_ironic_error("ns/p", "unavailable")
    metrics.record_status("ns/p", signals({"metadata": {}, "spec": {"replicas": 1}}, {
        "readyReplicas": 1, "conditions": [{"type": "Ready", "status": "True", "reason": "AllMembersReady"}],
        "nova": {"forcedDown": []}, "handover": {"sources": []}}))
    metrics.set_lease_transitions(1)
    metrics.record_nova_audit("ns/p", dict.fromkeys(FINDING_KINDS, 0))
    metrics.record_nova_action("ns/p", "forced_down_set")
    return list(text_string_to_metric_families(generate_latest(metrics.registry).decode()))


def exposed_sample_names() -> set[str]:
    return {sample.name for family in exposed_families() for sample in family.samples}


def test_the_metrics_table_lists_every_metric_and_no_other():
    # what a user types in PromQL: counters with _total, histograms by their base name
    # (prometheus_client's `<name>_created` timestamps of counters and histograms aside)
    names = {f.name + "_total" if f.type == "counter" else f.name for f in exposed_families()
             if not f.name.endswith("_created")}
    table = set(re.findall(r"^\| `(ironic_shard_\w+)`", DOC.read_text(), flags=re.M))
    assert table == names


def test_the_alert_rules_use_only_exposed_metrics():
    (rules,) = [b for b in yaml_blocks() if "alert:" in b]
    groups = yaml.safe_load(rules)["groups"]
    exposed = exposed_sample_names()
    for rule in groups[0]["rules"]:
        used = set(re.findall(r"ironic_shard_\w+", rule["expr"]))
        assert used <= exposed, f"{rule['alert']} uses {used - exposed}"
