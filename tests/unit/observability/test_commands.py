"""``volunteer opened`` input errors and ``volunteer doctor`` output, without services."""

from __future__ import annotations

import socket

import click
from click.testing import CliRunner

from pipeline.cli import main as cli
from pipeline.cli.doctor_cmd import human_lines
from pipeline.doctor import FAIL, OK, WARN, Check, failed


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), env={"VOLUNTEER_BROKER": "kafka://127.0.0.1:1"})
    return result.exit_code, result.output


def test_opened_rejects_bad_input_in_one_line_before_touching_the_broker() -> None:
    code, out = invoke("opened")
    assert code == 2 and "Missing argument 'SLUG...'" in out
    code, out = invoke("opened", " people/alice")
    assert code == 2 and "leading or trailing whitespace" in out
    code, out = invoke("opened", "people/alice", "--at", "yesterday")
    assert code == 2 and "--at 'yesterday' is not an RFC 3339 time" in out
    code, out = invoke("opened", "people/alice", "--session", "s\x01")
    assert code == 2 and "control characters" in out


def test_opened_reports_an_unreachable_broker_as_one_line() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = CliRunner().invoke(cli, ["opened", "people/alice", "--broker", f"kafka://127.0.0.1:{port}"])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: cannot send to the broker at kafka://127.0.0.1:{port}")
    assert len(result.output.strip().splitlines()) == 1


def test_doctor_lines_put_a_fix_under_warnings_and_failures() -> None:
    checks = [Check("broker", OK, "up"), Check("topics", WARN, "odd", "do this"),
              Check("database", FAIL, "down", "start it"), Check("schema", WARN, "not checked", "")]
    lines = [click.unstyle(line) for line in human_lines(checks)]
    assert lines == [
        "ok    broker    up",
        "warn  topics    odd",
        "                fix: do this",
        "fail  database  down",
        "                fix: start it",
        "warn  schema    not checked",
    ]
    assert failed(checks) and not failed(checks[:2])
    assert checks[2].to_dict() == {"check": "database", "status": "fail", "detail": "down", "hint": "start it",
                                   "data": {}}


def test_help_texts_name_the_commands_purpose() -> None:
    code, out = invoke("opened", "--help")
    assert code == 0 and "last_retrieved_at" in out and "--session" in out
    code, out = invoke("doctor", "--help")
    assert code == 0 and "Exit status 0 when nothing failed" in out and "--json" in out
