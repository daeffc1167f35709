"""parse_nccl_log and parse_nccl_tests on every corpus file and on the device captures."""

from __future__ import annotations

from pathlib import Path

import pytest

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.parsers.nccl import parse_nccl_log
from netdoctor.parsers.nccl_tests import parse_nccl_tests
from tests.corpus_util import corpus_dir, corpus_files

DEVICE = Path(__file__).parent / "data" / "device" / "nvidia-h200-x2"


def read(kind: str, name: str) -> str:
    return (corpus_dir(kind) / name).read_text(encoding="utf-8", errors="replace")


@pytest.mark.parametrize("path", corpus_files("nccl-tests") + corpus_files("nccl-log"), ids=lambda path: path.name)
def test_every_corpus_file_parses_or_says_nothing(path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        runs = parse_nccl_tests(text)
    except NothingToParse:
        runs = []
    for run in runs:
        assert run.rows, path.name
        assert all(row.out_of_place.busbw_gbps >= 0 for row in run.rows)
    try:
        facts = parse_nccl_log(text)
    except NothingToParse:
        facts = None
    assert runs or facts is not None, f"{path.name}: neither a table nor NCCL log lines"


# -- nccl-tests ---------------------------------------------------------------------------

def test_modern_format_with_version_and_several_collectives() -> None:
    runs = parse_nccl_tests(read("nccl-tests", "xxrjun-nccl-tests-cluster__nccl_N10_G8.log.txt"))
    assert [run.collective for run in runs] == ["all_reduce_perf", "all_gather_perf", "reduce_scatter_perf",
                                                "alltoall_perf", "sendrecv_perf"]
    all_reduce = runs[0]
    assert all_reduce.version == "2.17.8"
    assert all_reduce.ranks == 80
    assert all_reduce.avg_busbw_gbps == pytest.approx(265.631)
    assert all_reduce.out_of_bounds == 0
    first = all_reduce.rows[0]
    assert (first.size, first.count, first.data_type, first.redop, first.root) == (33554432, 4194304, "double", "sum", -1)
    assert first.out_of_place.time_us == pytest.approx(798.52)
    assert first.out_of_place.wrong == 0
    assert all_reduce.largest is not None and all_reduce.largest.size == 17179869184
    assert all_reduce.largest.out_of_place.busbw_gbps == pytest.approx(320.54)
    assert all_reduce.peak_busbw_gbps == pytest.approx(344.87)


def test_rows_cut_by_interleaved_info_lines_are_reassembled() -> None:
    run = parse_nccl_tests(read("nccl-tests", "Timez-zx-nccl-tests__nccl-fault.log.txt"))[0]
    assert len(run.rows) == 11
    first = run.rows[0]
    assert first.size == 8388608 and first.redop == "sum" and first.root == -1
    assert first.out_of_place.time_us == pytest.approx(314.7)
    assert first.out_of_place.busbw_gbps == pytest.approx(26.66)
    assert first.in_place is not None and first.in_place.time_us == pytest.approx(310.8)
    assert run.largest is not None and run.largest.out_of_place.busbw_gbps == pytest.approx(28.55)
    assert run.avg_busbw_gbps == pytest.approx(28.2632)


def test_full_info_log_table() -> None:
    run = parse_nccl_tests(read("nccl-log", "Timez-zx-nccl-tests__nccl.log.txt"))[0]
    assert [row.size for row in run.rows][:2] == [8388608, 16777216]
    assert run.largest is not None and run.largest.out_of_place.busbw_gbps == pytest.approx(216.6)
    assert run.rows[0].in_place is not None and run.rows[0].in_place.busbw_gbps == pytest.approx(103.59)


def test_markdown_ate_the_hash_signs() -> None:
    run = parse_nccl_tests(read("nccl-tests", "lessizzmore-create-a3mega-ztan-fork__ztan-NCCL-test-result.txt"))[0]
    assert run.threads == 1 and run.gpus_per_thread == 1
    assert run.ranks == 16
    assert len(run.rows) == 31
    assert run.largest is not None and run.largest.out_of_place.busbw_gbps == pytest.approx(338.82)
    assert run.avg_busbw_gbps == pytest.approx(70.742)


def test_old_format_error_column_and_stray_info_line() -> None:
    run = parse_nccl_tests(read("nccl-tests", "microsoft-superbenchmark__nccl_allreduce.log.txt"))[0]
    assert run.gpus_per_thread == 8 and run.ranks == 8
    assert len(run.rows) == 34
    row = next(row for row in run.rows if row.size == 268435456)
    assert row.redop == "sum" and row.root is None
    assert row.out_of_place.busbw_gbps == pytest.approx(222.40)
    assert row.out_of_place.wrong is None and row.out_of_place.error is None   # `N/A`
    assert run.avg_busbw_gbps == pytest.approx(68.4048)


def test_old_alltoall_has_an_empty_redop_column() -> None:
    run = parse_nccl_tests(read("nccl-tests", "microsoft-superbenchmark__nccl_alltoall.log.txt"))[0]
    row = next(row for row in run.rows if row.size == 536870912)
    assert row.redop is None and row.root is None
    assert row.out_of_place.algbw_gbps == pytest.approx(240.04)
    assert row.in_place is not None and row.in_place.busbw_gbps == pytest.approx(213.78)


def test_old_broadcast_has_a_root_column() -> None:
    run = parse_nccl_tests(read("nccl-tests", "microsoft-superbenchmark__nccl_broadcast.log.txt"))[0]
    assert {row.root for row in run.rows} == {0}
    assert all(row.redop is None for row in run.rows)
    assert run.avg_busbw_gbps == pytest.approx(64.8653)


def test_author_edited_table_with_underscore_separators() -> None:
    run = parse_nccl_tests(read("nccl-tests", "stas00-ml-engineering__network-README_all_reduce_perf_A100_edited.txt"))[0]
    assert len(run.rows) == 20
    assert run.rows[0].size == 32768
    assert run.largest is not None and run.largest.size == 17179869184
    assert run.largest.out_of_place.busbw_gbps == pytest.approx(234.89)
    assert run.avg_busbw_gbps is None


def test_pairwise_alltoall_with_na_in_place() -> None:
    slow = parse_nccl_tests(read("nccl-tests", "xxrjun-nccl-tests-cluster__nccl_N2_G5_cnode4-007_cnode4-012.log.txt"))
    healthy = parse_nccl_tests(read("nccl-tests", "xxrjun-nccl-tests-cluster__nccl_N2_G5_cnode4-005_cnode4-008.log.txt"))
    assert slow[0].collective == "alltoall_perf" and slow[0].avg_busbw_gbps == pytest.approx(7.98222)
    assert healthy[0].avg_busbw_gbps == pytest.approx(56.1436)
    assert slow[0].rows[0].in_place is not None and slow[0].rows[0].in_place.wrong is None
    assert slow[1].collective == "sendrecv_perf" and slow[1].avg_busbw_gbps == pytest.approx(20.522)


def test_wrong_values_and_out_of_bounds_are_counted() -> None:
    text = ("# nThread 1 nGpus 2 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n"
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
            "           8             2     float     sum      -1    10.00    0.00    0.00      3    10.00    0.00    0.00      0\n"
            "# Out of bounds values : 2 FAILED\n# Avg bus bandwidth    : 0.00\n")
    run = parse_nccl_tests(text)[0]
    assert run.wrong == 5
    assert run.out_of_bounds == 2


def test_nothing_and_garbage() -> None:
    with pytest.raises(NothingToParse):
        parse_nccl_tests("")
    with pytest.raises(NothingToParse):
        parse_nccl_tests("hello\nworld\n")
    bad = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
           "           8             2     float     sum      -1    abc    0.00    0.00      0    10.00    0.00    0.00      0\n")
    with pytest.raises(ParseError) as caught:
        parse_nccl_tests(bad)
    assert caught.value.line_number == 2


