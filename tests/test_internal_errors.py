"""CONTRACT 6.5: a finding that exists because netdoctor itself failed carries
`"internal": true` beside its `unknown`; judgements of the node never do."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NODE = REPO / "tests" / "fixtures" / "nodes" / "dgx-h100-no-ibstat"
CRASHING = """
from netdoctor.checks import check

@check("zz-crash", "raises")
def crash(ctx):
    raise ZeroDivisionError("a bug in a check")
    yield
"""


def check_json(*extra: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "netdoctor", "check", "--no-probe", "--format", "json",
                           "--snapshot", str(NODE), *extra], capture_output=True, text=True, timeout=120, cwd=REPO)
    return json.loads(done.stdout)


def plugin_dir(tmp_path: Path, **files: str) -> Path:
    directory = tmp_path / "plugins"
    directory.mkdir()
    for name, text in files.items():
        (directory / f"{name}.py").write_text(textwrap.dedent(text))
    for path in (tmp_path, directory):
        path.chmod(0o755)
    return directory


def test_a_crashing_check_is_internal(tmp_path: Path) -> None:
    report = check_json("--plugin-dir", str(plugin_dir(tmp_path, crashing=CRASHING)))
    crashed = [finding for finding in report["findings"] if finding["check"] == "zz-crash"]
    assert crashed == [{**crashed[0], "status": "unknown", "internal": True}]
    assert "check crashed: ZeroDivisionError" in crashed[0]["summary"]
    assert not [finding for finding in report["findings"] if finding["check"] != "zz-crash" and "internal" in finding]


def test_a_plugin_that_fails_to_load_is_internal(tmp_path: Path) -> None:
    report = check_json("--plugin-dir", str(plugin_dir(tmp_path, broken="raise ImportError('no such library')\n")))
    problems = [finding for finding in report["findings"] if finding["check"] == "plugins"]
    assert len(problems) == 1 and problems[0]["status"] == "unknown" and problems[0]["internal"] is True


def test_judgements_of_the_node_are_not_internal() -> None:
    # dgx-h100-no-ibstat: the tool is missing on the node, a real "could not judge" about the node.
    report = check_json()
    assert report["findings"] and not any("internal" in finding for finding in report["findings"])


def test_a_crashed_run_report_is_internal(tmp_path: Path) -> None:
    # A rule pack that is not TOML is bad input (not internal); an exception from the runner is internal.
    bad_pack = tmp_path / "bad.toml"
    bad_pack.write_text("this is [not toml\n")
    report = check_json("--rules", str(bad_pack))
    assert report["grade"] == "unknown"
    assert not any(finding.get("internal") for finding in report["findings"])
    boom = tmp_path / "sitecustomize.py"
    boom.write_text("import netdoctor.run\n"
                    "def _boom(*args, **kwargs):\n    raise ZeroDivisionError('a bug in the runner')\n"
                    "netdoctor.run.run_check = _boom\n")
    done = subprocess.run([sys.executable, "-m", "netdoctor", "check", "--no-probe", "--format", "json",
                           "--snapshot", str(NODE)], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"})
    report = json.loads(done.stdout)
    assert done.returncode == 3
    assert report["findings"][0]["internal"] is True and report["findings"][0]["status"] == "unknown"
