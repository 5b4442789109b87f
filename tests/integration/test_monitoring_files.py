"""The monitoring files in deploy/ work with what the code serves: promtool checks and
unit-tests the alerting rules (it must be installed: `scripts/ensure-promtool`; a
missing promtool fails, never skips), and every metric the rules and the Grafana
dashboard query is one `/metrics` really serves."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from scheduler import metrics
from scheduler.store.database import Database

ROOT = Path(__file__).parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "scheduler.json"
# A PromQL metric name; the words of PromQL and the labels are filtered out below.
NAME = re.compile(r"\b(scheduler_[a-z0-9_]+)\b")
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "info": ("_info",),
    "gauge": ("",),
}


def _promtool(*args: str) -> str:
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is missing: run scripts/ensure-promtool"
    result = subprocess.run(
        [promtool, *args], cwd=PROMETHEUS, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_promtool_checks_the_rules() -> None:
    assert "SUCCESS" in _promtool("check", "rules", "rules.yaml")


def test_promtool_unit_tests_pass() -> None:
    assert "SUCCESS" in _promtool("test", "rules", "rules.test.yaml")


def _served(database: Database) -> set[str]:
    """Every series name `/metrics` can serve, from the families the registry describes
    (a counter `x` serves `x_total`, a histogram `x_bucket`, …)."""
    metrics.watch(database)
    try:
        text = generate_latest(metrics.REGISTRY).decode()
    finally:
        metrics.unwatch()
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {family.name + suffix for suffix in SUFFIXES.get(family.type, ("",))}
    return names


def _rule_expressions() -> Iterator[str]:
    rules = yaml.safe_load((PROMETHEUS / "rules.yaml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            yield rule["expr"]


def _dashboard_expressions() -> Iterator[str]:
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            yield target["expr"]


def test_the_rules_and_the_dashboard_query_only_served_metrics(database: Database) -> None:
    served = _served(database)
    queried = {
        name
        for expression in [*_rule_expressions(), *_dashboard_expressions()]
        for name in NAME.findall(expression)
    }
    assert queried, "no metric found in the rules and the dashboard"
    assert sorted(queried - served) == []
    # The rules cover what the issue asks for.
    alerts = {
        rule["alert"]
        for group in yaml.safe_load((PROMETHEUS / "rules.yaml").read_text())["groups"]
        for rule in group["rules"]
    }
    assert alerts >= {
        "SchedulerJobOverdue",
        "SchedulerJobFailedAfterRetries",
        "SchedulerPeriodsMissed",
        "SchedulerStuckItems",
        "SchedulerNoLiveNode",
        "SchedulerHeartbeatFailing",
    }


def test_the_monitors_scrape_the_deployments_port() -> None:
    deployment = next(
        doc
        for doc in yaml.safe_load_all((ROOT / "deploy/kubernetes/deployment.yaml").read_text())
        if doc["kind"] == "Deployment"
    )
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    ports = {
        port["name"] for port in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    pod = yaml.safe_load((PROMETHEUS / "podmonitor.yaml").read_text())
    service = yaml.safe_load((PROMETHEUS / "servicemonitor.yaml").read_text())
    assert pod["kind"] == "PodMonitor"
    assert service["kind"] == "ServiceMonitor"
    assert pod["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert {endpoint["port"] for endpoint in pod["spec"]["podMetricsEndpoints"]} <= ports
    assert {endpoint["path"] for endpoint in service["spec"]["endpoints"]} == {"/metrics"}
