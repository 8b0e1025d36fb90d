"""The compose deployment, checked without a Docker engine.

compose/compose.yaml cannot run on the project machines, so everything that can be wrong in it
without running it is checked here against the code it deploys: every ``volunteer`` command and
flag exists in the CLI (lazy commands resolved; one whose module has not landed fails the test),
every ``VOLUNTEER_*`` variable is a field of :class:`pipeline.settings.Settings` and parses, the
Dockerfile's entrypoint is the installed console script, dependencies, volumes, networks and
mounted files exist, and the ports, credentials and sizes that two files must agree on do.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import pytest
import yaml

from pipeline.cli import COMMANDS
from pipeline.cli import main as cli_main
from pipeline.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = ROOT / "compose"
COMPOSE_FILE = COMPOSE_DIR / "compose.yaml"
IMAGE = "volunteer-stream"
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
SETTINGS_ENV = {f"VOLUNTEER_{name.upper()}": name for name in Settings.model_fields}
ONE_SHOT = "service_completed_successfully"


# ----------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class EnvLine:
    key: str
    value: str
    commented: bool
    line: int


def read_env_file(path: Path) -> list[EnvLine]:
    """``KEY=VALUE`` lines, plus commented examples ``# KEY=VALUE`` (checked too: they get copied)."""
    entries = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = raw.strip()
        commented = text.startswith("#")
        if commented:
            text = text.lstrip("#").strip()
        key, sep, value = text.partition("=")
        if not sep or not ENV_NAME.match(key.strip()):
            assert commented or not text, f"{path.name}:{number}: not KEY=VALUE: {raw!r}"
            continue
        entries.append(EnvLine(key.strip(), value.strip(), commented, number))
    return entries


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict) and isinstance(data.get("services"), dict), "compose.yaml has no services"
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(compose["services"])


def is_ours(service: dict[str, Any]) -> bool:
    return str(service.get("image", "")).startswith(IMAGE + ":") or "build" in service


def ours(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in services.items() if is_ours(svc)}


def env_files(service: dict[str, Any]) -> list[Path]:
    files = service.get("env_file", [])
    files = [files] if isinstance(files, str | dict) else files
    return [COMPOSE_DIR / (f["path"] if isinstance(f, dict) else f) for f in files]


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): str(v) for k, v in (env or {}).items()}


def volunteer_env() -> dict[str, str]:
    return {e.key: e.value for e in read_env_file(COMPOSE_DIR / "volunteer.env") if not e.commented}


def tokens(command: Any) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(t) for t in command]


# ----------------------------------------------------------------------------- the CLI


def resolve(args: list[str]) -> tuple[list[str], click.Command, list[str]]:
    """Walk ``volunteer`` groups down to the leaf command; missing modules fail loudly."""
    command: click.Command = cli_main
    ctx = click.Context(cli_main, info_name="volunteer")
    path = ["volunteer"]
    rest = list(args)
    while isinstance(command, click.Group):
        if not rest or rest[0].startswith("-"):
            pytest.fail(f"`{' '.join(path + rest)}` names no subcommand of `{' '.join(path)}`")
        name = rest.pop(0)
        sub = command.get_command(ctx, name)
        if sub is None:
            if command is cli_main and name in COMMANDS:
                pytest.fail(f"compose uses `volunteer {name}`, but its module {COMMANDS[name][0]} has not "
                            "landed yet (pipeline/cli/__init__.py maps it); the deployment cannot work without it")
            known = ", ".join(command.list_commands(ctx))
            pytest.fail(f"compose uses `{' '.join([*path, name])}`, which does not exist (known: {known})")
        path.append(name)
        ctx = click.Context(sub, info_name=name, parent=ctx)
        command = sub
    return path, command, rest


def check_invocation(where: str, args: list[str]) -> list[str]:
    """Parse ``args`` with click's own parser: unknown flags, missing values, extra or missing
    arguments and bad values (except paths, which exist only in the container) are errors."""
    path, command, rest = resolve(args)
    ctx = click.Context(command, info_name=path[-1])
    parser = command.make_parser(ctx)
    try:
        values, extra, _ = parser.parse_args(args=list(rest))
    except click.UsageError as exc:
        return [f"{where}: `{' '.join(path)}`: {exc.format_message()}"]
    errors = [f"{where}: `{' '.join(path)}` got unexpected arguments {extra}"] if extra else []
    for param in command.params:
        name = param.name or ""
        if values.get(name) is None:  # click's parser leaves a missing argument as None
            if isinstance(param, click.Argument) and param.required:
                errors.append(f"{where}: `{' '.join(path)}` is missing its {param.human_readable_name} argument")
            continue
        if isinstance(param.type, click.Path | click.File):
            continue
        try:
            param.type_cast_value(ctx, values[name])
        except click.BadParameter as exc:
            errors.append(f"{where}: `{' '.join(path)}` {param.get_error_hint(ctx)}: {exc.format_message()}")
    return errors


