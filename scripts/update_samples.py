"""Rewrite the sample outputs in README.md and docs/*.md from the real commands, so they cannot drift.

A sample is a marked block; the marker names the arguments after `netdoctor`:

    <!-- sample: check --no-probe --snapshot tests/fixtures/nodes/dgx-h100-port-hdr -->
    ```
    $ netdoctor check --no-probe --snapshot tests/fixtures/nodes/dgx-h100-port-hdr
    (what the command prints on stdout)
    ```
    <!-- /sample -->

    python scripts/update_samples.py            # rewrite every block from the real output
    python scripts/update_samples.py --check    # change nothing; exit 1 naming each block that differs

tests/test_samples.py runs the --check comparison, so a change to the output fails the suite
until the samples are regenerated.

How a sample stays the same from run to run and machine to machine:
* the command runs as `python -m netdoctor ARGS` with this interpreter, from the repository
  root (relative paths, so the clone's location never shows), stdout a pipe (no terminal),
  in a fixed environment: COLUMNS=100, NO_COLOR=1, PATH=/usr/bin:/bin, LC_ALL=C.UTF-8, and
  no other variable (no NETDOCTOR_RULES or NETDOCTOR_STATE);
* the only normalisation: the grade line's run time and start time (`0.21 s
  2026-11-26T15:07:09Z`), which change every run, are written as `<run time>   <start
  time>`. Nothing else is edited; a snapshot's own capture time is fixed by the fixture.
* a machine with site configuration (/etc/netdoctor/rules.toml, /etc/netdoctor/plugins.d)
  would judge differently: the script refuses to run there.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SITE_CONFIG = (Path("/etc/netdoctor/rules.toml"), Path("/etc/netdoctor/plugins.d"))
ENVIRONMENT = {"COLUMNS": "100", "NO_COLOR": "1", "PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
BLOCK = re.compile(r"^<!-- sample: (?P<args>[^\n]*?) -->\n(?P<body>.*?)^<!-- /sample -->$", re.MULTILINE | re.DOTALL)
# The grade line's run time and start time: `   0.21 s   2026-11-26T15:07:09Z` at its end.
_VOLATILE = re.compile(r"(?<=\s)\d+\.\d\d s   \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", re.MULTILINE)
VOLATILE_SHOWN = "<run time>   <start time>"


class SampleError(Exception):
    """A sample that cannot be made: a malformed marker, a command that failed."""


@dataclass(frozen=True)
class Sample:
    file: Path
    args: str        # the arguments after `netdoctor`, as written in the marker
    body: str        # the block between the markers, as it is in the file


def shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def samples(path: Path) -> list[Sample]:
    text = path.read_text(encoding="utf-8")
    found = [Sample(path, match["args"], match["body"]) for match in BLOCK.finditer(text)]
    opened = text.count("<!-- sample:")
    if opened != len(found) or text.count("<!-- /sample -->") != opened:
        raise SampleError(f"{shown(path)}: a `<!-- sample: ... -->` marker without its "
                          "`<!-- /sample -->` (or the other way round)")
    return found


@cache
def real_output(args: str) -> str:
    """What `netdoctor ARGS` prints, run as the module docstring says, normalised."""
    present = [str(path) for path in SITE_CONFIG if path.exists()]
    if present:
        raise SampleError(f"site configuration {', '.join(present)} changes what netdoctor says here; "
                          "the samples show a plain install: make them on a machine without it")
    done = subprocess.run([sys.executable, "-m", "netdoctor", *shlex.split(args)], check=False,
                          capture_output=True, text=True, timeout=120, cwd=REPO, env={**ENVIRONMENT, "PYTHONPATH": str(REPO)})
    if done.returncode not in (0, 1, 2) or not done.stdout:
        raise SampleError(f"`netdoctor {args}` exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    header, blank, rest = done.stdout.partition("\n\n")
    normalised, count = _VOLATILE.subn(VOLATILE_SHOWN, header)
    if args.split()[:1] == ["check"] and count != 1:
        raise SampleError(f"`netdoctor {args}`: no run time and start time in the grade line to normalise:\n{header}")
    return normalised + blank + rest


def expected_body(args: str) -> str:
    return f"```\n$ netdoctor {args}\n{real_output(args)}```\n"


def update(path: Path, *, write: bool) -> list[str]:
    """The samples of `path` that differ from the real output (`netdoctor ARGS` each);
    with `write`, the file is rewritten with the real output."""
    text = path.read_text(encoding="utf-8")
    samples(path)   # malformed markers are an error, never skipped
    drifted: list[str] = []

    def replace(match: re.Match[str]) -> str:
        body = expected_body(match["args"])
        if body != match["body"]:
            drifted.append(match["args"])
        return f"<!-- sample: {match['args']} -->\n{body}<!-- /sample -->"

    new = BLOCK.sub(replace, text)
    if write and new != text:
        path.write_text(new, encoding="utf-8")
    return drifted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a sample differs")
    options = parser.parse_args(argv)
    status = 0
    for path in files():
        try:
            drifted = update(path, write=not options.check)
        except SampleError as error:
            print(f"update_samples: {error}", file=sys.stderr)
            return 2
        for args in drifted:
            verb = "differs from" if options.check else "rewritten from"
            print(f"{shown(path)}: sample `netdoctor {args}` {verb} the real output")
            status = 1 if options.check else status
    if status:
        print("run `python scripts/update_samples.py` to regenerate them", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