# -- NCCL debug logs ------------------------------------------------------------------------

def test_device_capture_nvlink() -> None:
    facts = parse_nccl_log((DEVICE / "nccl-info-allreduce-2gpu.log").read_text(encoding="utf-8"))
    assert facts.version == "2.28.9+cuda13.0"
    assert facts.cuda_driver_version == 13000
    assert facts.transport_kinds == ("P2P",)
    assert facts.channels == 24 and facts.ring_channels == 24 and facts.nvls_channels == 0
    assert {connection.via for connection in facts.connections} == {"P2P/direct pointer"}
    assert len(facts.connections) == 48
    assert facts.nvlink_between_gpus is True
    assert facts.graphs[0].path_type == "NVL/PIX" and facts.graphs[0].channels == 12
    assert facts.gpu_paths[("GPU/0-60", "GPU/0-70")] == "NVL"
    assert facts.network == "Socket"
    assert facts.net_devices[0].name == "eth0" and facts.net_devices[0].plugin == "Socket"
    assert facts.gdr_enabled("IB") is None
    assert facts.environment == {"NCCL_NVLS_ENABLE": "0"}
    assert facts.ranks == 2 and facts.nodes == 1 and facts.init_complete
    assert facts.errors == ()


def test_device_capture_p2p_disabled_falls_back_to_shm() -> None:
    facts = parse_nccl_log((DEVICE / "nccl-info-allreduce-2gpu-p2p-disabled.log").read_text(encoding="utf-8"))
    assert facts.transport_kinds == ("SHM",)
    assert facts.channels == 4
    assert facts.connections[0].via == "SHM/direct/direct" and facts.connections[0].gdr is None
    assert facts.nvlink_between_gpus is False
    assert facts.environment["NCCL_P2P_DISABLE"] == "1"


