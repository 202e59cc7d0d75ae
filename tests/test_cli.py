"""What every command's --help promises: its exit codes, PATCHKIT_HOME, and the output options."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from patchkit.cli import cli


def commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in sorted(group.commands.items()):
        found.append((*prefix, name))
        if isinstance(command, click.Group):
            found += commands(command, (*prefix, name))
    return found


COMMANDS = commands(cli)


def test_there_are_commands_to_check():
    assert ("verify",) in COMMANDS and ("base", "fetch") in COMMANDS and len(COMMANDS) >= 11


@pytest.mark.parametrize("path", [(), *COMMANDS], ids=lambda path: " ".join(path) or "patchkit")
def test_every_help_lists_exit_codes_and_the_home(path):
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Exit codes:" in result.output and "130" in result.output and "PATCHKIT_HOME" in result.output


@pytest.mark.parametrize("path", [p for p in COMMANDS if not isinstance(cli.get_command(None, p[0]), click.Group)
                                  or len(p) > 1], ids=" ".join)
def test_every_command_takes_json_quiet_and_verbose(path):
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert all(option in result.output for option in ("--json", "--quiet", "--verbose")), result.output


def test_the_group_help_shows_how_to_enable_shell_completion():
    result = CliRunner().invoke(cli, ["--help"])
    assert "_PATCHKIT_COMPLETE=bash_source patchkit" in result.output
