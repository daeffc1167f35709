"""The click mechanics both command lines share (`netdoctor` and `python -m netdoctor.fleet`).

- Global options after the command: `-v/--verbose`, `-q/--quiet` and `--log-json` are
  accepted on every command and subcommand (`netdoctor check -v`, `netdoctor fleet sweep
  --log-json`) with the meaning they have before the command; counts add up
  (`netdoctor -v check -v` is `-vv`).
- A mistyped command names the nearest one: `no such command 'chek'; did you mean 'check'?`.
- `invoke` runs a command tree with netdoctor's exit codes (netdoctor.cli.guarded_call): a
  usage error, a NetdoctorError or an internal error is one line on stderr and exit 3
  (click's own usage exit code 2 is remapped). It does not go through click's `main`, which
  turns Ctrl-C into a blank line on stderr (click) or exit 130 (typer): the caller reports
  the interrupt.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from netdoctor.util import import_without_rich

# Plain click help instead of rich panels: rich and pygments would cost every run ~40 ms.
typer = import_without_rich("typer")

import click  # noqa: E402  (after typer, imported without rich)
from typer.core import TyperGroup  # noqa: E402

from netdoctor.cli import USAGE_EXIT, error_line, guarded_call  # noqa: E402
from netdoctor.logging import configure_logging  # noqa: E402

_SETTINGS = "netdoctor.logging"
VERBOSE_HELP = "More log output on stderr (-vv: debug)."
QUIET_HELP = "Less log output on stderr."
LOG_JSON_HELP = "Logs as JSON lines on stderr."


def set_global_options(ctx: click.Context, verbose: int = 0, quiet: int = 0, log_json: bool = False) -> None:
    """Apply the global options given so far (before the command and after it) to the logs."""
    settings = ctx.find_root().meta.setdefault(_SETTINGS, {"verbose": 0, "quiet": 0, "log_json": False})
    settings["verbose"] += verbose
    settings["quiet"] += quiet
    settings["log_json"] = settings["log_json"] or log_json
    configure_logging(settings["verbose"], settings["quiet"], json_logs=settings["log_json"])


def _late_option(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value:
        set_global_options(ctx, **{str(param.name): value})


def with_global_options(command: click.Command) -> click.Command:
    """`command` accepting -v/-q/--log-json among its own options (once)."""
    if getattr(command, "_netdoctor_global_options", False):
        return command
    taken = {name for param in command.params for name in getattr(param, "opts", ())}
    for declarations, settings in ((["-v", "--verbose"], {"count": True, "help": VERBOSE_HELP}),
                                   (["-q", "--quiet"], {"count": True, "help": QUIET_HELP}),
                                   (["--log-json"], {"is_flag": True, "help": LOG_JSON_HELP})):
        if not taken & set(declarations):
            command.params.append(click.Option(declarations, expose_value=False, callback=_late_option, **settings))
    command._netdoctor_global_options = True  # type: ignore[attr-defined]
    return command


class NetdoctorGroup(TyperGroup):
    """A group whose commands take the global options and whose typos get a suggestion."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        return None if command is None else with_global_options(command)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        name = args[0] if args else ""
        if name and not name.startswith("-") and not ctx.resilient_parsing and self.get_command(ctx, name) is None:
            # A command not loaded yet (`fleet`) is listed, never hidden.
            visible = [known for known in self.list_commands(ctx)
                       if not getattr(self.commands.get(known), "hidden", False)]
            match = difflib.get_close_matches(name, visible, n=1)
            if match:
                ctx.fail(f"no such command {name!r}; did you mean {match[0]!r}?")
        return super().resolve_command(ctx, args)


def invoke(command: click.Command, args: Sequence[str], prog_name: str) -> int:
    """Run `command` on `args`; the exit code (0-3). KeyboardInterrupt is the caller's."""

    def run() -> Any:
        try:
            with command.make_context(prog_name, list(args)) as ctx:
                return command.invoke(ctx)
        except click.exceptions.Exit as request:
            return request.exit_code
        except click.ClickException as error:   # usage errors, bad values
            error_line(error.format_message())
            return USAGE_EXIT
        except click.Abort:
            raise KeyboardInterrupt from None    # click's prompts abort on Ctrl-C: reported as one

    return guarded_call(run, debug="--debug" in args)
