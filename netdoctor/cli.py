"""The `netdoctor` entry point: what runs before (and instead of) the command line framework.

It runs on every node before every job, so it imports nothing it does not need:
`netdoctor --version` is answered here, without typer, structlog or any check; a plain
`check`, `checks` or `probe` command line runs without typer too (netdoctor.check_command); every
other command line goes to `netdoctor.commands` (typer), which imports per command.

Ctrl-C at any moment of a run ends with one line, `netdoctor: error: interrupted`, and
exit 3, never a traceback: the SIGINT handler is installed before the first heavy import.
The first Ctrl-C raises KeyboardInterrupt, so the runner still stops every process group
it started; another Ctrl-C in the next `CLEANUP_GRACE_S` lets that cleanup finish. Once
the command has returned, a Ctrl-C still makes the exit 3 (at exit, not mid-flush). What
comes before this module runs, the interpreter's own start-up (and `site`), is Python's.

Exit codes follow the monitoring-plugin convention (0 pass, 1 warn, 2 fail, 3 unknown).
The names of `netdoctor.commands` (`app`, `parse_gpu_list`, ...) are importable from here.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

try:
    import _signal as signals          # the C module: `signal` builds its enums at import
except ImportError:                    # pragma: no cover
    import signal as signals  # type: ignore[no-redef]

USAGE_EXIT = 3
CLEANUP_GRACE_S = 2.0
# Global options that may come with --version without changing what it prints.
_WITH_VERSION = frozenset(("--version", "--verbose", "--quiet", "--log-json"))


class _Interrupts:
    """SIGINT for one netdoctor process: KeyboardInterrupt while the command runs, noted
    (and made exit 3 by `finish`) once it has returned."""

    def __init__(self) -> None:
        self.first: float | None = None     # monotonic time of the first Ctrl-C
        self.reported = False
        self.exiting = False

    def install(self) -> None:
        # A parent that ignores SIGINT (a background job, nohup) keeps it ignored.
        if signals.getsignal(signals.SIGINT) is signals.default_int_handler:
            signals.signal(signals.SIGINT, self.handle)

    def handle(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        if self.exiting:
            if self.first is None:
                self.first = now
            return
        if self.first is not None and now - self.first < CLEANUP_GRACE_S:
            return                          # the first one's cleanup is running: let it finish
        self.first = now
        raise KeyboardInterrupt

    def report(self) -> int:
        self.reported = True
        error_line("interrupted")
        return USAGE_EXIT

    def finish(self, code: int) -> NoReturn:
        """Exit with `code` once the report is flushed and the exit handlers have run; if
        interrupted, with 3.

        Not through the interpreter's own teardown: freeing every object and module and, after
        a live run, libcuda's exit handlers took 0.1 s of every `check` and `probe` on a 2x H200
        node (benchmarks/results/probe-speed.md), and nothing of netdoctor's is left for them.
        The exit handlers still run: the runner stops what it started, ours (the first) runs
        last. Nor does a thread still inside a hung tool read hold the exit. And after a Ctrl-C
        CPython remembers a KeyboardInterrupt that left an exec()'d string (dataclasses build
        their methods so) even once it was caught, and under `python -m` would end such a
        process by SIGINT after it exited 3.
        """
        self.exiting = True
        _flush(sys.stdout)
        if self.first is not None:
            code = USAGE_EXIT
            if not self.reported:
                self.report()
        import atexit

        atexit._run_exitfuncs()
        _flush(sys.stdout)
        _flush(sys.stderr)
        os._exit(code)

    def at_exit(self) -> None:
        """The last exit handler (registered first): a Ctrl-C during the others made the exit 3."""
        signals.signal(signals.SIGINT, signals.SIG_IGN)     # the interpreter's teardown is not interrupted
        if self.first is not None and not self.reported:
            self.report()
            _flush(sys.stdout)
            _flush(sys.stderr)
            os._exit(USAGE_EXIT)


_interrupts = _Interrupts()


def _flush(stream: Any) -> None:
    try:
        stream.flush()
    except (OSError, ValueError, AttributeError):
        pass


def error_line(message: str) -> None:
    """The one line on stderr of every failed run: `netdoctor: error: ...`."""
    first = " ".join(message.strip().split("\n")[:1]) or "error"
    sys.stderr.write(f"netdoctor: error: {first}\n")


def _caused_by_interrupt(error: BaseException) -> bool:
    """Is a KeyboardInterrupt among `error`'s causes and contexts?"""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def guarded_call(run: Callable[[], Any], debug: bool = False) -> int:
    """Run a command; its exit code (0-3). A NetdoctorError (usage, unreadable input) or an
    internal error is one line on stderr and exit 3 (with `--debug`, a traceback too).
    KeyboardInterrupt is the caller's."""
    from netdoctor.errors import NetdoctorError

    try:
        result = run()
    except NetdoctorError as error:
        _traceback_if(debug)
        error_line(str(error))
        return USAGE_EXIT
    except SystemExit as error:
        return error.code if isinstance(error.code, int) and 0 <= error.code <= 3 else USAGE_EXIT
    except BrokenPipeError:
        # stdout closed by `| head`: what click does (quiet streams, exit 1).
        sys.stdout, sys.stderr = _Pacified(sys.stdout), _Pacified(sys.stderr)  # type: ignore[assignment]
        return 1
    except Exception as error:
        if _caused_by_interrupt(error):
            # Ctrl-C inside an import can surface wrapped (a class body's `__set_name__`
            # turns it into RuntimeError): it is the interrupt, not a bug.
            raise KeyboardInterrupt from error
        _traceback_if(debug)
        error_line(f"internal error: {type(error).__name__}: {error}")
        return USAGE_EXIT
    if isinstance(result, int) and not 0 <= result <= 3:
        # Monitoring reads anything but 0-2 as unknown.
        error_line(f"exit status {result}")
        return USAGE_EXIT
    return result if isinstance(result, int) else 0