def test_roce_log_gdr_disabled_per_hca() -> None:
    facts = parse_nccl_log(read("nccl-log", "Timez-zx-nccl-tests__nccl.log.txt"))
    assert facts.version == "2.27.7+cuda13.0"
    assert facts.network == "IB"
    assert [(device.name, device.port, device.link_layer) for device in facts.net_devices] == [
        ("mlx5_0", 1, "RoCE"), ("mlx5_1", 1, "RoCE")]
    assert {state.device: state.enabled for state in facts.gdr} == {"mlx5_0": False, "mlx5_1": False,
                                                                    "mlx5_0+mlx5_1": False}
    assert facts.gdr_enabled("IB") is False
    assert facts.transport_kinds == ("P2P",)
    assert {connection.via for connection in facts.connections} == {"P2P/direct pointer/read"}
    assert facts.nvlink_between_gpus is True


def test_fault_log_has_two_channels() -> None:
    facts = parse_nccl_log(read("nccl-tests", "Timez-zx-nccl-tests__nccl-fault.log.txt"))
    assert facts.channels == 2
    assert "NCCL_TOPO_FILE" in facts.environment


def test_warn_wrapped_over_two_lines_and_error_propagation() -> None:
    facts = parse_nccl_log(read("nccl-log", "stas00-ml-engineering__debug-pytorch_azure-ib-roce-completion-error.txt"))
    assert [(device.name, device.link_layer) for device in facts.net_devices] == [("ibP111p0s0", "IB"),
                                                                                  ("rdmaP1111p0s2", "RoCE")]
    warning = facts.warnings[0]
    assert warning.location == "transport/net_ib.cc:1296"
    assert warning.message.endswith("with error 12, opcode 0, len 0, vendor err 129 (Recv)")
    assert warning.host == "node-2" and warning.pid == 5776
    assert len(facts.errors) == 4
    assert facts.errors[-1].message == "proxy.cc:858 -> 6 [Proxy Thread]"


def test_trimmed_using_lines() -> None:
    facts = parse_nccl_log(read("nccl-log", "stas00-ml-engineering__network-debug-README_net-using-lines.txt"))
    plugins = {device.plugin for device in facts.net_devices}
    assert plugins == {"FastSocket", "IB", "Socket"}
    ib = [device for device in facts.net_devices if device.plugin == "IB"]
    assert ib[-1].name == "mlx5_bond_0" and ib[-1].link_layer == "RoCE"
    fast = [device for device in facts.net_devices if device.plugin == "FastSocket"]
    assert len(fast) == 8 and fast[0].address == "10.0.19.12"


