"""netdoctor's logs: stderr only, so stdout carries nothing but the report.

Every module logs through `get_logger(__name__)`, in structlog's call style
(`log.warning("plugin skipped", plugin=path)`). Human-readable lines in the layout of
structlog's ConsoleRenderer (time, `[level    ]`, the event padded to 30 columns, sorted
`key=value`), colored only on a TTY; one JSON object per line with `--log-json` (for
journald / log shippers). Verbosity: warnings by default, `-v` info, `-vv` debug, `-q`
errors only, `-qq` critical only.

structlog itself is not imported to log: its package imports asyncio, the stdlib logging
bridge and its console renderer's helpers (~40 ms of every run, for a few lines on
stderr). Where structlog is imported all the same (a third-party plugin, a test's
`capture_logs`), events go through it, configured to render exactly these lines, even when
it is imported after `configure_logging` ran (structlog's own default prints to stdout).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, TextIO

from netdoctor.util import is_terminal

CRITICAL, ERROR, WARNING, INFO, DEBUG = 50, 40, 30, 20, 10
_LEVELS = [CRITICAL, ERROR, WARNING, INFO, DEBUG]
_DEFAULT_INDEX = 2  # WARNING
# structlog's method names and the level each logs at (`exception` is an error with a traceback).
_METHOD_LEVELS = {"critical": CRITICAL, "fatal": CRITICAL, "error": ERROR, "exception": ERROR, "warning": WARNING,
                  "warn": WARNING, "info": INFO, "debug": DEBUG}
_LEVEL_NAMES = {"warn": "warning", "exception": "error", "fatal": "critical"}
_EVENT_WIDTH = 30
_LEVEL_WIDTH = len("exception")       # ConsoleRenderer pads to its longest level name
# ConsoleRenderer's ANSI styles (the colorama codes).
_RESET, _BRIGHT, _DIM = "\033[0m", "\033[1m", "\033[2m"
_LEVEL_STYLES = {"critical": "\033[31m", "exception": "\033[31m", "error": "\033[31m", "warn": "\033[33m",
                 "warning": "\033[33m", "info": "\033[32m", "debug": "\033[32m", "notset": "\033[41m"}
_KEY_STYLE, _VALUE_STYLE = "\033[36m", "\033[35m"
_QUOTED = frozenset(" \t=\r\n\"'")


def level_for(verbose: int, quiet: int) -> int:
    """The stdlib level number for `-v` / `-q` counts (clamped to the known levels)."""
    index = min(max(_DEFAULT_INDEX + verbose - quiet, 0), len(_LEVELS) - 1)
    return _LEVELS[index]


class _Settings:
    def __init__(self) -> None:
        self.level: int | None = None      # None: configure_logging was never called (library use)
        self.json = False
        self.colors = False
        self.stream: Any = None


_settings = _Settings()


def verbose_requested() -> bool:
    """Did the global options ask for more than the default (`-v`, more `-v` than `-q`)? The
    text report then also lists each check that had nothing to judge."""
    return _settings.level is not None and _settings.level < _LEVELS[_DEFAULT_INDEX]


def configure_logging(verbose: int = 0, quiet: int = 0, *, json_logs: bool = False,
                      stream: TextIO | None = None) -> None:
    """Send every log line to `stream` (default: the current sys.stderr) at the `-v`/`-q` level.

    Called at the start of every CLI run, and again when global options come after the
    command; structlog's own default would print to stdout, which would corrupt
    `--format json` output.
    """
    output: Any = stream if stream is not None else _CurrentStderr()
    _settings.level = level_for(verbose, quiet)
    _settings.json = json_logs
    _settings.colors = not json_logs and is_terminal(output) and "NO_COLOR" not in os.environ
    _settings.stream = output
    structlog = sys.modules.get("structlog")
    if structlog is not None and hasattr(structlog, "configure"):
        _configure_structlog(structlog)
    elif _ON_IMPORT not in sys.meta_path:
        sys.meta_path.insert(0, _ON_IMPORT)


def get_logger(name: str) -> Logger:
    return Logger(name)


class Logger:
    """structlog's logging methods (`log.info(event, **values)`), without structlog."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def debug(self, event: str, **values: Any) -> None:
        _log(self.name, "debug", event, values)

    def info(self, event: str, **values: Any) -> None:
        _log(self.name, "info", event, values)

    def warning(self, event: str, **values: Any) -> None:
        _log(self.name, "warning", event, values)

    warn = warning

    def error(self, event: str, **values: Any) -> None:
        _log(self.name, "error", event, values)

    def exception(self, event: str, **values: Any) -> None:
        values.setdefault("exc_info", True)
        _log(self.name, "exception", event, values)

    def critical(self, event: str, **values: Any) -> None:
        _log(self.name, "critical", event, values)