def _traceback_if(debug: bool) -> None:
    if debug:
        import traceback

        traceback.print_exc()


class _Pacified:
    """A stream whose flush forgets a closed pipe (the interpreter flushes stdout at exit)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError:
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _only_version(args: Sequence[str]) -> bool:
    """`--version`, alone or with global options only (typer would print the same)."""
    return "--version" in args and all(
        arg in _WITH_VERSION or (len(arg) > 1 and arg[0] == "-" and arg[1] != "-" and set(arg[1:]) <= {"v", "q"})
        for arg in args)


def run_cli(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on `argv` (default sys.argv[1:]) and return the exit code; never raises."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if _only_version(args):
            from netdoctor import __version__

            sys.stdout.write(f"netdoctor {__version__}\n")
            return 0
        if not args:
            # Like click's no_args_is_help, but a missing command is a usage error: exit 3.
            run_cli(["--help"])
            return USAGE_EXIT
        if args[0] in ("check", "checks", "probe") or args[0].startswith("-"):
            from netdoctor.check_command import fast_command, run_fast

            plain = fast_command(args)
            if plain is not None:
                from netdoctor.logging import configure_logging

                command, params, (verbose, quiet, log_json) = plain
                configure_logging(verbose, quiet, json_logs=log_json)
                return guarded_call(run_fast(command, params), debug=bool(params.get("debug")))
        from netdoctor.commands import run_commands

        return run_commands(args)
    except KeyboardInterrupt:
        return _interrupts.report()
    except Exception as error:   # the command line itself could not be loaded
        error_line(f"internal error: {type(error).__name__}: {error}")
        return USAGE_EXIT


def exit_guarded(run: Callable[[], int]) -> NoReturn:
    """Run `run` as this process's whole work, Ctrl-C guarded from this moment; exit with its code."""
    import atexit

    atexit.register(_interrupts.at_exit)
    try:
        _interrupts.install()
        code = run()
    except KeyboardInterrupt:
        code = _interrupts.report()
    _interrupts.finish(code)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    exit_guarded(lambda: run_cli(argv))


def __getattr__(name: str) -> Any:
    """`from netdoctor.cli import app` and the other names of netdoctor.commands, loaded on use."""
    if name.startswith("__"):
        raise AttributeError(name)
    import netdoctor.commands

    try:
        return getattr(netdoctor.commands, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
