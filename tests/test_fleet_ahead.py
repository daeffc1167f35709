"""A large saved sweep read in two halves, a forked child taking the second half's blocks ahead
(`netdoctor.fleet.ahead`): every node's verdict, the order and every word are what one process
reading the file whole gives, whatever the file holds around the split, and whether the child
keeps ahead, falls behind or dies. The size threshold is lowered here; the speed is
benchmarks/fleet_report_bench.py's.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netdoctor.fleet import ahead, bounded, collect
from netdoctor.fleet.collect import FleetCollector
from netdoctor.host import forked
from test_fleet_collect import LINK_FAIL, MTU_WARN, make_report, prefixed
from test_fleet_fuzz import sweeps


def pretty(sender: str, grade: str = "pass", indent: int | None = 2, **extra: Any) -> list[str]:
    findings = {"pass": None, "warn": [MTU_WARN], "fail": [LINK_FAIL, MTU_WARN]}.get(grade)
    return prefixed(sender, json.dumps(make_report(sender, grade, findings) | extra, indent=indent))


def honest(first: int, count: int) -> list[str]:
    return [line for index in range(first, first + count)
            for line in pretty(f"n{index}", ("pass", "warn", "fail")[index % 3], indent=(2, 0, None, 2)[index % 4])]


def read(path: Path, *, forked_child: bool) -> list[dict[str, Any]]:
    """Every node as `fleet report` keeps it, the file read in halves or in one piece."""
    collector = FleetCollector()
    if forked_child:
        collector.add_path(path)
    else:
        real = ahead.fork_work
        ahead.fork_work = lambda work: None      # type: ignore[assignment]
        try:
            collector.add_path(path)
        finally:
            ahead.fork_work = real
    return [node.to_json() for node in collector.finish(expected_hosts=["n99"])]


@pytest.fixture
def halves(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Any sweep file is read in halves; counts the chunks the child gave, their blocks, those the
    parent took from the child, the chunks it fed from the child's text and how often it read a
    chunk after all (from a block on: `resumed`), and its own summaries."""
    monkeypatch.setattr(ahead, "MIN_SPLIT_BYTES", 0)
    counted = {"chunks": 0, "blocks": 0, "used": 0, "fed": 0, "resumed": 0, "summarized": 0}
    sent: dict[int, Any] = {}     # (the summaries kept, so that no other takes the id of one freed)
    given_chunk, given_taken, store = ahead.decode_chunk, FleetCollector.feed_taken, FleetCollector._store
    summarize = collect.summarize_report

    def decode_chunk(data: Any) -> Any:
        texts, taken = given_chunk(data)
        counted["chunks"] += 1
        counted["blocks"] += len(taken)
        sent.update((id(entry[3]), entry[3]) for entry in taken)
        return texts, taken

    def feed_taken(self: FleetCollector, *args: Any) -> Any:
        resume = given_taken(self, *args)
        counted["fed"] += 1
        counted["resumed"] += resume is not None
        return resume

    def stored(self: FleetCollector, summary: Any) -> None:
        counted["used"] += id(summary) in sent
        store(self, summary)

    def summarized(*args: Any, **kwargs: Any) -> Any:
        counted["summarized"] += 1
        return summarize(*args, **kwargs)

    monkeypatch.setattr(ahead, "decode_chunk", decode_chunk)
    monkeypatch.setattr(FleetCollector, "feed_taken", feed_taken)
    monkeypatch.setattr(FleetCollector, "_store", stored)
    monkeypatch.setattr(collect, "summarize_report", summarized)
    return counted