# ----------------------------------------------------------------------------- commands and flags


def test_every_volunteer_command_and_flag_exists(services: dict[str, dict[str, Any]]) -> None:
    mine = ours(services)
    assert {"migrate", "worker"} <= set(mine), "the volunteer image must run at least migrate and worker"
    errors: list[str] = []
    for name, service in mine.items():
        command = service.get("command", dockerfile().cmd)
        errors += check_invocation(f"service {name}", tokens(command))
    errors += check_invocation("Dockerfile CMD", dockerfile().cmd)
    assert not errors, "\n".join(errors)


def test_the_flag_check_itself_catches_mistakes() -> None:
    """Guard against a vacuous check: typos in commands and flags are reported."""
    assert check_invocation("t", ["migrate", "--databse-url", "x"])
    assert check_invocation("t", ["migrate", "extra-argument"])
    assert check_invocation("t", ["brain", "import"])  # PATH missing
    assert check_invocation("t", ["stats", "--json", "--days"])  # value missing
    assert not check_invocation("t", ["stats", "--days=7", "--json"])
    with pytest.raises(pytest.fail.Exception, match="does not exist"):
        check_invocation("t", ["wrker"])


# ----------------------------------------------------------------------------- variables


def all_volunteer_variables(services: dict[str, dict[str, Any]]) -> Iterator[tuple[str, str]]:
    """(where, name) of every VOLUNTEER_* variable the deployment sets or shows as an example."""
    seen_files: set[Path] = set()
    for name, service in services.items():
        for key in environment(service):
            if key.startswith("VOLUNTEER_"):
                yield f"compose.yaml services.{name}.environment", key
        for path in env_files(service):
            if path in seen_files:
                continue
            seen_files.add(path)
            for entry in read_env_file(path):
                if entry.key.startswith("VOLUNTEER_"):
                    yield f"{path.name}:{entry.line}", entry.key
    for key, _ in dockerfile().env.items():
        if key.startswith("VOLUNTEER_"):
            yield "Dockerfile ENV", key


def test_every_volunteer_variable_is_a_setting(services: dict[str, dict[str, Any]]) -> None:
    found = list(all_volunteer_variables(services))
    assert len(found) >= len(SETTINGS_ENV)
    unknown = [f"{where}: {key} is not a field of pipeline.settings.Settings (it would be ignored)"
               for where, key in found if key not in SETTINGS_ENV]
    assert not unknown, "\n".join(unknown)


