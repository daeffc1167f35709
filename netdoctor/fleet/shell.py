"""What the parallel shell says besides the nodes' reports: timeouts, exit codes, errors.

    pdsh@vm: n2: command timeout
    pdsh@vm: n3: bash exited with exit code 2
    clush: n2: command timeout
    srun: error: n2: task 1: Exited with exit code 2

and the nodes' own stderr (`n2: bash: netdoctor: command not found`). A little of it is
kept per host (bounded), to explain a node that printed no report.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from netdoctor.fleet.model import NodeGrade, NodeSummary, no_report

# How many lines of one host are kept to explain its verdict, and how much of each.
KEPT_LINES = 3
MAX_LINE_CHARS = 200

SHELL_STARTS = ("pdsh@", "clush:", "srun:", "netdoctor-sweep:")
_SHELL_PREFIX = re.compile(
    r"^(?:pdsh@[^:\s]+|clush|srun(?:: error)?|netdoctor-sweep):\s+(?!error:|warning:)(?P<host>[^:\s]+):\s?(?P<message>.*)$"
)
# The shell's own complaint, about no host: `pdsh@vm: Cannot specify -t with "-R exec"`.
_SHELL_ERROR = re.compile(r"^(?P<shell>pdsh@[^:\s]+|clush|srun)(?:: error)?:\s+(?P<message>.*)$")
_EXIT_CODE = re.compile(r"exit(?:ed)? (?:with )?(?:exit )?code (?P<code>\d+)", re.IGNORECASE)
_TIMEOUT = re.compile(r"command timeout|timed out", re.IGNORECASE)
# `pdsh@vm: n3: sh killed by signal 9`: the node's command died (OOM killer, a reboot).
_KILLED = re.compile(r"killed by signal \d+")
# `netdoctor check`'s own exit codes for pass, warn and unknown: the node's report (which
# pdsh has written to stdout before it says how the command exited) grades it.
_NOT_FAILING_CODES = frozenset((0, 1, 3))


def host_done(line: str) -> tuple[str, bool] | None:
    """The host a line of the shell's stderr says is done, and whether that failed; None if
    it says no such thing. What the host itself sent (a report) outranks this: a report may
    still be read after `exited with exit code 1` (the shell's stderr and stdout are read
    apart), and the grade is the report's. Exit codes of netdoctor's pass, warn and unknown
    are no failure; a node that exits so without a report fails only in the fleet report.

        pdsh@vm: n3: sh exited with exit code 2    -> ("n3", True)
        pdsh@vm: n4: sh exited with exit code 1    -> ("n4", False)
        clush: n2: command timeout                 -> ("n2", True)
        n2: command timeout                        -> ("n2", True)   (srun's `timeout`, relabelled)
    """
    line = line.rstrip("\r\n")
    shell = _SHELL_PREFIX.match(line)
    if shell is None:
        host, separator, text = line.partition(": ")
        if separator and host and " " not in host and text.strip() == "command timeout":
            return host, True
        return None
    message = shell["message"]
    if _TIMEOUT.search(message) or _KILLED.search(message):
        return shell["host"], True
    code = _EXIT_CODE.search(message)
    if code:
        return shell["host"], int(code["code"]) not in _NOT_FAILING_CODES
    return None


class ShellMessages:
    """The shell's messages and the nodes' stderr, as far as they explain silent nodes."""

    def __init__(self, asked: frozenset[str], command_timeout_s: float | None) -> None:
        """`asked`: the hosts asked where known; a message naming another is about none."""
        self._asked = asked
        self._command_timeout_s = command_timeout_s
        self._messages: dict[str, list[str]] = {}
        self._timed_out: set[str] = set()
        self._exit_codes: dict[str, int] = {}
        self._errors: list[str] = []
        self._fatal: str | None = None
        self.attributed_lines = 0      # lines that came from the shell or named a host

    def take_shell_line(self, line: str) -> bool:
        """Note `line` if it is the shell's own (`pdsh@vm: ...`); whether it was."""
        line = line.rstrip("\r\n")
        shell = _SHELL_PREFIX.match(line)
        if shell:
            self._note_message(shell["host"], shell["message"], line)
            return True
        if _SHELL_ERROR.match(line):
            self._note_error(line)
            return True
        return False

    def note_stderr(self, host: str, text: str) -> None:
        """A line of a node's own stderr (netdoctor's logs, `command not found`)."""
        if self._asked and host not in self._asked:
            return                     # the shell prefixes only the hosts it was given
        self.attributed_lines += 1
        if text.strip() == "command timeout":
            self._timed_out.add(host)
        self._keep(host, text)

    def note_timeout(self, host: str) -> None:
        self._timed_out.add(host)

    def hosts(self) -> set[str]:
        return set(self._messages) | set(self._timed_out) | set(self._exit_codes)

    def explain(self, host: str) -> NodeSummary:
        """The `unreachable` entry of a host that sent no report."""
        details: list[str] = []
        if host in self._timed_out:
            details.append(f"command timeout after {self._command_timeout_s:g} s" if self._command_timeout_s else "command timeout")
        elif host in self._exit_codes:
            details.append(f"no output, exit code {self._exit_codes[host]}")
        else:
            details.append("no output")
        # After a timeout pdsh adds `bash killed by signal 15`: the timeout already says it.
        messages = [
            message
            for message in self._messages.get(host, [])
            if not _TIMEOUT.search(message) and not (host in self._timed_out and "killed by signal" in message)
        ]
        if messages:
            details.append(messages[0])
        elif self._errors:
            # The shell's `fatal` line says why it gave up; the others lead up to it.
            details.append(self._fatal or self._errors[0])
        return no_report(host, NodeGrade.UNREACHABLE, ": ".join(details))

    def _note_message(self, host: str, message: str, line: str) -> None:
        if self._asked and host not in self._asked:
            # `srun: error: _establish_config_source: ...`: about no host of the sweep.
            self._note_error(line)
            return
        self.attributed_lines += 1
        if _TIMEOUT.search(message):
            self._timed_out.add(host)
        code = _EXIT_CODE.search(message)
        if code:
            self._exit_codes[host] = int(code["code"])
            return
        self._keep(host, message)

    def _note_error(self, line: str) -> None:
        self.attributed_lines += 1
        if len(self._errors) < KEPT_LINES:
            self._errors.append(line[:MAX_LINE_CHARS])
        if self._fatal is None and "fatal" in line:
            self._fatal = line[:MAX_LINE_CHARS]

    def _keep(self, host: str, text: str) -> None:
        messages = self._messages.setdefault(host, [])
        if len(messages) < KEPT_LINES:
            messages.append(text[:MAX_LINE_CHARS])


_TASK_LABEL = re.compile(r"^ *(?P<task>\d{1,9}): ")


def relabelled(lines: Iterator[str], hosts: list[str] | None) -> Iterator[str]:
    """srun's `--label` lines (`  3: text`) as `host: text`, task i being the i-th of `hosts`
    (`--distribution=arbitrary`); srun's own messages as they are. `hosts` None: lines not labelled."""
    if hosts is None:
        yield from lines
        return
    for line in lines:
        label = _TASK_LABEL.match(line)
        if label is None:
            yield line
            continue
        task = int(label["task"])
        if task < len(hosts):
            yield f"{hosts[task]}: {line[label.end():]}"
