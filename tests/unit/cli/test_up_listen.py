"""``volunteer up --listen``: the address must be one other hosts can use, and one of this host."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from pipeline.cli.up_cmd import check_listen_address, up


def test_loopback_and_local_addresses_are_accepted() -> None:
    assert check_listen_address(None) is None
    assert check_listen_address("127.0.0.1") == "127.0.0.1"


@pytest.mark.parametrize(("value", "says"), [
    ("0.0.0.0", "cannot be advertised"),
    ("::", "cannot be advertised"),
    ("db.example", "is not an IP address"),
    ("192.0.2.77", "is not an address of this host"),  # TEST-NET-1: never configured here
])
def test_bad_listen_addresses_are_one_line_errors(value: str, says: str) -> None:
    with pytest.raises(click.BadParameter, match=says):
        check_listen_address(value)


def test_the_command_refuses_before_starting_anything() -> None:
    result = CliRunner().invoke(up, ["--listen", "0.0.0.0"])
    assert result.exit_code == 2
    assert "cannot be advertised" in result.output and "Traceback" not in result.output
