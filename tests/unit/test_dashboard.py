"""The Grafana dashboard in the chart: off by default; when enabled, a ConfigMap with the
sidecar's label carrying the dashboard; one operator installation at a time (cluster, namespace,
job), so two installs in one Prometheus are never summed; the panels a platform team looks for.
That every query names metrics and labels the operator really exports is checked against a
real operator's /metrics: tests/integration/test_operator_metrics.py."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "ironic-shard-operator"
DASHBOARD = CHART / "dashboards" / "ironic-shard-operator.json"
INSTALL = ("cluster", "namespace", "job")


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def queries() -> list[str]:
    found = [target["expr"] for panel in dashboard()["panels"] for target in panel.get("targets", ())]
    found += [v["query"]["query"] for v in dashboard()["templating"]["list"] if isinstance(v.get("query"), dict)]
    return found


def selectors(query: str) -> list[tuple[str, str]]:
    """(metric, label matchers) of every operator metric the query selects."""
    return re.findall(r"\b(ironic_shard_[a-z_]+)(?:\{([^}]*)\})?", query)


def test_one_installation_at_a_time_cluster_namespace_and_job_filter_every_query() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    for name in INSTALL:  # one value each: two installs are never summed into one number
        assert variables[name]["type"] == "query" and not variables[name].get("multi"), name
        assert not variables[name].get("includeAll"), name
    assert variables["pool"]["multi"]
    checked = 0
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            for metric, matchers in selectors(target["expr"]):
                for name in INSTALL:
                    assert f'{name}=~"${name}"' in matchers, (panel["title"], metric, name)
                checked += 1
    assert checked >= 20
    # each variable narrows the next: namespaces of the cluster, jobs of the namespace, its pools
    assert 'cluster=~"$cluster"' in variables["namespace"]["query"]["query"]
    assert 'namespace=~"$namespace"' in variables["job"]["query"]["query"]
    assert all(f'{n}=~"${n}"' in variables["pool"]["query"]["query"] for n in INSTALL)


@pytest.mark.parametrize(("title", "metric"), [
    ("Conditions", "ironic_shard_condition"),
    ("Forced-down members and handovers in flight", "ironic_shard_nova_forced_down_members"),
    ("Forced-down members and handovers in flight", "ironic_shard_handover_nodes_in_flight"),
    ("Leader changes and refused API requests", "ironic_shard_lease_transitions"),
    ("Leader changes and refused API requests", "ironic_shard_kube_api_refusals_total"),
])
def test_the_panels_a_platform_team_looks_for_are_there(title: str, metric: str) -> None:
    [panel] = [p for p in dashboard()["panels"] if p["title"] == title]
    assert any(metric in target["expr"] for target in panel["targets"])


def test_panels_do_not_overlap() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in dashboard()["panels"]:
        grid = panel["gridPos"]
        cells = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not cells & taken, panel["title"]
        assert grid["x"] + grid["w"] <= 24
        taken |= cells


def test_every_panel_has_a_query_and_a_description() -> None:
    for panel in dashboard()["panels"]:
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