def _log(name: str, method: str, event: str, values: dict[str, Any]) -> None:
    if _settings.level is not None and _METHOD_LEVELS[method] < _settings.level:
        return
    structlog = None
    if "structlog" in sys.modules or _settings.level is None:
        # Library use, nothing configured: structlog's defaults, as always. The import statement,
        # not sys.modules: it waits while another thread is still importing it (a module half
        # initialised has no get_logger yet; discovery logs from several threads at once).
        import structlog
    if structlog is not None:
        getattr(structlog.get_logger(name), method)(event, **values)
        return
    _settings.stream.write(render(method, {**values, "event": event}, json_lines=_settings.json,
                                  colors=_settings.colors) + "\n")
    _settings.stream.flush()


def render(method: str, event_dict: dict[str, Any], *, json_lines: bool, colors: bool = False) -> str:
    """One log line: what structlog's add_log_level + TimeStamper(iso, utc) and then
    JSONRenderer (with format_exc_info) or ConsoleRenderer make of `event_dict`."""
    event_dict = dict(event_dict)
    event_dict["level"] = _LEVEL_NAMES.get(method, method)
    now = time.time()
    event_dict["timestamp"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
    exc_info = _exc_info(event_dict.pop("exc_info", None))
    if json_lines:
        if exc_info is not None:
            event_dict["exception"] = _format_exception(exc_info)
        return json.dumps(event_dict, default=_json_fallback)
    return _console_line(event_dict, exc_info, colors)


def _console_line(event_dict: dict[str, Any], exc_info: Any, colors: bool) -> str:
    reset, bright = (_RESET, _BRIGHT) if colors else ("", "")
    exception = event_dict.pop("exception", None)
    level = str(event_dict.pop("level"))
    level_style = _LEVEL_STYLES.get(level, "") + bright if colors else ""
    columns = [f"{_DIM if colors else ''}{event_dict.pop('timestamp')}{reset}",
               f"[{level_style}{level.ljust(_LEVEL_WIDTH)}{reset}]"]
    if "event" in event_dict:
        columns.append(f"{bright}{str(event_dict.pop('event')).ljust(_EVENT_WIDTH)}{reset}")
    key_style, value_style = (_KEY_STYLE, _VALUE_STYLE) if colors else ("", "")
    columns += [f"{key_style}{key}{reset}={value_style}{_value_text(value)}{reset}" for key, value in
                sorted(event_dict.items())]
    line = " ".join(column for column in columns if column).rstrip(" ")
    if exc_info is not None:
        line += "\n" + _format_exception(exc_info)
    elif exception is not None:
        line += "\n" + str(exception)
    return line


def _value_text(value: Any) -> str:
    if isinstance(value, str) and not (_QUOTED & set(value)):
        return value
    return repr(value)


def _exc_info(value: Any) -> tuple[Any, Any, Any] | None:
    if isinstance(value, BaseException):
        return (type(value), value, value.__traceback__)
    if isinstance(value, tuple) and len(value) == 3 and isinstance(value[1], BaseException):
        return value
    if value:
        current = sys.exc_info()
        return None if current[0] is None else current
    return None


def _format_exception(exc_info: tuple[Any, Any, Any]) -> str:
    import traceback

    return "".join(traceback.format_exception(*exc_info)).rstrip("\n")


def _json_fallback(value: Any) -> Any:
    try:
        return value.__structlog__()
    except AttributeError:
        return repr(value)


# -- structlog, where something imports it ------------------------------------------------
class _Render:
    """The last structlog processor: the event dict rendered as netdoctor renders it."""

    def __call__(self, logger: Any, method: str, event_dict: dict[str, Any]) -> str:
        return render(method, event_dict, json_lines=_settings.json, colors=_settings.colors)


def _configure_structlog(structlog: Any) -> None:
    structlog.configure(
        processors=[_Render()],
        wrapper_class=structlog.make_filtering_bound_logger(_settings.level),
        logger_factory=structlog.PrintLoggerFactory(file=_settings.stream),
        # Not cached: tests and repeated CLI runs in one process reconfigure the stream.
        cache_logger_on_first_use=False,
    )


class _ConfigureOnImport:
    """A meta path finder that configures structlog as soon as something imports it."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "structlog":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                _configure_after(spec.loader)
                return spec
        return None


def _configure_after(loader: Any) -> None:
    run = loader.exec_module

    def exec_module(module: Any) -> None:
        run(module)
        if _settings.level is not None:
            _configure_structlog(module)

    loader.exec_module = exec_module


_ON_IMPORT = _ConfigureOnImport()


class _CurrentStderr:
    """Whatever sys.stderr is at write time: test runners and embedders swap it (and close
    the old one), and a logger bound to a closed stream would crash the run."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()
