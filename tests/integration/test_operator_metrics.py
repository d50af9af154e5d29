"""The operator's real /metrics and log, from a real `ironic-shard-operator run` process with two
pools: `runs` (the real Ironic, members Ready through the fake kubelet) and `stuck`, whose
Keystone cannot even be resolved, so no Ironic observation of it ever completes.

What a user sees of the pool that cannot start: its gauges from the first cycle (members
desired, seconds since the last Ironic observation counting from its creation), its Ironic
errors counted by the adapter's own class (keystone_unavailable, never `other`), one INFO line
per condition change. And what the chart's dashboard and alert tests are checked against: the
metric names and label sets of this real output, not a list written by hand.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ironic_shard_operator.core.pods import parse_time
from testbed.ironic_service import IronicService, seed_nodes_directly_in_db, unique_resource_class
from testbed.kubelet import FakeKubelet
from testbed.operator_objects import create_secrets, install_crd
from testbed.ports import free_port
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import POOLS, OperatorProcess, condition, get_pool, http_get, pool_manifest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "ironic-shard-operator"
DASHBOARD = CHART / "dashboards" / "ironic-shard-operator.json"
RULES = CHART / "rules" / "ironic-shard-operator.rules.yaml"
PROMTOOL_TESTS = REPO / "tests" / "promtool" / "ironic-shard-operator.test.yaml"
# Labels Prometheus adds to every scraped series (the ServiceMonitor's target labels, and a
# cluster label from external labels or a federation): the dashboard filters on them.
TARGET_LABELS = {"cluster", "namespace", "job", "instance", "pod", "service", "endpoint", "container"}
UNRESOLVABLE = """clouds:
  ironic:
    auth_type: password
    auth:
      auth_url: http://keystone.invalid:5000/v3
      username: ironic
      password: never-sent
      project_name: service
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
"""


@dataclass
class Scraped:
    namespace: str
    text: str
    log: str
    operator: OperatorProcess
    metrics_port: int

    def names(self) -> set[str]:
        """Every sample name /metrics announces (HELP and TYPE), with or without a series yet:
        counters as <name>_total, histograms as <name>_bucket, _sum and _count."""
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
        return {f.name + suffix for f in text_string_to_metric_families(self.text)
                for suffix in suffixes.get(f.type, ("",))}

    def series(self) -> dict[str, list[dict[str, str]]]:
        """{sample name: [labels of each series]}."""
        out: dict[str, list[dict[str, str]]] = {}
        for family in text_string_to_metric_families(self.text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append(sample.labels)
        return out

    def value(self, name: str, **labels: str) -> float | None:
        return sample_value(self.text, name, **labels)


def sample_value(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


@pytest.fixture(scope="module")
def scraped(kube_api: KubeAPI, ironic_service: IronicService, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Scraped]:
    if kube_api.has_kubelets:
        pytest.skip("real kubelets run the pods of this cluster: the fake kubelet cannot drive pod status here")
    client = kube_api.client
    ns = kube_api.create_namespace("metrics")
    install_crd(client)
    create_secrets(client, ns, ironic_service.clouds_yaml)
    client.create(f"/api/v1/namespaces/{ns}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "unresolvable-cloud"},
        "data": {"clouds.yaml": base64.b64encode(UNRESOLVABLE.encode()).decode()}})
    resource_class = unique_resource_class("metrics")
    seed_nodes_directly_in_db(ironic_service, 6, resource_class=resource_class)
    port = free_port()
    with FakeKubelet(client, ns) as _kubelet, OperatorProcess(
            kube_api, ns, "op-metrics", tmp_path_factory.mktemp("metrics"), METRICS_PORT=str(port)) as operator:
        client.create(POOLS.format(ns=ns), pool_manifest(
            "runs", cloud_name=ironic_service.cloud_name, resource_class=resource_class, replicas=2))
        client.create(POOLS.format(ns=ns), pool_manifest(
            "stuck", cloud_name="ironic", resource_class="any",
            cloud={"secretRef": {"name": "unresolvable-cloud"}, "cloudName": "ironic"}))

        def both_reported() -> str:
            text = http_get(port, "/metrics")
            ready = sample_value(text, "ironic_shard_members_ready", pool=f"{ns}/runs") == 2
            members = [m for m in (f"runs-{i}" for i in range(2))
                       if sample_value(text, "ironic_shard_member_nodes", pool=f"{ns}/runs", member=m) == 3]
            stuck = sample_value(text, "ironic_shard_ironic_api_errors_total", pool=f"{ns}/stuck",
                                 kind="keystone_unavailable")
            return text if ready and len(members) == 2 and stuck else ""

        try:
            text = kube_api.wait_for(both_reported, timeout=120, what="both pools on /metrics")
            yield Scraped(ns, text, operator.log(), operator, port)
        finally:
            for name in ("runs", "stuck"):
                client.delete(f"{POOLS.format(ns=ns)}/{name}")
            operator.stop()
            print(f"----- operator -----\n{operator.log()[-20000:]}")
    kube_api.delete_namespace(ns)
    kube_api.namespaces.remove(ns)


def test_a_pool_that_cannot_reach_keystone_has_its_gauges_from_its_first_cycle(scraped: Scraped,
                                                                              kube_api: KubeAPI) -> None:
    pool = f"{scraped.namespace}/stuck"
    assert scraped.value("ironic_shard_members_desired", pool=pool) == 3
    assert scraped.value("ironic_shard_members_ready", pool=pool) == 0
    age = time.time() - parse_time(get_pool(kube_api.client, scraped.namespace, "stuck")["metadata"]["creationTimestamp"])
    first = scraped.value("ironic_shard_seconds_since_last_ironic_observation", pool=pool)
    assert first is not None and 0 <= first <= age + 1
    # It keeps counting while Keystone stays unresolvable (the alert's series).
    later = kube_api.wait_for(
        lambda: (v := sample_value(http_get(scraped.metrics_port, "/metrics"),
                                   "ironic_shard_seconds_since_last_ironic_observation", pool=pool)) and v >= first + 2
        and v, timeout=30, what="the unobserved time to grow")
    assert later >= first + 2
    assert scraped.value("ironic_shard_condition", pool=pool, condition="Ready", reason="IronicUnavailable") == 0
    assert scraped.value("ironic_shard_condition", pool=pool, condition="Degraded", reason="IronicUnavailable") == 1


def test_the_ironic_errors_of_that_pool_are_counted_by_the_adapters_own_kind(scraped: Scraped) -> None:
    pool = f"{scraped.namespace}/stuck"
    assert scraped.value("ironic_shard_ironic_api_errors_total", pool=pool, kind="keystone_unavailable") >= 1
    assert scraped.value("ironic_shard_ironic_api_errors_total", pool=pool, kind="other") == 0


def test_the_log_says_each_condition_change_of_that_pool_once(scraped: Scraped, kube_api: KubeAPI) -> None:
    pool = f"{scraped.namespace}/stuck"
    ready = condition(get_pool(kube_api.client, scraped.namespace, "stuck"), "Ready")
    assert "Keystone" in ready["message"]
    log = scraped.operator.log()
    lines = [line for line in log.splitlines() if f"pool {pool}: Ready is False IronicUnavailable" in line]
    assert len(lines) == 1, log[-5000:]
    assert "Keystone" in lines[0] and "INFO" in lines[0]
    assert len([line for line in log.splitlines() if f"pool {pool}: Degraded is True" in line]) == 1


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    found = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())]
    found += [v["query"]["query"] for v in dashboard["templating"]["list"] if isinstance(v.get("query"), dict)]
    return found


def names_in(query: str) -> list[str]:
    return re.findall(r"\b(ironic_shard_[a-z_]+)\b", query)


def labels_used(query: str) -> set[str]:
    used = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)\s*\"", query))
    for clause in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", query):
        used |= {label.strip() for label in clause.split(",") if label.strip()}
    return used


def test_every_dashboard_query_names_metrics_and_labels_the_operator_really_exports(scraped: Scraped) -> None:
    series, names = scraped.series(), scraped.names()
    checked = 0
    for query in dashboard_queries():
        names = names_in(query)
        assert names, f"query names no operator metric: {query}"
        for name in names:
            assert name in names, f"{name} is not on the operator's /metrics (query: {query})"
        available = set(TARGET_LABELS)
        for name in names:
            for labels in series.get(name, ()):
                available |= set(labels) | ({"le"} if name.endswith("_bucket") else set())
        with_samples = [n for n in names if n in series]
        if with_samples:  # a family without any series here says nothing of its labels
            assert labels_used(query) <= available, \
                f"labels {labels_used(query) - available} do not exist on {names} (query: {query})"
        checked += 1
    assert checked >= 15


def test_the_alert_rules_and_their_promtool_tests_use_only_real_series(scraped: Scraped) -> None:
    """Names from /metrics; label sets from the series of this run. Nova's findings have no
    series without a Nova (the tests/nova tier has one): their labels are not checked here."""
    series, names = scraped.series(), scraped.names()
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            for name in names_in(rule["expr"]):
                assert name in names, f"alert {rule['alert']} uses {name}, not on the operator's /metrics"
    tests = yaml.safe_load(PROMTOOL_TESTS.read_text())
    seen = 0
    for case in tests["tests"]:
        for item in case["input_series"]:
            match = re.fullmatch(r"(\w+)\{(.*)\}", item["series"].strip())
            assert match, item["series"]
            name, labels = match.group(1), set(re.findall(r"(\w+)=\"", match.group(2)))
            assert name in names, f"promtool input {name} is not on the operator's /metrics"
            if name not in series:
                print(f"{name}: no series in this run (no Nova here); its labels are not checked")
                continue
            real = [set(s) for s in series[name]]
            assert labels - TARGET_LABELS in real, \
                f"promtool input {item['series']}: the operator exports {name} with labels {real}, not {labels}"
            seen += 1
    assert seen >= 10
