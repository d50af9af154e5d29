"""The Grafana dashboard in the chart: off by default; when enabled, a ConfigMap with the
sidecar's label carrying the dashboard; and every query names a metric the operator exports
(read from controller/metrics.py's own registry) with labels that metric has."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from ironic_shard_operator.controller.metrics import OperatorMetrics

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "ironic-shard-operator"
DASHBOARD = CHART / "dashboards" / "ironic-shard-operator.json"
# PromQL words that are no metric: functions, aggregations, keywords.
PROMQL_WORDS = {"sum", "by", "without", "rate", "increase", "max", "min", "avg", "count", "histogram_quantile",
                "label_values", "on", "ignoring", "group_left", "group_right", "and", "or", "unless"}


def exported() -> dict[str, set[str]]:
    """Every series name the operator's registry exposes, with its label names: counters as
    <name>_total, histograms as _bucket (plus `le`), _sum and _count."""
    metrics = OperatorMetrics()
    out: dict[str, set[str]] = {}
    for value in vars(metrics).values():
        if not isinstance(value, MetricWrapperBase):
            continue
        name, labels, kind = value._name, set(value._labelnames), value._type
        if kind == "counter":
            out[f"{name}_total"] = labels
        elif kind == "histogram":
            out |= {f"{name}_bucket": labels | {"le"}, f"{name}_sum": labels, f"{name}_count": labels}
        else:
            out[name] = labels
    metrics._since.last["ns/pool"] = 0.0  # the scrape-time gauge shows its labels once a pool exists
    for family in metrics.registry.collect():
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    found = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())]
    found += [v["query"]["query"] for v in dashboard["templating"]["list"] if isinstance(v.get("query"), dict)]
    return found


def test_every_query_names_an_exported_metric_with_labels_it_has() -> None:
    series = exported()
    checked = 0
    for query in queries():
        names = [n for n in re.findall(r"\b(ironic_shard_[a-z_]+)\b", query) if n not in PROMQL_WORDS]
        assert names, f"query names no operator metric: {query}"
        for name in names:
            assert name in series, f"{name} is not exported by the operator (query: {query})"
        used = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)\s*\"", query))
        for clause in re.findall(r"\bby\s*\(([^)]*)\)", query):
            used |= {label.strip() for label in clause.split(",") if label.strip()}
        used |= set(re.findall(r"\{\{(\w+)\}\}", query))
        available = set().union(*(series[name] for name in names))
        assert used <= available, f"labels {used - available} do not exist on {names} (query: {query})"
        checked += 1
    assert checked >= 10


def test_every_panel_has_a_query_and_a_description() -> None:
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        assert panel.get("targets") and panel.get("description"), panel["title"]
        legends = [t.get("legendFormat", "") for t in panel["targets"]]
        for legend, target in zip(legends, panel["targets"]):
            names = set(re.findall(r"\{\{(\w+)\}\}", legend))
            clause = " ".join(re.findall(r"\bby\s*\(([^)]*)\)", target["expr"]))
            if "sum" in target["expr"] or "histogram_quantile" in target["expr"]:
                assert names <= {w.strip() for w in clause.split(",")}, (panel["title"], legend)


@pytest.fixture(scope="module")
def helm() -> Path:
    done = subprocess.run(["bash", "hack/tools.sh"], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"hack/tools.sh could not install helm here: {done.stderr.strip()[-300:]}")
    return REPO / ".tools" / "bin" / "helm"


def render(helm: Path, *args: str) -> list[dict]:
    done = subprocess.run([str(helm), "template", "rel", str(CHART), "--namespace", "ops", *args],
                          capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_the_dashboard_configmap_is_off_by_default_and_carries_the_sidecar_label(helm: Path) -> None:
    assert not [d for d in render(helm) if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")]
    [configmap] = [d for d in render(helm, "--set", "dashboard.enabled=true")
                   if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["namespace"] == "ops"
    assert json.loads(configmap["data"]["ironic-shard-operator.json"]) == json.loads(DASHBOARD.read_text())
    [elsewhere] = [d for d in render(helm, "--set", "dashboard.enabled=true", "--set", "dashboard.namespace=monitoring",
                                     "--set", "dashboard.sidecarLabel=dash")
                   if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")]
    assert elsewhere["metadata"]["namespace"] == "monitoring" and elsewhere["metadata"]["labels"]["dash"] == "1"


DOC = REPO / "docs" / "dashboard.md"


def _split_titles(cell: str) -> list[str]:
    """A doc cell's panel titles: split at commas outside parentheses."""
    titles, depth, current = [], 0, ""
    for char in cell:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            titles.append(current.strip())
            current = ""
        else:
            current += char
    return [*titles, current.strip()]


def test_the_dashboard_page_lists_every_panel_with_the_metrics_it_queries_and_every_variable() -> None:
    """docs/dashboard.md is what the dashboard is: its panels in order, each row's metrics those
    its panels query, and its variables."""
    dashboard = json.loads(DASHBOARD.read_text())
    text = DOC.read_text()
    rows = [line.split("|")[1:-1] for line in text.split("| panel |", 1)[1].splitlines()[2:] if line.startswith("| ")]
    documented_titles = [title for row in rows for title in _split_titles(row[0])]
    assert documented_titles == [panel["title"] for panel in dashboard["panels"]]
    by_title = {panel["title"]: panel for panel in dashboard["panels"]}
    for row in rows:
        queried = {re.sub(r"_bucket$", "", name)
                   for title in _split_titles(row[0]) for target in by_title[title].get("targets", ())
                   for name in re.findall(r"ironic_shard_\w+", target["expr"])}
        documented = {"ironic_shard_" + re.sub(r"\{.*", "", name) for name in re.findall(r"`([^`]+)`", row[2])}
        assert documented == queried, row[0]
    variables = re.findall(r"`(\w+)`", text.split("Variables:", 1)[1].split(".", 1)[0])
    assert variables == [v["name"] for v in dashboard["templating"]["list"]]