@pytest.fixture
def patient(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent waits for the child's next chunk (up to 30 s): it is read in halves however
    loaded the machine, so the child's blocks are used, not only the parent's own."""
    given = forked.ForkedWork.next_message

    def next_message(self: forked.ForkedWork) -> bytes | None:
        deadline = time.monotonic() + 30
        while (message := given(self)) is None and time.monotonic() < deadline and self._descriptor >= 0:
            time.sleep(0.002)
        return message

    monkeypatch.setattr(forked.ForkedWork, "next_message", next_message)


@pytest.mark.parametrize("text_part", [1, ahead._TEXT_PART])
def test_hostile_lines_on_both_sides_of_the_split_are_judged_as_read_whole(tmp_path: Path, halves: dict[str, int],
                                                                          patient: None, monkeypatch: pytest.MonkeyPatch,
                                                                          text_part: int) -> None:
    monkeypatch.setattr(ahead, "_TEXT_PART", text_part)       # 1: the text around the blocks is always sent
    first = (honest(0, 100) + pretty("dup") + pretty("dup", "fail")        # two reports: `invalid`, its lines dropped after
             + pretty("n5", "warn") + ["n7: not json\n", "pdsh@head: n99: ssh exited with exit code 255\n"]
             + pretty("cut")[:5])                                          # never closed: open across the split
    second = (honest(100, 100) + pretty("dup", "pass")                      # a third report of a refused sender
              + pretty("n3", "fail")                                       # a second report, across the halves
              + pretty("cut", "fail")                                      # its lines go to the open report
              + [line for pair in zip(pretty("a1"), pretty("a2", "fail")) for line in pair]   # interleaved
              + pretty("n41", "pass", host="n42")                          # names another host of the sweep
              + pretty("t", "fail")[:-1] + ["t: } and more\n"] + honest(200, 100))
    path = tmp_path / "sweep.out"
    path.write_text("".join(first + second))
    in_halves = read(path, forked_child=True)
    child = dict(halves)
    assert in_halves == read(path, forked_child=False)
    # The child took the second half's blocks (half of its reports are indent=0 or one line: not
    # blocks), and each it took is a report the parent did not read again, but two: dup's third (the
    # parent drops what a refused sender sends) and cut's (the parent's run there is cut's first).
    assert child["chunks"] == 1 and child["blocks"] >= 60 and child["used"] == child["blocks"] - 2
    assert halves["summarized"] - child["summarized"] == child["summarized"] + child["used"]
    # Sent, the text around the blocks is fed as it is, up to dup's block: read from the file from there.
    assert (child["fed"], child["resumed"]) == ((1, 1) if text_part == 1 else (0, 0))


def test_a_block_whose_run_is_dropped_at_once_is_read_from_its_second_line(tmp_path: Path, halves: dict[str, int],
                                                                         patient: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three reports left open, then a report whose first line is longer than theirs together: opening
    it passes the budget of open reports, so it is the one dropped (`invalid`, too large)."""
    monkeypatch.setattr(ahead, "_TEXT_PART", 1)
    monkeypatch.setattr(collect, "PENDING_BUDGET_CHARS", 1000)
    opened = [pretty(f"o{index}")[0] for index in range(3)]
    wide = pretty("wide", "fail")
    wide[0] = wide[0].rstrip("\n") + " " * 1000 + "\n"
    path = tmp_path / "sweep.out"
    path.write_text("".join(honest(0, 60) + opened + honest(60, 40) + wide + honest(100, 60)))
    monkeypatch.setattr(ahead, "PARENT_SHARE", 0.5)
    in_halves = read(path, forked_child=True)
    child = dict(halves)
    assert in_halves == read(path, forked_child=False)
    wide_node = next(node for node in in_halves if node["host"] == "wide")
    assert wide_node["grade"] == "invalid" and "too large" in wide_node["top"]["summary"]
    assert child["resumed"] == 1 and child["used"] == child["blocks"] - 1


@settings(max_examples=max(10, int(os.environ.get("NETDOCTOR_FUZZ_EXAMPLES", "100")) // 10), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(sweep=sweeps(), share=st.floats(0.05, 0.95), chunk=st.sampled_from([500, 4096, 1 << 22]),
       text_part=st.sampled_from([1, ahead._TEXT_PART]))
def test_any_sweep_split_anywhere_is_judged_as_read_whole(tmp_path: Path, halves: dict[str, int], patient: None,
                                                        sweep: tuple[list[str], dict[str, list[str]], set[str]],
                                                        share: float, chunk: int, text_part: int) -> None:
    output, _, _ = sweep
    path = tmp_path / "sweep.out"
    path.write_text("".join(honest(100, 80) + output + honest(200, 80)), encoding="utf-8", errors="surrogatepass", newline="")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ahead, "PARENT_SHARE", share)
        patch.setattr(bounded, "CHUNK_CHARS", chunk)      # each half in one piece, or in many
        patch.setattr(ahead, "_TEXT_PART", text_part)
        assert read(path, forked_child=True) == read(path, forked_child=False)


@pytest.fixture
def slow_child(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The child takes 2 ms more per chunk of 4 KiB, so that the parent catches up with it and takes
    the last half of what it has left, again and again (each at most 8 KiB, down to a line); counts those takes."""
    monkeypatch.setattr(bounded, "CHUNK_CHARS", 4096)
    monkeypatch.setattr(ahead, "_MIN_TAKEN_BYTES", 1)            # (a line inside the chunk the child reads: across it)
    monkeypatch.setattr(ahead, "_MAX_TAKEN_BYTES", 8192)
    parent, given_blocks, given_take = os.getpid(), ahead._blocks_in, ahead._SecondPart._take_last_half
    counted = {"taken": 0}

    def blocks_in(*args: Any) -> Any:
        if os.getpid() != parent:
            time.sleep(0.002)
        return given_blocks(*args)

    def take_last_half(self: Any, *args: Any) -> Any:
        middle = given_take(self, *args)
        counted["taken"] += middle is not None
        time.sleep(0.01)      # (time for the child to end the chunk it reads: mostly one across `middle`)
        return middle

    monkeypatch.setattr(ahead, "_blocks_in", blocks_in)
    monkeypatch.setattr(ahead._SecondPart, "_take_last_half", take_last_half)
    return counted


@pytest.mark.parametrize("text_part", [1, ahead._TEXT_PART])
def test_where_the_child_is_behind_the_parent_takes_the_last_half_of_what_is_left(
        tmp_path: Path, halves: dict[str, int], slow_child: dict[str, int], monkeypatch: pytest.MonkeyPatch,
        text_part: int) -> None:
    monkeypatch.setattr(ahead, "_TEXT_PART", text_part)
    monkeypatch.setattr(ahead, "PARENT_SHARE", 0.2)
    hostile = (pretty("dup") + pretty("dup", "fail") + pretty("open")[:4]
               + [line for pair in zip(pretty("a1"), pretty("a2", "fail")) for line in pair] + pretty("open", "fail"))
    path = tmp_path / "sweep.out"
    path.write_text("".join(honest(0, 150) + hostile + honest(150, 150) + hostile[::-1] + honest(300, 150)))
    in_halves = read(path, forked_child=True)
    child, taken = dict(halves), slow_child["taken"]
    assert in_halves == read(path, forked_child=False)
    assert taken >= 1 and child["chunks"] >= 1 and child["used"] > 0       # both took part


def test_a_dead_child_leaves_the_rest_to_the_parent_which_takes_no_more_than_its_share(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the parent takes from the end waits in memory, outside the budget: bounded in all,
    however often it finds no chunk from the child (here: none ever)."""
    monkeypatch.setattr(ahead, "MIN_SPLIT_BYTES", 0)
    monkeypatch.setattr(bounded, "CHUNK_CHARS", 4096)
    monkeypatch.setattr(ahead, "_MIN_TAKEN_BYTES", 8192)
    monkeypatch.setattr(ahead, "_MAX_TAKEN_BYTES", 20_000)
    monkeypatch.setattr(ahead, "_take_ahead", lambda *args: os._exit(1))
    given, spans = ahead._chunks_taken, []

    def chunks_taken(descriptor: int, start: int, stop: int | None, source: str) -> Any:
        spans.append((start, stop))
        return given(descriptor, start, stop, source)

    monkeypatch.setattr(ahead, "_chunks_taken", chunks_taken)
    path = tmp_path / "sweep.out"
    path.write_text("".join(honest(0, 300)))
    assert read(path, forked_child=True) == read(path, forked_child=False)
    taken = sum(stop - start for start, stop in spans)
    assert spans and taken <= 20_000 + 2 * ahead._WINDOW_BYTES, spans


@pytest.mark.parametrize("short", [0, 5, 37, 400])
@pytest.mark.parametrize("behind", [False, True])
def test_a_file_grown_since_its_size_was_taken_is_read_as_whole(tmp_path: Path, halves: dict[str, int], patient: None,
                                                                monkeypatch: pytest.MonkeyPatch, short: int,
                                                                behind: bool) -> None:
    """The size taken at the start may fall inside a line (a sweep still writing): nothing is cut there."""
    monkeypatch.setattr(bounded, "CHUNK_CHARS", 2000)
    if behind:      # the parent takes the last part at once
        monkeypatch.setattr(ahead, "_MIN_TAKEN_BYTES", 1)
        monkeypatch.setattr(ahead, "_MAX_TAKEN_BYTES", 10_000)
        monkeypatch.setattr(forked.ForkedWork, "next_message", lambda self: None)
    path = tmp_path / "sweep.out"
    path.write_text("".join(honest(0, 200)))
    size = path.stat().st_size - short
    monkeypatch.setattr(ahead, "regular_size", lambda descriptor: size)
    assert read(path, forked_child=True) == read(path, forked_child=False)


@settings(max_examples=max(10, int(os.environ.get("NETDOCTOR_FUZZ_EXAMPLES", "100")) // 20), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(sweep=sweeps(), share=st.floats(0.05, 0.6), text_part=st.sampled_from([1, ahead._TEXT_PART]))
def test_any_sweep_with_a_child_behind_is_judged_as_read_whole(tmp_path: Path, halves: dict[str, int],
                                                              slow_child: dict[str, int],
                                                              sweep: tuple[list[str], dict[str, list[str]], set[str]],
                                                              share: float, text_part: int) -> None:
    output, _, _ = sweep
    path = tmp_path / "sweep.out"
    path.write_text("".join(honest(100, 80) + output + honest(200, 80) + output[::-1] + honest(300, 80)),
                    encoding="utf-8", errors="surrogatepass", newline="")
    before = (halves["chunks"], slow_child["taken"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ahead, "PARENT_SHARE", share)
        patch.setattr(ahead, "_TEXT_PART", text_part)
        assert read(path, forked_child=True) == read(path, forked_child=False)
    assert (halves["chunks"], slow_child["taken"]) != before      # read in halves (over 64 KiB: not sniffed whole)


@pytest.mark.parametrize("child", ["slow", "dies"])
def test_a_child_behind_or_dead_leaves_the_work_to_the_parent(tmp_path: Path, halves: dict[str, int],
                                                             monkeypatch: pytest.MonkeyPatch, child: str) -> None:
    def slow(*args: Any) -> None:
        time.sleep(120)

    def dies(*args: Any) -> None:
        raise MemoryError

    monkeypatch.setattr(ahead, "_take_ahead", slow if child == "slow" else dies)
    path = tmp_path / "sweep.out"
    path.write_text("".join(honest(0, 200)))
    started = time.monotonic()
    assert read(path, forked_child=True) == read(path, forked_child=False)
    assert halves["chunks"] == 0
    assert time.monotonic() - started < 60             # the parent never waited for the child


def test_forked_messages_arrive_whole_and_in_order() -> None:
    work = forked.fork_work(lambda send: [send(str(number).encode() * number) for number in range(1, 40)])
    assert work is not None
    received: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(received) < 39 and time.monotonic() < deadline:
        message = work.next_message()
        if message is None:
            time.sleep(0.01)
        else:
            received.append(message)
    work.close()
    assert received == [str(number).encode() * number for number in range(1, 40)]
    assert work.next_message() is None


def test_a_message_half_written_is_not_read(tmp_path: Path) -> None:
    spool = os.open(tmp_path / "spool", os.O_RDWR | os.O_CREAT)
    work = forked.ForkedWork(os.getpid(), spool)
    os.write(spool, forked._HEADER.pack(5) + b"abc")
    assert work.next_message() is None
    os.write(spool, b"de")
    assert work.next_message() == b"abcde"
    assert work.next_message() is None
    os.close(spool)


def test_no_fork_while_another_thread_runs() -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert forked.fork_work(lambda send: None) is None
    finally:
        stop.set()
        thread.join()


def test_a_child_reaped_by_the_kernel_is_no_error(tmp_path: Path) -> None:
    # SIGCHLD ignored, as a parent may leave it: the kernel reaps the child, waitpid finds none.
    import signal
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        work = forked.fork_work(lambda send: time.sleep(60))
        assert work is not None
        descriptors = len(os.listdir("/proc/self/fd"))
        work.close()
        assert len(os.listdir("/proc/self/fd")) == descriptors - 1      # its spool closed
    finally:
        signal.signal(signal.SIGCHLD, previous)


@pytest.mark.parametrize(("groups", "files", "cpus"), [
    ("0::/job/step\n", {"job/cpu.max": "100000 100000\n", "job/step/cpu.max": "max 100000\n"}, 1),   # v2, the job's quota
    ("0::/job\n", {"job/cpu.max": "max 100000\n"}, 2),                                               # v2, none
    ("3:cpu,cpuacct:/docker/abc\n0::/\n", {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "150000\n",   # v1: 1.5 CPUs
                                          "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"}, 1),
    ("3:cpu,cpuacct:/docker/abc\n", {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "-1\n",
                                      "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"}, 2),
    ("garbage\n", {}, 2),
])
def test_usable_cpus_are_the_affinity_at_most_the_cgroup_quota(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               groups: str, files: dict[str, str], cpus: int) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    (tmp_path / "cgroup").write_text(groups)
    for name, text in files.items():
        (tmp_path / "root" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "root" / name).write_text(text)
    assert forked.usable_cpus(str(tmp_path / "cgroup"), str(tmp_path / "root")) == cpus


def rich_report(host: str) -> dict[str, Any]:
    """A report with every part the fleet keeps: rails and their leaves, product, NVLink domain,
    probe, versions, error growth, a failing and a warning finding, non-ASCII and a lone surrogate."""
    report = make_report(host, "fail", [LINK_FAIL, MTU_WARN | {"summary": "MTU 1500 \u00e9\ud800"}], busbw=391.25)
    report["findings"].append({"check": "error-counters", "status": "warn", "subject": "mlx5_0:1", "summary": "grew",
                               "evidence": {"error_growth": 12.5}})
    report["fabric"] = {"gpus": 8, "rails": [{"port": f"mlx5_{k}:1", "rate_gbps": 400.0, "gpu": k} for k in range(4)],
                        "rails_guessed": False, "product": "NVIDIA DGX H100", "gpus_on_bus": 8,
                        "nvlink_domain": {"cluster_uuid": "5c1a3d7e-0000-4000-8000-00000000abcd", "clique_id": 2,
                                          "chassis_serial_number": "1821324000123", "tray_index": 3}}
    report["neighbors"] = {f"mlx5_{k}:1": {"switch_guid": f"0xfc6a1c030000000{k}", "switch_name": f"leaf-{k}"}
                           for k in range(4)}
    report["probe"] = {"busbw_gbps": 391.25, "transport": "NET/IB", "rails": {"mlx5_0": 48.5}, "group": ["a", "b"]}
    report["versions"] = {"kernel": "6.8.0-1015-nvidia", "hca_firmware": {"ConnectX-7": "28.39.1002"}}
    return report


@pytest.mark.parametrize("surrogate", [True, False])
@pytest.mark.parametrize("msgspec", [True, False])
@pytest.mark.parametrize("huge", [False, True])
def test_a_summary_sent_is_the_summary_read_back(monkeypatch: pytest.MonkeyPatch, msgspec: bool, surrogate: bool,
                                                 huge: bool) -> None:
    from netdoctor.fleet import wire
    from netdoctor.fleet.model import NodeGrade, summarize_report
    from netdoctor.fleet.saved import MORE_THAN_ONE, refusal
    from netdoctor.fleet.wire import decode_chunk, encode_chunk
    if not msgspec:
        monkeypatch.setattr(wire, "_pack", None)
    report = rich_report("n1")
    texts = ["n0: {\n", "", "pdsh@head: n9: ssh exited \u00e9\n"]
    if not surrogate:       # (msgpack takes no lone surrogate: that message goes as JSON)
        report["findings"][1]["summary"] = "MTU 1500 \u00e9"
    else:
        texts.append("n8: \ud800\n")
    if huge:                # (past msgpack's 64 bits: that message goes as JSON too)
        report["probe"]["rails"] = {"mlx5_0": 2**64}
    rich = summarize_report(report, "sweep.out", "n1")
    assert rich.rails and rich.platform and rich.nvlink_domain and rich.probe and rich.versions and rich.metrics
    twice = refusal(rich, MORE_THAN_ONE, summarize_report(make_report("n1"), "other.out", "n1"))
    assert twice.reports and twice.grade is NodeGrade.INVALID
    nodes = [rich, twice, summarize_report(make_report("n2"), "", "n2"), summarize_report({"schema": 1}, "", "n3")]
    entries = [(index, f"n{index}: {{\n", index + 10, node) for index, node in enumerate(nodes)]
    sent = encode_chunk(texts, entries)
    assert sent[:1] == (b"M" if msgspec and not surrogate and not huge else b"J")
    assert decode_chunk(sent) == (texts, entries)
    assert [entry[3].to_json() for entry in decode_chunk(sent)[1]] == [node.to_json() for node in nodes]
    assert decode_chunk(encode_chunk(None, [])) == (None, [])


def test_what_nodes_share_is_sent_once_and_read_back_shared_never_merged_with_a_value_only_equal() -> None:
    from dataclasses import replace

    from netdoctor.fleet.model import summarize_report
    from netdoctor.fleet.wire import decode_chunk, encode_chunk
    report = rich_report("n1")
    first = summarize_report(report, "sweep.out", "n1")
    alike = summarize_report(report | {"host": "n2"}, "sweep.out", "n2")
    statuses = dict(reversed(list(first.check_statuses.items())))             # the same checks in another order
    reordered = replace(alike, host="n3", check_statuses=statuses)
    rails = replace(alike, host="n4", rails=((*first.rails[0][:2], 1, *first.rails[0][3:]), *first.rails[1:]))
    nodes = [first, alike, reordered, rails]
    back = [entry[3] for entry in decode_chunk(encode_chunk([], [(0, "", 0, node) for node in nodes]))[1]]
    assert back == nodes and [list(node.check_statuses) for node in back] == [list(node.check_statuses) for node in nodes]
    assert back[0].check_statuses is back[1].check_statuses is back[3].check_statuses is not back[2].check_statuses
    assert back[0].rails is back[1].rails is back[2].rails is not back[3].rails and back[3].rails[0][2] == 1
    assert back[0].versions is back[3].versions and back[0].to_json()["versions"] is not back[0].versions


@pytest.mark.parametrize("msgspec", [True, False])
def test_a_node_read_back_costs_the_budget_what_it_costs_read_whole(monkeypatch: pytest.MonkeyPatch, msgspec: bool) -> None:
    """The charge must not depend on how the file was read: msgpack gives back lists exactly sized
    where the summary's were built by a comprehension (a probe's `group`)."""
    from netdoctor.fleet import wire
    from netdoctor.fleet.budget import node_cost
    from netdoctor.fleet.model import summarize_report
    if not msgspec:
        monkeypatch.setattr(wire, "_pack", None)
    report = rich_report("n1")
    report["probe"]["group"] = [f"n{index}" for index in range(5)]
    node = summarize_report(report, "sweep.out", "n1")
    back = wire.decode_chunk(wire.encode_chunk([], [(0, "", 0, node)]))[1][0][3]
    assert back == node and node_cost(back) == node_cost(node)
    negative = summarize_report(report | {"fabric": {**report["fabric"], "rails": [{"port": "mlx5_0:1", "rate_gbps": -0.0}]}})
    assert str(negative.rails[0][1]) == "0.0"          # one zero: shared with 0.0, either is what the node said
