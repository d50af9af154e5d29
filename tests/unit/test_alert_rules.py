"""The alerts of docs/operating.md are the chart's PrometheusRule, and they fire as documented:
`promtool check rules` and `promtool test rules` (Debian's prometheus package, unpacked by
hack/promtool.sh) on tests/promtool/, whose input series are what the operator exports
(tests/integration/test_operator_metrics.py checks them against a real operator's /metrics)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.unit.test_dashboard import helm, render  # noqa: F401  (the helm fixture)

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "charts" / "ironic-shard-operator" / "rules" / "ironic-shard-operator.rules.yaml"
PROMTOOL_TESTS = REPO / "tests" / "promtool" / "ironic-shard-operator.test.yaml"
DOC = REPO / "docs" / "operating.md"


@pytest.fixture(scope="module")
def promtool() -> Path:
    done = subprocess.run(["bash", "hack/promtool.sh"], cwd=REPO, capture_output=True, text=True)
    if done.returncode == 3:
        pytest.skip(f"promtool cannot be installed here, the alert rules are not run: {done.stderr.strip()}")
    assert done.returncode == 0, f"hack/promtool.sh failed:\n{done.stderr}"
    return Path(done.stdout.strip().splitlines()[-1])


def test_the_rules_are_valid_prometheus_rules(promtool: Path) -> None:
    done = subprocess.run([str(promtool), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_fires_as_its_promtool_test_says(promtool: Path) -> None:
    done = subprocess.run([str(promtool), "test", "rules", str(PROMTOOL_TESTS)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    tested = {case["alertname"] for test in yaml.safe_load(PROMTOOL_TESTS.read_text())["tests"]
              for case in test.get("alert_rule_test", ()) if case.get("exp_alerts")}
    alerts = {rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]}
    assert alerts - tested == set(), "alerts no promtool test sees firing"


def test_docs_show_exactly_the_rules_the_chart_carries() -> None:
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S) if "alert:" in b]
    assert yaml.safe_load(block) == yaml.safe_load(RULES.read_text())


def test_the_prometheusrule_is_off_by_default_and_carries_the_rules_when_enabled(helm: Path) -> None:  # noqa: F811
    assert not [d for d in render(helm) if d["kind"] == "PrometheusRule"]
    [rule] = [d for d in render(helm, "--set", "metrics.prometheusRule.enabled=true",
                                "--set", "metrics.prometheusRule.labels.release=prom")
              if d["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "ops" and rule["metadata"]["labels"]["release"] == "prom"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
