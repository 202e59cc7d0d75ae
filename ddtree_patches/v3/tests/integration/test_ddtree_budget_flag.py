"""``--speculative-ddtree-budget`` on 0.5.23's command line. 0.5.23 builds its parser from the field
declarations (``arg_groups/fields/spec.py``, through ``add_cli_args_from_dataclass``), so the flag's
``Union[int, str]`` type would otherwise have no argparse ``type=``: the field's ``type_parser`` makes a
whole number an int and keeps anything else a string, which ``_handle_ddtree`` accepts ('auto') or
refuses naming the flag (the backend gate's ``budget-neither-auto-nor-a-number`` case)."""

from __future__ import annotations

import argparse

import pytest
from sglang.srt.server_args import ServerArgs


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return parser.parse_args(["--model-path", "target", *argv])


@pytest.mark.parametrize(
    ("argv", "value"),
    [
        ([], "auto"),
        (["--speculative-ddtree-budget", "auto"], "auto"),
        (["--speculative-ddtree-budget", "64"], 64),
        (["--speculative-ddtree-budget=15"], 15),
        (["--speculative-ddtree-budget", "sixty"], "sixty"),
    ],
    ids=["default", "auto", "number", "number-with-equals", "neither"],
)
def test_the_command_line_keeps_auto_and_makes_a_whole_number_an_int(argv, value):
    parsed = _parse(argv).speculative_ddtree_budget
    assert parsed == value and type(parsed) is type(value)
