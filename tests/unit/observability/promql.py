"""Metric names in a PromQL expression, and the names a worker exports: for checking that the alert
rules and the dashboard only ask for metrics that exist."""

from __future__ import annotations

import re

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.worker_metrics import WorkerMetrics

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_KEYWORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values",
    "group", "rate", "irate", "increase", "delta", "idelta", "deriv", "predict_linear", "histogram_quantile",
    "sum_over_time", "avg_over_time", "max_over_time", "min_over_time", "count_over_time", "last_over_time",
    "abs", "ceil", "floor", "round", "clamp_min", "clamp_max", "clamp", "scalar", "vector", "time",
    "absent", "absent_over_time", "changes", "resets", "label_replace", "label_join", "sort", "sort_desc",
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
    "inf", "nan",
}


def metric_names(expr: str) -> set[str]:
    """The metric (series) names ``expr`` selects: identifiers that are not functions, operators,
    label names, Grafana variables (``$__rate_interval``) or durations."""
    text = _STRINGS.sub('""', expr)
    text = re.sub(r"\$\{?[A-Za-z_]+\}?", "1", text)  # Grafana variables
    text = _GROUPING.sub(" ", text)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    names: set[str] = set()
    for match in _IDENT.finditer(text):
        word = match.group(0)
        start = match.start()
        if start and (text[start - 1].isdigit() or text[start - 1] == "."):
            continue  # the unit of a number such as 0.5e or 5m
        if word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


def worker_metrics() -> WorkerMetrics:
    """The metrics of a real (not started) worker app: bound to its counters, brain, table and
    consumer, exactly what ``volunteer worker`` serves."""
    from pipeline.agents.brain_holder import BrainHolder
    from pipeline.app import StreamApp
    from pipeline.cli.demo_cmd import samples_dir
    from pipeline.settings import load_settings
    from tests.services.statekey import STATE_KEY_ENV

    settings = load_settings(broker="kafka://127.0.0.1:9", database_url="postgresql://127.0.0.1:9/unused",
                             state_key=STATE_KEY_ENV["VOLUNTEER_STATE_KEY"])
    return StreamApp(settings, BrainHolder.from_directory(samples_dir() / "brain")).metrics


def exported_metric_names(metrics: WorkerMetrics) -> set[str]:
    """Every series name ``metrics`` exposes (``_total``, ``_bucket``, ... included), read from its
    registry's exposition, not from a list. A family without samples yet (the lag before the first
    fetch) counts by its declared name."""
    body = generate_latest(metrics.registry).decode()
    names: set[str] = set()
    for family in text_string_to_metric_families(body):
        names.update(s.name for s in family.samples)
        names.add(family.name + "_total" if family.type == "counter" else family.name)
    return names