def test_env_files_exist_and_are_well_formed(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for path in env_files(service):
            assert path.is_file(), f"service {name}: env_file {path} is missing"
            keys = [e.key for e in read_env_file(path) if not e.commented]
            duplicates = {k for k in keys if keys.count(k) > 1}
            assert not duplicates, f"{path.name} sets {sorted(duplicates)} more than once"


def test_volunteer_env_lists_every_setting() -> None:
    listed = {e.key for e in read_env_file(COMPOSE_DIR / "volunteer.env")}
    missing = sorted(set(SETTINGS_ENV) - listed)
    assert not missing, f"compose/volunteer.env should set or show (commented) every setting; add {missing}"


def test_volunteer_env_values_parse_as_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Values (and the commented examples, uncommented) are valid for their types."""
    entries = read_env_file(COMPOSE_DIR / "volunteer.env")
    for key in [k for k in __import__("os").environ if k.startswith("VOLUNTEER_")]:
        monkeypatch.delenv(key)
    for entry in entries:
        if not entry.commented:
            monkeypatch.setenv(entry.key, entry.value)
    deployed = Settings()
    assert deployed.broker == volunteer_env()["VOLUNTEER_BROKER"]
    assert not deployed.broker_is_embedded, "the deployment must use the real broker"
    for entry in entries:
        if entry.commented:
            monkeypatch.setenv(entry.key, entry.value)
    Settings()  # raises ValidationError naming the variable if an example has a bad value


# ----------------------------------------------------------------------------- Dockerfile


@dataclass(frozen=True)
class Dockerfile:
    base: str
    entrypoint: list[str]
    cmd: list[str]
    env: dict[str, str]
    copies: list[str]
    runs: list[str]
    exposes: list[int]


def dockerfile() -> Dockerfile:
    text = (COMPOSE_DIR / "Dockerfile").read_text(encoding="utf-8")
    logical = re.sub(r"\\\n", " ", text)  # join continuation lines
    base, entrypoint, cmd, env, copies, runs, exposes = "", [], [], {}, [], [], []
    for line in logical.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        instruction, rest = instruction.upper(), rest.strip()
        if instruction == "FROM":
            base = rest.split()[0]
        elif instruction in ("ENTRYPOINT", "CMD"):
            assert rest.startswith("["), f"Dockerfile {instruction} must use the JSON (exec) form"
            value = [str(v) for v in json.loads(rest)]
            entrypoint, cmd = (value, cmd) if instruction == "ENTRYPOINT" else (entrypoint, value)
        elif instruction == "ENV":
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                env[key] = value
        elif instruction == "COPY" and not rest.startswith("--from"):
            copies.extend(shlex.split(rest)[:-1])
        elif instruction == "RUN":
            runs.append(rest)
        elif instruction == "EXPOSE":
            exposes.extend(int(p.split("/")[0]) for p in rest.split())
    return Dockerfile(base, entrypoint, cmd, env, copies, runs, exposes)


def test_dockerfile_builds_the_package_and_runs_the_volunteer_command() -> None:
    image = dockerfile()
    assert image.base == "python:3.11-slim"
    assert any(re.search(r"\bpip install \.(\s|$)", run) for run in image.runs), "the image must `pip install .`"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert image.entrypoint and image.entrypoint[0] in scripts, (
        f"ENTRYPOINT {image.entrypoint} is not a console script of pyproject.toml ({sorted(scripts)})")
    # pipeline.entry answers 'hook user-prompt' itself and hands every other command to pipeline.cli:main
    assert scripts[image.entrypoint[0]] in ("pipeline.cli:main", "pipeline.entry:main")
    assert image.cmd, "the Dockerfile needs a default CMD (the worker)"


def test_build_context_holds_what_the_dockerfile_copies(services: dict[str, dict[str, Any]]) -> None:
    builds = [svc["build"] for svc in ours(services).values() if "build" in svc]
    assert builds, "no service builds the image"
    for build in builds:
        context = (COMPOSE_DIR / build["context"]).resolve()
        assert (context / build["dockerfile"]).resolve() == (COMPOSE_DIR / "Dockerfile").resolve()
        for source in dockerfile().copies:
            assert (context / source).exists(), f"Dockerfile copies {source}, missing from the build context {context}"
    ignore = (COMPOSE_DIR / "Dockerfile.dockerignore").read_text(encoding="utf-8").split()
    if "*" in ignore:
        for source in dockerfile().copies:
            assert f"!{source.rstrip('/')}" in ignore or f"!{source.rstrip('/')}/" in ignore, (
                f"Dockerfile.dockerignore excludes everything but does not re-include {source}")


# ----------------------------------------------------------------------------- wiring between services


def test_depends_on_names_real_services_with_the_right_kind(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        deps = service.get("depends_on", {})
        deps = {d: {"condition": "service_started"} for d in deps} if isinstance(deps, list) else deps
        for target, spec in deps.items():
            assert target in services, f"service {name} depends on {target!r}, which is not a service"
            condition = spec.get("condition", "service_started")
            assert condition in ("service_started", "service_healthy", ONE_SHOT), f"{name}: {condition}"
            if condition == "service_healthy":
                assert "healthcheck" in services[target], f"{name} waits for {target} to be healthy; it has no healthcheck"
            if condition == ONE_SHOT:
                assert services[target].get("restart") == "no", f"{name} waits for {target} to finish; it must be one-shot"
            if not service.get("profiles"):
                assert not services[target].get("profiles"), (
                    f"{name} starts by default but depends on {target}, which is only in profile(s) "
                    f"{services[target]['profiles']}")


def test_long_running_services_have_health_checks(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        if service.get("restart") != "no":
            assert "healthcheck" in service, f"service {name} runs continuously but has no healthcheck"


def test_volumes_networks_and_mounted_files_exist(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    declared_volumes = set(compose.get("volumes") or {})
    declared_networks = set(compose.get("networks") or {})
    used_volumes: set[str] = set()
    for name, service in services.items():
        for mount in service.get("volumes", []):
            source = mount.split(":", 1)[0] if isinstance(mount, str) else str(mount.get("source", ""))
            if source.startswith("${"):
                continue  # chosen by the operator (e.g. BRAIN_DIR)
            if source.startswith((".", "/")):
                assert (COMPOSE_DIR / source).exists(), f"service {name} mounts {source}, which does not exist"
            else:
                assert source in declared_volumes, f"service {name} uses volume {source!r}, not declared"
                used_volumes.add(source)
        for network in service.get("networks", []):
            assert network in declared_networks, f"service {name} uses network {network!r}, not declared"
    assert {"kafka-data", "pg-data"} <= used_volumes, "broker and database data must live on named volumes"
    assert declared_volumes == used_volumes, f"declared but unused volumes: {declared_volumes - used_volumes}"


def test_workers_can_be_scaled(services: dict[str, dict[str, Any]]) -> None:
    worker = services["worker"]
    assert tokens(worker["command"])[0] == "worker"
    assert "container_name" not in worker, "a fixed container_name breaks --scale worker=N"
    assert not worker.get("ports"), "published host ports break --scale worker=N"


def test_the_service_urls_point_at_the_compose_services(services: dict[str, dict[str, Any]]) -> None:
    env = volunteer_env()
    kafka_env = environment(services["kafka"])
    advertised = {urlsplit(u.strip()).netloc for u in kafka_env["KAFKA_ADVERTISED_LISTENERS"].split(",")}
    for server in Settings(broker=env["VOLUNTEER_BROKER"]).bootstrap_servers:
        assert server in advertised, f"VOLUNTEER_BROKER {server} is not an advertised Kafka listener {advertised}"

    db = urlsplit(env["VOLUNTEER_DATABASE_URL"])
    pg = {e.key: e.value for e in read_env_file(COMPOSE_DIR / "postgres.env") if not e.commented}
    assert db.hostname == "postgres" and (db.port or 5432) == 5432
    assert (db.username, db.password, db.path.lstrip("/")) == (
        pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], pg["POSTGRES_DB"]), "database URL and postgres.env disagree"


def test_ports_agree_between_settings_health_check_image_and_prometheus(services: dict[str, dict[str, Any]]) -> None:
    env = volunteer_env()
    web_port, metrics_port = int(env["VOLUNTEER_WEB_PORT"]), int(env["VOLUNTEER_METRICS_PORT"])
    probe = " ".join(tokens(services["worker"]["healthcheck"]["test"]))
    assert re.search(rf"\b{web_port}\b", probe), f"worker health check does not probe the web port {web_port}"
    assert {web_port, metrics_port} <= set(dockerfile().exposes)

    prometheus = yaml.safe_load((COMPOSE_DIR / "prometheus.yml").read_text(encoding="utf-8"))
    mounts = [m for m in services["prometheus"]["volumes"] if "prometheus.yml" in str(m)]
    assert mounts, "the prometheus service does not mount prometheus.yml"
    targets = [(name, sd["port"]) for job in prometheus["scrape_configs"]
               for sd in job.get("dns_sd_configs", []) for name in sd["names"]]
    assert ("worker", metrics_port) in targets, f"Prometheus does not scrape worker:{metrics_port} ({targets})"
    assert all(name in services for name, _ in targets)
    # Prometheus runs in another container: the endpoint must listen beyond the worker's loopback.
    host = env.get("VOLUNTEER_METRICS_HOST", str(Settings.model_fields["metrics_host"].default))
    assert host in ("0.0.0.0", "::"), f"VOLUNTEER_METRICS_HOST={host} is unreachable from the prometheus container"


def test_topics_follow_the_settings() -> None:
    """create-topics.sh creates each configured topic, falls back to the Settings defaults, and
    the broker and topics accept the largest turn the settings allow."""
    script = (COMPOSE_DIR / "create-topics.sh").read_text(encoding="utf-8")
    fallbacks = dict(re.findall(r"\$\{(VOLUNTEER_[A-Z_]+):-([^}]*)\}", script))
    for field in ("topic_turns", "topic_volunteered", "topic_dlq", "topic_page_opens",
                  "topic_partitions", "topic_replication"):
        env = f"VOLUNTEER_{field.upper()}"
        assert env in fallbacks, f"create-topics.sh does not use {env}"
        assert fallbacks[env] == str(Settings.model_fields[field].default), f"{env} fallback differs from Settings"
    topics_env = {e.key: e.value for e in read_env_file(COMPOSE_DIR / "topics.env") if not e.commented}
    for variable in set(re.findall(r"\$\{([A-Z_]+_RETENTION_MS)", script)):
        assert variable in topics_env, f"create-topics.sh uses {variable}, not set in topics.env"

    need = int(volunteer_env()["VOLUNTEER_MAX_TEXT_BYTES"]) + 64 * 1024 + 4 * 256
    compose_data = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    kafka_env = environment(compose_data["services"]["kafka"])
    assert int(kafka_env["KAFKA_MESSAGE_MAX_BYTES"]) >= need
    assert int(kafka_env["KAFKA_REPLICA_FETCH_MAX_BYTES"]) >= need
    assert int(topics_env["MAX_MESSAGE_BYTES"]) >= need
    assert int(kafka_env["KAFKA_NUM_PARTITIONS"]) == int(volunteer_env()["VOLUNTEER_TOPIC_PARTITIONS"])


def test_commands_in_the_deployment_guide_are_valid(services: dict[str, dict[str, Any]]) -> None:
    """``docker compose … run --rm SERVICE [ARGS]`` lines of docs/deployment.md name real services,
    and ARGS (the ``volunteer`` command that replaces the service's) parse."""
    text = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    runs = re.findall(r"docker compose (?:--profile (\S+) )?run --rm ([\w-]+)([^#\n`]*)", text)
    assert runs, "docs/deployment.md shows no `docker compose run` commands any more?"
    errors: list[str] = []
    for profile, name, args in runs:
        assert name in services, f"docs/deployment.md runs service {name!r}, which compose.yaml does not have"
        if services[name].get("profiles"):
            assert profile in services[name]["profiles"], f"docs: `run {name}` needs --profile {services[name]['profiles'][0]}"
        if args.strip() and is_ours(services[name]):
            errors += check_invocation(f"docs/deployment.md `run --rm {name}{args.rstrip()}`", shlex.split(args))
    assert not errors, "\n".join(errors)


def test_create_topics_script_is_valid_sh() -> None:
    """The topics job runs it with the image's POSIX sh; a syntax error would stop every worker."""
    script = COMPOSE_DIR / "create-topics.sh"
    done = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    compose_data = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    topics = compose_data["services"]["topics"]
    assert topics["entrypoint"][-1].endswith("/" + script.name)
    assert any(str(v).startswith(f"./{script.name}:") for v in topics["volumes"])


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard(services: dict[str, dict[str, Any]]) -> None:
    """Grafana's provisioning files point at the compose Prometheus and at the path where the
    dashboard file is mounted; a renamed service, port or mount would leave an empty Grafana."""
    grafana = services["grafana"]
    mounts = dict(str(m).split(":")[:2] for m in grafana["volumes"] if str(m).startswith("./"))
    assert mounts.get("./grafana/provisioning") == "/etc/grafana/provisioning", mounts
    provisioning = COMPOSE_DIR / "grafana" / "provisioning"

    datasources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text(encoding="utf-8"))
    [source] = datasources["datasources"]
    url = urlsplit(source["url"])
    assert url.hostname in services and url.hostname == "prometheus", source["url"]
    published = [str(p).rsplit(":", 1)[-1] for p in services["prometheus"].get("ports", [])]
    assert str(url.port) in published, f"Grafana asks {source['url']}; prometheus listens on {published}"
    assert set(grafana["networks"]) & set(services["prometheus"]["networks"])
    assert grafana["depends_on"]["prometheus"]["condition"] == "service_healthy"

    dashboard_file = COMPOSE_DIR / "grafana" / "volunteer-dashboard.json"
    target = mounts.get("./grafana/volunteer-dashboard.json", "")
    providers = yaml.safe_load((provisioning / "dashboards" / "volunteer.yml").read_text(encoding="utf-8"))
    paths = [p["options"]["path"] for p in providers["providers"]]
    assert target and str(Path(target).parent) in paths, f"dashboard mounted at {target!r}, providers read {paths}"
    assert environment(grafana)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] == target
    variables = json.loads(dashboard_file.read_text(encoding="utf-8"))["templating"]["list"]
    assert {"name": "datasource", "type": "datasource", "query": source["type"]}.items() <= variables[0].items()
