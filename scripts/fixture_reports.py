"""The JSON report of every fixture node, from this tree or from any git revision, and their diff.

Shows that a refactor changed no finding: run it for the old and the new code and compare.

    python scripts/fixture_reports.py --rev 9915fd3 --rev HEAD      # diff two revisions
    python scripts/fixture_reports.py --rev HEAD -o reports.json     # keep one revision's reports
    python scripts/fixture_reports.py --rev A --rev B --ignore-key snapshot_captured_at --json-only

Each snapshot under tests/fixtures/nodes/ and tests/data/device/ is judged with
`check --no-probe --snapshot` (and `--format text` for the order a person reads) in a
fresh interpreter that imports the packages of that revision (git archive into a temporary
directory). Run times, durations and the netdoctor version are dropped before comparing.
Exit 0 when the reports of the two revisions are identical, 1 when they differ.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
VOLATILE_KEYS = {"started_at", "duration_s", "netdoctor", "generated_at"}
# The text header carries the run time and duration.
TEXT_VOLATILE = re.compile(r"\d+\.\d\d s|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def snapshots() -> list[Path]:
    nodes = sorted(path for path in (REPO / "tests" / "fixtures" / "nodes").iterdir() if path.is_dir())
    return nodes + sorted((REPO / "tests" / "data" / "device").glob("*/capture.tar.gz"))


def tree_of(revision: str, into: Path) -> Path:
    """The revision's packages laid out as they install: netdoctor, netdoctor_plugins, netdoctor_rules."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision, "netdoctor", "plugins", "rules"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    (into / "netdoctor_plugins").symlink_to(into / "plugins")
    (into / "netdoctor_rules").symlink_to(into / "rules")
    return into


def run(tree: Path, args: list[str]) -> str:
    prelude = ("import sys\n"
               "sys.meta_path[:] = [finder for finder in sys.meta_path if 'editable' not in repr(finder)]\n"
               f"sys.path.insert(0, {str(tree)!r})\n"
               "from netdoctor.cli import main\nmain()\n")
    result = subprocess.run([sys.executable, "-c", prelude, *args], capture_output=True, text=True,
                            cwd=tree, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C", "COLUMNS": "200"})
    return result.stdout + f"\n[exit {result.returncode}]"


def _stable(value: Any, ignored: frozenset[str] = frozenset()) -> Any:
    if isinstance(value, dict):
        return {key: _stable(item, ignored) for key, item in value.items()
                if key not in VOLATILE_KEYS and key not in ignored}
    if isinstance(value, list):
        return [_stable(item, ignored) for item in value]
    return value


def reports(tree: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for snapshot in snapshots():
        name = str(snapshot.relative_to(REPO))
        base = ["check", "--no-probe", "--snapshot", str(snapshot)]
        raw = run(tree, [*base, "--format", "json"])
        body, _, code = raw.rpartition("\n")
        try:
            report = _stable(json.loads(body))
            for outcome in report.get("checks", []):
                outcome.pop("duration_s", None)
        except json.JSONDecodeError:
            report = {"unparseable": body}
        text = TEXT_VOLATILE.sub("<t>", run(tree, [*base, "--format", "text"]))
        out[name] = {"json": report, "exit": code, "text": text.replace(str(snapshot), "<snapshot>")}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", action="append", default=[], help="git revision (once to write, twice to diff)")
    parser.add_argument("-o", "--output", type=Path, help="write the (first) revision's reports here")
    parser.add_argument("--ignore-key", action="append", default=[], help="a JSON key an intended change added")
    parser.add_argument("--json-only", action="store_true", help="compare the JSON reports and exit codes only")
    options = parser.parse_args()
    if not 1 <= len(options.rev) <= 2:
        parser.error("give --rev once or twice")
    results = []
    for revision in options.rev:
        with tempfile.TemporaryDirectory() as temporary:
            results.append(reports(tree_of(revision, Path(temporary))))
    if options.output:
        options.output.write_text(json.dumps(results[0], indent=1, sort_keys=True) + "\n")
    if len(results) == 1:
        return 0
    old, new = results
    ignored = frozenset(options.ignore_key)
    forms = ("exit", "json") if options.json_only else ("exit", "json", "text")
    for side in (old, new):
        for entry in side.values():
            entry["json"] = _stable(entry["json"], ignored)
            if options.json_only:
                entry.pop("text", None)
    differing = [name for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)]
    for name in differing:
        print(f"--- {name}")
        for form in forms:
            if old.get(name, {}).get(form) != new.get(name, {}).get(form):
                print(f"  {form} differs:\n    old: {json.dumps(old.get(name, {}).get(form))[:2000]}\n"
                      f"    new: {json.dumps(new.get(name, {}).get(form))[:2000]}")
    print(f"{len(old)} snapshots, {len(differing)} differ between {options.rev[0]} and {options.rev[1]}")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
