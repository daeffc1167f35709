"""`fleet report FILE|DIR`: every per-node file names a node, whatever it holds."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from netdoctor.errors import UsageError
from netdoctor.fleet.collect import FleetCollector
from test_fleet_collect import LINK_FAIL, make_report, prefixed


def _grades(collector: FleetCollector) -> dict[str, tuple[str, str]]:
    return {node.host: (str(node.grade), node.top.summary if node.top else "") for node in collector.finish()}


def test_garbage_and_empty_files_in_a_directory_are_listed_by_file_name(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "good.json").write_text(json.dumps(make_report("node017", "fail", [LINK_FAIL]), indent=2))
    (reports / "bad.json").write_text("garbage\n")
    (reports / "empty.json").write_text("")
    (reports / "blank.out").write_text("\n  \n")
    (reports / "n9.out").write_text("Traceback (most recent call last):\n  File \"x\", line 1\n")
    (reports / "ctl.json").write_text('{"schema": "netdoctor.report/1", "host": "x", "summary": "a\tb"}')
    collector = FleetCollector()
    collector.add_path(reports)
    nodes = _grades(collector)
    assert nodes == {
        "node017": ("fail", "port runs at 200 Gb/s (4X HDR), expected 400 Gb/s (4X NDR)"),
        "bad": ("invalid", f"{reports / 'bad.json'}: not a netdoctor report: 'garbage'"),
        "empty": ("unreachable", f"{reports / 'empty.json'}: empty report file"),
        "blank": ("unreachable", f"{reports / 'blank.out'}: empty report file"),
        "n9": ("invalid", f"{reports / 'n9.out'}: not a netdoctor report: 'Traceback (most recent call last):'"),
        "ctl": ("invalid", f"{reports / 'ctl.json'}: not valid JSON (Invalid control character at line 1 column 60)"),
    }


def test_json_error_summaries_say_at_once() -> None:
    collector = FleetCollector()
    collector.feed_lines(["n1: {\n", 'n1:   "host": "a\tb"\n'])
    (node,) = collector.finish()
    assert node.top is not None
    assert node.top.summary == "incomplete or garbled JSON report (Invalid control character at line 2 column 13)"
    assert " at at " not in node.top.summary


def test_a_saved_sweep_behind_a_login_banner_is_still_read(tmp_path: Path) -> None:
    """pdsh output saved to a file may start with a banner or a warning before `host: line`s."""
    saved = tmp_path / "sweep.out"
    saved.write_text("Authorized use only\n" + "".join(
        f'n{index}: {{"schema": "netdoctor.report/1", "host": "n{index}", "grade": "pass", "findings": []}}\n'
        for index in range(3)))
    collector = FleetCollector()
    collector.add_path(saved)
    assert sorted(_grades(collector)) == ["n0", "n1", "n2"]


def test_a_given_file_of_garbage_is_a_usage_error_and_an_empty_stderr_capture_names_nobody(tmp_path: Path) -> None:
    garbage = tmp_path / "node042.txt"
    garbage.write_text("garbage\nmore garbage\n")
    with pytest.raises(UsageError, match=f"fleet input {garbage} is neither a netdoctor report nor parallel-shell output"
                                         " \\(`host: line`\\); it starts 'garbage'"):
        FleetCollector().add_path(garbage)
    # The same garbage as one node's file of a directory (`srun --output=DIR/%N.out`) is that node's answer.
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "node042.out").write_text("garbage\n")
    collector = FleetCollector()
    collector.add_path(tmp_path / "outputs")
    assert _grades(collector) == {"node042": ("invalid", f"{tmp_path / 'outputs' / 'node042.out'}: not a netdoctor report: 'garbage'")}
    sweep = tmp_path / "sweep.out"
    sweep.write_text("".join(prefixed("n1", json.dumps(make_report("n1")))))
    stderr_capture = tmp_path / "sweep.err"
    stderr_capture.write_text("")
    signals_only = tmp_path / "signals.err"
    signals_only.write_text("sending signal 15 to n2 [bash] pid 8538\n")
    empty_out = tmp_path / "nothing.out"
    empty_out.write_text("")
    collector = FleetCollector()
    for path in (sweep, stderr_capture, signals_only, empty_out):
        collector.add_path(path)
    assert _grades(collector) == {"n1": ("pass", "")}


def test_a_saved_sweep_named_json_is_still_parallel_shell_output(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.json"
    sweep.write_text("".join(prefixed("n1", json.dumps(make_report("n1"), indent=2)) + prefixed("n2", "garbage")))
    collector = FleetCollector()
    collector.add_path(sweep)
    assert _grades(collector) == {"n1": ("pass", ""), "n2": ("invalid", "not a netdoctor report: 'garbage'")}


def test_a_real_report_wins_over_a_broken_file_of_the_same_host(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "n1.json").write_text(json.dumps(make_report("n1")))   # sorted before n1.out
    (reports / "n1.out").write_text("garbage\n")
    (reports / "n2.json").write_text("")
    (reports / "z.json").write_text(json.dumps(make_report("n2", "fail", [LINK_FAIL])))
    collector = FleetCollector()
    collector.add_path(reports)
    nodes = _grades(collector)
    assert nodes == {"n1": ("pass", ""), "n2": ("fail", "port runs at 200 Gb/s (4X HDR), expected 400 Gb/s (4X NDR)")}


def test_cli_lists_every_file_of_a_directory_once(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    for index in range(1, 4):
        (reports / f"n{index}.json").write_text(json.dumps(make_report(f"n{index}"), indent=2))
    (reports / "bad.json").write_text("garbage")
    (reports / "silent.json").write_text("")
    done = subprocess.run([sys.executable, "-m", "netdoctor.fleet", "report", str(reports), "--format", "json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    data = json.loads(done.stdout)
    hosts = [node["host"] for node in data["nodes"]]
    assert sorted(hosts) == ["bad", "n1", "n2", "n3", "silent"]
    assert data["counts"] == {"pass": 3, "warn": 0, "fail": 0, "unknown": 0, "unreachable": 1, "invalid": 1}
    assert "Traceback" not in done.stderr


def _random_sweep(rng: random.Random) -> list[str]:
    """pdsh-like output: reports one line, pretty (indent 0, 2, 4), interleaved, glued, noise."""
    queues: list[list[str]] = []
    for index in range(rng.randrange(1, 9)):
        host = f"h{index}"
        kind = rng.choice(["compact", "pretty", "indent0", "noise", "truncated"])
        report = make_report(host, rng.choice(["pass", "fail"]), [LINK_FAIL] * rng.randrange(0, 3), busbw=400.0 + index)
        if kind == "compact":
            lines = prefixed(host, json.dumps(report))
        elif kind == "noise":
            lines = prefixed(host, "Segmentation fault\nmore")
        else:
            lines = prefixed(host, json.dumps(report, indent=0 if kind == "indent0" else rng.choice([2, 4])))
            if kind == "truncated":
                lines = lines[: len(lines) // 2]
        if rng.random() < 0.2:
            lines.insert(rng.randrange(len(lines) + 1), "\n")
        queues.append(lines)
    if rng.random() < 0.5 and len(queues) > 1 and queues[0][-1].endswith(": }\n"):
        # pdsh glues the next host's line to a report's last line when it had no newline.
        first_of_next = queues[1].pop(0)
        queues[0][-1] = queues[0][-1].rstrip("\n") + first_of_next
    output: list[str] = []
    interleave = rng.random() < 0.5
    while any(queues):
        queue = rng.choice([q for q in queues if q]) if interleave else next(q for q in queues if q)
        output.append(queue.pop(0))
    if rng.random() < 0.3:
        output.insert(rng.randrange(len(output) + 1), "pdsh@vm: h9: command timeout\n")
    return output


def test_saved_files_give_what_line_by_line_feeding_gives(tmp_path: Path, monkeypatch: Any) -> None:
    """The block fast path, with blocks cut at chunk ends, agrees with the line path."""
    import netdoctor.fleet.bounded as bounded

    rng = random.Random(20261122)
    saved = tmp_path / "sweep.out"
    for case in range(300):
        lines = _random_sweep(rng)
        saved.write_text("".join(lines))
        monkeypatch.setattr(bounded, "CHUNK_CHARS", rng.choice([1, 64, 700, 1 << 22]))
        from_file = FleetCollector()
        from_file.add_path(saved)
        by_line = FleetCollector()
        for line in lines:
            by_line.feed_line(line)
        file_nodes = {node.host: (str(node.grade), node.top, dict(node.metrics)) for node in from_file.finish()}
        line_nodes = {node.host: (str(node.grade), node.top, dict(node.metrics)) for node in by_line.finish()}
        assert file_nodes == line_nodes, (case, "".join(lines))


def test_contiguous_pretty_reports_are_decoded_as_whole_blocks(tmp_path: Path, monkeypatch: Any) -> None:
    """The fast path really runs: no report of a plain saved sweep goes line by line."""
    saved = tmp_path / "sweep.out"
    saved.write_text("".join(line for index in range(50)
                             for line in prefixed(f"n{index}", json.dumps(make_report(f"n{index}"), indent=2))))

    def line_by_line(self: FleetCollector) -> None:
        raise AssertionError("a report was reassembled line by line")

    monkeypatch.setattr(FleetCollector, "_close_run", line_by_line)
    collector = FleetCollector()
    collector.add_path(saved)
    assert sorted(node.host for node in collector.finish()) == sorted(f"n{index}" for index in range(50))


def test_cli_a_file_that_is_no_fleet_input_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    """A binary or a random text file given by name: exit 3, one line naming the file (it used to
    list a node named after escaped binary, exit 2)."""
    binary = tmp_path / "core.bin"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) + b"\nUsage: %s [OPTION]\n\x00\x00x: y\n")
    text = tmp_path / "notes.txt"
    text.write_text("# Network services, Internet style\nssh 22/tcp\n")
    report = tmp_path / "n1.json"
    report.write_text(json.dumps(make_report("n1")))
    for path in (binary, text):
        done = subprocess.run([sys.executable, "-m", "netdoctor.fleet", "report", str(report), str(path)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 3 and done.stdout == ""
        assert done.stderr.startswith(f"netdoctor: error: fleet input {path} is neither a netdoctor report nor "
                                      "parallel-shell output (`host: line`); it starts ")
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_a_binary_line_in_shell_output_names_no_host(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.out"
    sweep.write_bytes("".join(prefixed("n1", json.dumps(make_report("n1")))).encode() + b"\x00\x00Usage: %s\n")
    collector = FleetCollector()
    collector.add_path(sweep)
    assert _grades(collector) == {"n1": ("pass", "")}
    assert collector.unattributed_lines == 1


def test_two_report_files_claiming_one_host_are_both_named(tmp_path: Path) -> None:
    long_fail = {**LINK_FAIL, "summary": "port runs at 200 Gb/s (4X HDR), expected 400 Gb/s (4X NDR); " * 8}
    cases = {"both pass": (make_report("n1"), make_report("n1")),
             "one fails at length": (make_report("n1", "fail", [long_fail]), make_report("n1", "fail", [long_fail]))}
    for case, (first, second) in cases.items():
        reports = tmp_path / case.replace(" ", "-")
        reports.mkdir()
        (reports / f"{'n1-from-the-sweep-of-the-twenty-sixth-of-november'}.json").write_text(json.dumps(first))
        (reports / "forged-by-another-node-of-the-same-rack.json").write_text(json.dumps(second))
        done = subprocess.run([sys.executable, "-m", "netdoctor.fleet", "report", str(reports), "--format", "json"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        (node,) = json.loads(done.stdout)["nodes"]
        assert node["host"] == "n1" and node["grade"] == "invalid"
        why = node["top"]["summary"]
        assert why.startswith("more than one report from this sender: ") and len(why) <= 500, case
        for name in ("n1-from-the-sweep-of-the-twenty-sixth-of-november.json", "forged-by-another-node-of-the-same-rack.json"):
            assert f" in {name}" in why, (case, why)
            assert any(entry["file"] == str(reports / name) for entry in node["reports"])