def test_old_style_ring_lines_and_gdrdma_channels() -> None:
    text = ("n1:1:2 [0] NCCL INFO Ring 00 : 3 -> 10 [send] via NET/IB/0/GDRDMA\n"
            "n1:1:2 [0] NCCL INFO Channel 01/0 : 1[1] -> 8[0] [receive] via NET/IB/2(3)/GDRDMA\n"
            "n1:1:2 [0] NCCL INFO Channel 02/0 : 1[1] -> 8[0] [receive] via NET/IB/0\n")
    facts = parse_nccl_log(text)
    assert [connection.kind for connection in facts.connections] == ["NET/IB", "NET/IB", "NET/IB"]
    assert [connection.gdr for connection in facts.connections] == [True, True, False]
    assert facts.connections[0].direction == "send"
    assert facts.gdr_enabled("IB") is True


def test_no_log_lines() -> None:
    with pytest.raises(NothingToParse):
        parse_nccl_log("just text\n")


# -- network transports between nodes, on real public multi-node logs ----------------------

def test_gdr_used_by_one_node_and_not_the_other_names_the_host() -> None:
    facts = parse_nccl_log(read("nccl-log", "nccl-tests-issue-152__gdrdma-one-side-only.txt"))
    assert facts.gdr_hosts() == {"gpu32": True, "gpu37": False}
    assert facts.net_transport() == "NET/IB"          # not every channel used GPUDirect RDMA


def test_old_ring_lines_and_the_per_gpu_gdr_disabled_line() -> None:
    facts = parse_nccl_log(read("nccl-log", "nv_peer_memory-issue-56__ring-net-ib-gdr-disabled-distance.txt"))
    assert facts.net_transport() == "NET/IB"
    assert facts.gdr_hosts() == {"master_node": False, "secondary_node": False}
    assert {(state.host, state.hca_index, state.enabled) for state in facts.gdr} == {
        ("master_node", 0, False), ("secondary_node", 0, False)}
    assert facts.gdr_enabled() is False


def test_gdrdma_between_two_nodes_with_the_per_gpu_enabled_line() -> None:
    facts = parse_nccl_log(read("nccl-log", "nccl-tests-issue-350__gdrdma-enabled-for-gpu-2-nodes.txt"))
    assert facts.net_transport() == "NET/IB/GDRDMA"
    assert [(state.hca_index, state.enabled) for state in facts.gdr] == [(1, True)]
    assert facts.coll_channels == 2


def test_socket_transport_between_pods() -> None:
    facts = parse_nccl_log(read("nccl-log", "esm2-worker__net-socket-4-ranks.txt"))
    assert facts.net_transport() == "NET/Socket"
    assert facts.gdr_hosts() == {"esm2-worker-0": False}


def test_collnet_sharp_and_the_external_plugin() -> None:
    facts = parse_nccl_log(read("nccl-log", "nccl-tests-issue-311__collnet-sharp-4-nodes.txt"))
    assert facts.net_plugin.endswith("nccl-rdma-sharp-plugins/src/.libs/libnccl-net.so")
    assert facts.network == "IBext_v8"
    assert facts.sharp_used
    assert [(connection.host, connection.via) for connection in facts.collnet][:2] == [
        ("gpu34", "COLLNET/SHARP/1/GDRDMA"), ("gpu41", "COLLNET/SHARP/1/GDRDMA")]
    assert facts.environment["NCCL_COLLNET_ENABLE"] == "1"
    assert (facts.ranks, facts.nodes) == (8, 4)
    assert [device.name for device in facts.net_devices][:2] == ["mlx5_2", "mlx5_0"]


def test_a_plugin_that_loaded_then_failed_leaves_nccls_own_ib_on_gdrdma() -> None:
    facts = parse_nccl_log(read("nccl-log", "sglang-2x8-roce__ofi-plugin-fallback-net-ib-gdrdma.txt"))
    assert facts.net_plugin == "AWS Libfabric (v6)"
    assert facts.net_transport() == "NET/IB/GDRDMA"
    assert facts.transport_kinds == ("NET/IB", "P2P")
    assert facts.version == "2.27.5+cuda12.9"
    assert not facts.sharp_used


def test_algorithm_per_size_from_tuning_lines() -> None:
    facts = parse_nccl_log(read("nccl-log", "Timez-zx-nccl-tests__nccl.log.txt"))
    assert facts.algorithms[8388608] == "RING"
    assert facts.net_plugin_missing       # 'NET/Plugin: Could not find: libnccl-net.so.'
