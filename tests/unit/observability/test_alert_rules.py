"""The shipped alert rules: valid for Prometheus (its own ``promtool``), loaded by the compose
deployment, and written against metrics a worker exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.unit.observability.promql import exported_metric_names, metric_names, worker_metrics

COMPOSE = Path(__file__).resolve().parents[3] / "compose"
ALERTS = COMPOSE / "alerts.yml"


def rules() -> list[dict[str, object]]:
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_promtool_accepts_the_rules() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian: apt-get install prometheus; scripts/setup does it as root)")
    done = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_compose_prometheus_loads_the_rules_file_it_mounts() -> None:
    config = yaml.safe_load((COMPOSE / "prometheus.yml").read_text(encoding="utf-8"))
    compose = yaml.safe_load((COMPOSE / "compose.yaml").read_text(encoding="utf-8"))
    mounts = [str(m) for m in compose["services"]["prometheus"]["volumes"]]
    targets = {m.split(":")[1] for m in mounts if m.startswith("./alerts.yml:")}
    assert config["rule_files"] and set(config["rule_files"]) <= targets


def test_every_alert_uses_only_exported_metrics() -> None:
    exported = exported_metric_names(worker_metrics()) | {"up"}
    names = [str(rule["alert"]) for rule in rules()]
    assert len(names) == len(set(names)) and all(re.fullmatch(r"Volunteer[A-Za-z]+", n) for n in names)
    for rule in rules():
        used = metric_names(str(rule["expr"]))
        assert used, rule["alert"]
        assert used <= exported, (rule["alert"], used - exported)
