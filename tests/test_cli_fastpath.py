"""The typer-free way into `check` and `checks` (netdoctor.check_command) reads every command
line it accepts exactly as typer does, and leaves every other one to typer."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import pytest

from netdoctor.check_command import CHECK_OPTIONS, CHECKS_OPTIONS, PROBE_OPTIONS, fast_command

ACCEPTED = [
    ["check"],
    ["checks"],
    ["check", "--no-probe", "--format", "json"],
    ["check", "--snapshot", "/snap/node1", "--no-probe"],
    ["check", "--snapshot=/snap/node1", "--format=prometheus", "-o", "/var/lib/node_exporter/netdoctor.prom"],
    ["-v", "check", "--no-probe", "-q", "--log-json"],
    ["-vv", "-q", "check", "--deadline", "12.5", "--state", "/tmp/state.json", "--baseline", "/snap/old"],
    ["check", "--only", "mtu,port-state", "--only", "pfc-ecn", "--skip", "nvlink", "--rules", "dgx-h100"],
    ["check", "--plugin-dir", "/opt/a", "--plugin-dir=/opt/b", "--debug", "--fabric-scan", "--output", "/x.json"],
    ["check", "--no-fabric-scan", "--format", "junit", "--verbose", "--quiet", "-vq"],
    ["checks", "--format", "json", "--plugin-dir", "/opt/plugins", "-v"],
    ["--log-json", "checks"],
    ["probe"],
    ["-v", "probe", "--gpus", "0,1", "--engine", "nccl", "--budget", "8", "--format", "json", "-q"],
    ["probe", "--budget=4.5", "--output", "/tmp/probe.json", "--rules", "dgx-h100", "--snapshot", "/snap/node1"],
]
LEFT_TO_TYPER = [
    [], ["--version"], ["check", "--help"], ["-h"], ["check", "-h"], ["discover"], ["chek"], ["check", "extra"],
    ["check", "--format", "xml"], ["check", "--format", "JSON"], ["check", "--frobnicate"], ["check", "--only"],
    ["checks", "--snapshot", "/x"], ["check", "--rules="], ["check", "--deadline=abc"], ["check", "--deadline", "1e3"],
    ["check", "--deadline", "inf"], ["check", "--debug=1"], ["check", "--rules", "-v"], ["check", "-o=/x"],
    ["check", "--snapshot", "/a", "--snapshot", "/b"], ["check", "--", "--no-probe"], ["check", "--no-probe", "fleet"],
    ["--version", "check"], ["fleet", "report", "x"], ["check", "--snapshot", " /padded"],
    ["probe", "--help"], ["probe", "--no-probe"], ["probe", "--budget", "abc"], ["probe", "--gpus"], ["probe", "0,1"],
    ["probe", "--format", "html"],
]


def _typer_reading(args: list[str]) -> tuple[str, dict[str, Any], tuple[int, int, bool]]:
    """What typer's command tree makes of `args`: (command, its parameters, global options)."""
    import typer

    from netdoctor.commands import app

    root = typer.main.get_command(app)
    with root.make_context("netdoctor", list(args)) as context:
        name, command, rest = root.resolve_command(context, [*context.protected_args, *context.args])
        with command.make_context(name, rest, parent=context) as sub:
            params = {key: _plain(key, value) for key, value in sub.params.items()}
        late = context.meta.get("netdoctor.logging", {"verbose": 0, "quiet": 0, "log_json": False})
        options = (context.params["verbose"] + late["verbose"], context.params["quiet"] + late["quiet"],
                   context.params["log_json"] or late["log_json"])
    return name, params, options


def _plain(key: str, value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(key, item) for item in value] if value else None
    if key in {"snapshot", "output", "state", "baseline", "plugin_dir"} and isinstance(value, str):
        return Path(value)
    return value


@pytest.mark.parametrize("args", ACCEPTED, ids=" ".join)
def test_an_accepted_command_line_reads_as_typer_reads_it(args: list[str]) -> None:
    fast = fast_command(args)
    assert fast is not None, "a plain command line of check/checks runs without typer"
    assert fast == _typer_reading(args)


@pytest.mark.parametrize("args", LEFT_TO_TYPER, ids=" ".join)
def test_anything_else_is_left_to_typer(args: list[str]) -> None:
    assert fast_command(args) is None


@pytest.mark.parametrize(("name", "table"), [("check", CHECK_OPTIONS), ("checks", CHECKS_OPTIONS),
                                             ("probe", PROBE_OPTIONS)])
def test_the_option_tables_are_the_commands_options(name: str, table: dict[str, Any]) -> None:
    """Every option of the command is in the table (but --help), and nothing else is."""
    import typer

    from netdoctor.commands import app

    command = typer.main.get_command(app).commands[name]
    declared = {option for param in command.params for option in [*param.opts, *param.secondary_opts]}
    assert set(table) == declared - {"-h", "--help", "-v", "--verbose", "-q", "--quiet", "--log-json"}
