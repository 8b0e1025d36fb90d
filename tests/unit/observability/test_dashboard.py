"""The shipped Grafana dashboard: a well-formed dashboard whose every query asks only for metrics a
worker exports (read from a live registry), and on which every shipped alert rule can be seen."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.observability.promql import exported_metric_names, metric_names, worker_metrics

COMPOSE = Path(__file__).resolve().parents[3] / "compose"
DASHBOARD = COMPOSE / "grafana" / "volunteer-dashboard.json"
ALERTS = COMPOSE / "alerts.yml"
PROMETHEUS_OWN = {"up", "ALERTS"}
"""Series Prometheus itself writes: the scrape health and the state of its alert rules."""
ALERTS_MATCHER = re.compile(r'ALERTS\{[^}]*alertname=~"([^"]+)"')


def load() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return dashboard


def rule_exprs() -> dict[str, str]:
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return {str(r["alert"]): str(r["expr"]) for g in doc["groups"] for r in g["rules"]}


def exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def structure_errors(dashboard: dict[str, Any]) -> list[str]:
    errors = []
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    if variables.get("datasource", {}).get("type") != "datasource" or variables["datasource"]["query"] != "prometheus":
        errors.append("no Prometheus `datasource` template variable")
    ids = [p.get("id") for p in dashboard["panels"]]
    if len(ids) != len(set(ids)) or not all(isinstance(i, int) for i in ids):
        errors.append(f"panel ids not unique integers: {ids}")
    for panel in dashboard["panels"]:
        title = panel.get("title", "?")
        if panel.get("type") not in ("timeseries", "stat"):
            errors.append(f"{title}: type {panel.get('type')}")
        grid = panel.get("gridPos", {})
        if not {"h", "w", "x", "y"} <= set(grid) or grid["x"] + grid["w"] > 24:
            errors.append(f"{title}: gridPos {grid}")
        if not panel.get("targets"):
            errors.append(f"{title}: no targets")
        for target in [panel, *panel.get("targets", [])]:
            if target.get("datasource") != {"type": "prometheus", "uid": "${datasource}"}:
                errors.append(f"{title}: datasource {target.get('datasource')} does not use the variable")
        for target in panel.get("targets", []):
            if not str(target.get("expr", "")).strip() or not target.get("refId"):
                errors.append(f"{title}: a target without expr or refId")
        refs = [t.get("refId") for t in panel.get("targets", [])]
        if len(refs) != len(set(refs)):
            errors.append(f"{title}: repeated refId {refs}")
    return errors


def unknown_metrics(dashboard: dict[str, Any], exported: set[str]) -> list[tuple[str, set[str]]]:
    out = []
    for title, expr in exprs(dashboard):
        used = metric_names(expr)
        if not used or used - exported - PROMETHEUS_OWN:
            out.append((title, used - exported - PROMETHEUS_OWN))
    return out


@pytest.fixture(scope="module")
def exported() -> set[str]:
    return exported_metric_names(worker_metrics())


def test_the_dashboard_is_well_formed() -> None:
    dashboard = load()
    assert 30 <= dashboard["schemaVersion"] <= 41
    assert len(dashboard["panels"]) >= 8
    assert structure_errors(dashboard) == []


def test_the_structure_check_catches_mistakes() -> None:
    broken = copy.deepcopy(load())
    broken["panels"][1]["id"] = broken["panels"][0]["id"]
    broken["panels"][2]["targets"][0]["datasource"] = {"type": "prometheus", "uid": "my-prom"}
    del broken["panels"][3]["gridPos"]
    assert len(structure_errors(broken)) == 3


def test_every_panel_asks_only_for_exported_metrics(exported: set[str]) -> None:
    assert unknown_metrics(load(), exported) == []


def test_a_made_up_metric_on_a_panel_is_caught(exported: set[str]) -> None:
    mutated = copy.deepcopy(load())
    panel = mutated["panels"][-1]
    panel["targets"][0]["expr"] = "sum(rate(volunteer_turns_totl[$__rate_interval]))"
    assert unknown_metrics(mutated, exported) == [(panel["title"], {"volunteer_turns_totl"})]


def test_every_alert_rule_is_visible_on_the_dashboard() -> None:
    """An ALERTS panel whose matcher takes every rule's name, and for every rule a panel showing
    at least one of the metrics it watches (so a firing alert can be read on the dashboard)."""
    dashboard = load()
    patterns = [m.group(1) for _, expr in exprs(dashboard) if (m := ALERTS_MATCHER.search(expr))]
    assert patterns, "no panel shows ALERTS"
    shown = set().union(*(metric_names(expr) for _, expr in exprs(dashboard)))
    for name, expr in rule_exprs().items():
        assert any(re.fullmatch(p, name) for p in patterns), f"{name} is not on the ALERTS panels {patterns}"
        assert metric_names(expr) & shown, f"no panel shows a metric of {name}: {metric_names(expr)}"
