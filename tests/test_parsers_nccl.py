"""parse_nccl_log and parse_nccl_tests on every corpus file and on the device captures."""

from __future__ import annotations

from pathlib import Path

import pytest

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.parsers.nccl import network_kind, parse_nccl_log, split_log_lines
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
    # The SHARP plugin initialised and CollNet channels connected, but the log has no TUNING line:
    # nothing says NCCL chose CollNet for a collective, so SHARP is not "used".
    assert facts.sharp_initialized and facts.collnet
    assert not facts.sharp_used and facts.in_network_algorithm() is None
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


# -- cloud network plugins: AWS aws-ofi-nccl (EFA), GCP GPUDirect-TCPX / -TCPXO ---------------

# name -> (Using network, net_transport(), network_kind of the transport or else of the
#          network, GDR on the network channels, the plugin and its version)
CLOUD_LOGS: dict[str, tuple[object, ...]] = {
    # aws-ofi-nccl 1.16.2 on p4d, 4 pods of 1 GPU + 1 EFA: the healthy EFA path.
    "gnosia93-training-on-eks__c7-intra-topology_p4d-4pod-libfabric-gdrdma.txt":
        ("Libfabric", "NET/Libfabric/GDRDMA", "ofi", True, "aws-ofi-nccl 1.16.2"),
    # g6e (L40S): the plugin disables GDR ('Could not disable CUDA API usage for HMEM').
    "gnosia93-training-on-eks__g6e-48xlarge-4pod-1proc_libfabric-gdr-disabled.log":
        ("Libfabric", "NET/Libfabric", "ofi", False, "aws-ofi-nccl 1.16.2"),
    "gnosia93-training-on-eks__a1-karpenter_efa-gdrdma-handshake-failed.txt":
        (None, "NET/Libfabric/GDRDMA", "ofi", True, None),
    # The plugin loads, fails ('Failed to initialize sendrecv protocol'), NCCL falls back to sockets.
    "gnosia93-training-on-eks__a2-ec2-nvlink_p4d-aws-ofi-nccl-1.17.1-socket-fallback.log":
        ("Socket", None, "socket", None, "aws-ofi-nccl 1.17.1"),
    "aws-ofi-nccl-issue-889__p4d-1.14.2-libfabric-2.1-init.txt": (None, None, None, None, "aws-ofi-nccl 1.14.2"),
    "aws-ofi-nccl-issue-889__p4d-gdr-disabled-plugin-failed-socket.txt":
        (None, None, None, None, None),
    "aws-ofi-nccl-issue-715__sagemaker-p4d-1.11.0-aws-init.txt":
        (None, None, None, None, "aws-ofi-nccl 1.11.0-aws"),
    # Plugin <= 1.11 named its network `AWS Libfabric`; 1.4.0 said `Using` instead of `Initializing`.
    "nccl-issue-527__p4d-aws-ofi-nccl-1.4.0aws-aws-libfabric.txt":
        ("AWS Libfabric", None, "ofi", None, "aws-ofi-nccl 1.4.0aws"),
    "aws-ofi-nccl-issue-104__p3dn-via-net-aws-libfabric-no-gdrdma.txt":
        (None, "NET/Libfabric", "ofi", False, None),
    "aws-ofi-nccl-issue-64__p4d-v1.1.2-via-net-aws-libfabric.txt":
        (None, "NET/Libfabric", "ofi", False, None),
    "nccl-issue-1597__p5en-16-nics-libfabric.txt": ("Libfabric", None, "ofi", None, None),
    # The AWS docs' `Selected Provider is efa*` (the docs' wildcard is not part of the name).
    "awsdocs-amazon-ec2-user-guide__efa-start-nccl-base_expected-ofi-lines.txt":
        (None, None, None, None, None),
    "elideng-sg-hypercomputer-internode-deepdive__lab-18_after_tcpx_transport.txt":
        ("GPUDirectTCPX_v7", None, "tcpx", None, None),
    "elideng-sg-hypercomputer-internode-deepdive__lab-18_tcpx_failure_dmabuf_regmr.txt":
        (None, None, None, None, None),
    "skypilot__gcp_gpu_direct_tcpx-readme_success-lines.txt": (None, None, None, None, "GPUDirectTCPX 3.1.8"),
    "elideng-sg-hypercomputer-internode-deepdive__lab-22_tcpxo_transport_fastrak.txt":
        ("FasTrak", None, "tcpxo", None, "FasTrak 1.0.17"),
    # An A3 High node with only its gVNIC: NCCL's own sockets, no plugin.
    "elideng-sg-hypercomputer-internode-deepdive__lab-06_nccl_transport_a3high-socket.txt":
        ("Socket", None, "socket", None, None),
}


@pytest.mark.parametrize("name", sorted(CLOUD_LOGS))
def test_cloud_network_logs(name: str) -> None:
    network, transport, kind, gdr, plugin_version = CLOUD_LOGS[name]
    facts = parse_nccl_log(read("nccl-log", name))
    assert facts.network == network
    assert facts.net_transport() == transport
    assert network_kind(facts.net_transport() or facts.network) == kind
    net_kinds = {connection.kind for connection in facts.connections if connection.kind.startswith("NET/")}
    assert (facts.gdr_enabled(net_kinds.pop().removeprefix("NET/")) if net_kinds else None) == gdr
    assert facts.net_plugin_version == plugin_version


def test_efa_gdrdma_log_in_full() -> None:
    facts = parse_nccl_log(read("nccl-log", "gnosia93-training-on-eks__c7-intra-topology_p4d-4pod-libfabric-gdrdma.txt"))
    assert (facts.version, facts.net_plugin, facts.init_complete) == ("2.27.3+cuda12.9", "Libfabric (v10)", True)
    assert facts.transport_kinds == ("NET/Libfabric",)
    assert {connection.via for connection in facts.connections} == {"NET/Libfabric/0/GDRDMA"}
    assert facts.gdr_hosts() == {"llama-3-8b-node-0-0": True}
    assert (facts.ranks, facts.nodes) == (4, 4)
    assert facts.environment["NCCL_PROTO"] == "simple"    # the plugin's `Adding NCCL_PROTO=simple`
    assert facts.errors == ()


def test_old_aws_libfabric_channel_reads_as_libfabric() -> None:
    facts = parse_nccl_log(read("nccl-log", "aws-ofi-nccl-issue-104__p3dn-via-net-aws-libfabric-no-gdrdma.txt"))
    (connection,) = facts.connections
    assert (connection.via, connection.kind, connection.gdr) == ("NET/AWS Libfabric/0", "NET/Libfabric", False)
    assert (connection.host, connection.direction, connection.source_rank, connection.target_rank) == (
        "ip-10-0-0-157", "receive", 12, 0)
    assert facts.gdr_hosts() == {"ip-10-0-0-157": False}


def test_plugin_failure_then_socket_fallback_keeps_the_warnings() -> None:
    """aws-ofi-nccl prints C++ signatures as the WARN location; those lines are errors, not noise."""
    facts = parse_nccl_log(read("nccl-log", "gnosia93-training-on-eks__a2-ec2-nvlink_p4d-aws-ofi-nccl-1.17.1-socket-fallback.log"))
    assert facts.net_plugin == "Libfabric (v10)"
    assert len(facts.warnings) == 12
    first = facts.warnings[0]
    assert (first.host, first.device, first.location, first.message) == (
        "ip-172-31-3-153", 2, "int nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t**):208",
        "NET/OFI Failed to initialize sendrecv protocol")
    assert any(warning.message == "NET/OFI Initializing plugin failed" for warning in facts.warnings)
    assert {(device.plugin, device.name, device.address) for device in facts.net_devices} == {
        ("Socket", "ens32", "172.31.3.153")}
    assert facts.transport_kinds == ("P2P",)


def test_gdr_required_but_disabled_on_p4d() -> None:
    facts = parse_nccl_log(read("nccl-log", "aws-ofi-nccl-issue-889__p4d-gdr-disabled-plugin-failed-socket.txt"))
    assert [warning.message for warning in facts.warnings][0] == \
        "NET/OFI GDR disabled on GDR-supported instance type p4d.24xlarge"
    assert [warning.location for warning in facts.warnings] == [
        "platform_config_endpoint:626", "nccl_net_ofi_domain_get_ep:969", "nccl_net_ofi_create_plugin:335",
        "nccl_net_ofi_init:155"]
    assert [(device.plugin, device.name, device.address) for device in facts.net_devices] == [
        ("Socket", "eth0", "10.36.29.253")]
    assert facts.network is None          # the paste ends at `Using networ`


def test_efa_handshake_failure_warns_with_a_signature_location() -> None:
    facts = parse_nccl_log(read("nccl-log", "gnosia93-training-on-eks__a1-karpenter_efa-gdrdma-handshake-failed.txt"))
    assert len(facts.warnings) == 2
    warning = facts.warnings[0]
    assert warning.location == ("int cm_req_handle_error_entry(nccl_net_ofi_context_t*, fid_cq*, fi_cq_err_entry*, "
                                "uint16_t):46")
    assert "Error: 4126 (Unresponsive receiver (reachable by EFA device but handshake failed)" in warning.message
    assert any(error.message == "transport/net.cc:753 -> 6" for error in facts.errors)


def test_tcpx_lines_trimmed_to_the_device() -> None:
    facts = parse_nccl_log(read("nccl-log", "elideng-sg-hypercomputer-internode-deepdive__lab-18_after_tcpx_transport.txt"))
    assert facts.errors == ()
    messages, _ = split_log_lines(read("nccl-log", "elideng-sg-hypercomputer-internode-deepdive__lab-18_after_tcpx_transport.txt"))
    assert (messages[0].device, messages[0].message) == (0, "NET/GPUDirectTCPX : GPUDirectTCPX enable: 1")
    assert [message.device for message in messages].count(1) == 4


def test_tcpx_registration_failures() -> None:
    facts = parse_nccl_log(read("nccl-log", "elideng-sg-hypercomputer-internode-deepdive__lab-18_tcpx_failure_dmabuf_regmr.txt"))
    locations = [warning.location for warning in facts.warnings]
    assert locations == ["tcpxResult_t gpu_tx_reg_mr(...):223", "proxy.cc:1501", "tcpxResult_t tcpxRegMr(...):800",
                         "proxy.cc:1535"]
    assert facts.warnings[0].message.startswith("gpu_tx_reg_mr failed -5")
    assert facts.warnings[2].message == "p2pdma api won't work with only RegMr, due to alignment issue"


def test_a3_high_socket_only() -> None:
    facts = parse_nccl_log(read("nccl-log", "elideng-sg-hypercomputer-internode-deepdive__lab-06_nccl_transport_a3high-socket.txt"))
    assert facts.version == "2.22.3+cuda12.6"
    assert [(device.plugin, device.name, device.address) for device in facts.net_devices] == [
        ("Socket", "eth0", "10.128.0.52")]
    assert [(state.plugin, state.device, state.enabled) for state in facts.gdr] == [("Socket", "eth0", False)]
    assert facts.transport_kinds == ("P2P",)


def test_cloud_channel_names_from_the_nccl_format() -> None:
    """Synthetic lines: no public TCPX/TCPXO channel line, nor one through the `OFI` alias or with
    NCCL 2.2x's `/GDRDMA(PCI)`, was found with provenance. They are built from NCCL's format
    (src/transport/net.cc: `Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s`, the
    plugin's name, `/GDRDMA`, `(PCI)` when GDR goes through PCI) with the names the plugins
    register: `GPUDirectTCPX_v7` (nccl-plugin-gpudirecttcpx src/nccl_plugin.cc), `FasTrak`
    (nccl-plugin-gpudirect-tcpxo), `OFI` (aws-ofi-nccl renames itself when NCCL_NET=OFI)."""
    def transport(via: str) -> tuple[str | None, str | None]:
        facts = parse_nccl_log(f"h1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via {via}\n")
        return facts.net_transport(), network_kind(facts.net_transport())

    assert transport("NET/GPUDirectTCPX_v7/0") == ("NET/GPUDirectTCPX", "tcpx")
    assert transport("NET/GPUDirectTCPX_v7/3/GDRDMA") == ("NET/GPUDirectTCPX/GDRDMA", "tcpx")
    assert transport("NET/FasTrak/1/GDRDMA") == ("NET/FasTrak/GDRDMA", "tcpxo")
    assert transport("NET/OFI/0/GDRDMA") == ("NET/Libfabric/GDRDMA", "ofi")
    assert transport("NET/IB/0/GDRDMA(PCI)") == ("NET/IB/GDRDMA", "ib")
    assert transport("NET/IB/0/GDRDMA(PCI)/Shared") == ("NET/IB/GDRDMA", "ib")


@pytest.mark.parametrize(("transport", "kind"), [
    (None, None), ("", None), ("P2P", None), ("NET/Unknown", None),
    ("NET/IB", "ib"), ("NET/IB/GDRDMA", "ib"), ("IB", "ib"), ("IBext_v8", "ib"),
    ("NET/Socket", "socket"), ("Socket", "socket"), ("FastSocket", "socket"),
    ("NET/Libfabric/GDRDMA", "ofi"), ("Libfabric", "ofi"), ("AWS Libfabric", "ofi"), ("NET/AWS Libfabric", "ofi"),
    ("GPUDirectTCPX_v7", "tcpx"), ("NET/GPUDirectTCPX/GDRDMA", "tcpx"),
    ("FasTrak", "tcpxo"), ("NET/FasTrak", "tcpxo"),
])
def test_network_kind(transport: str | None, kind: str | None) -> None:
    assert network_kind(transport) == kind


# -- SHARP "used" means NCCL chose an in-network algorithm for a measured size ------------------

def test_sharp_used_only_where_nccl_chose_collnet_for_a_size() -> None:
    log = read("nccl-log", "nccl-tests-issue-311__collnet-sharp-4-nodes.txt")
    # A TUNING line in the format of NCCL src/enqueue.cc (INFO NCCL_TUNING, rank 0; ncclAlgoToString
    # names CollNetDirect `COLLNET_DIRECT`), on the capture's own host prefix.
    tuned = log + ("gpu34:23654:23654 [0] NCCL INFO AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE "
                   "channel{Lo..Hi}={0..1}\n"
                   "gpu34:23654:23654 [0] NCCL INFO AllReduce: 268435456 Bytes -> Algo COLLNET_DIRECT proto SIMPLE "
                   "channel{Lo..Hi}={0..0}\n")
    facts = parse_nccl_log(tuned)
    assert facts.sharp_used
    assert facts.in_network_algorithm([268435456]) == "COLLNET_DIRECT"
    assert facts.in_network_algorithm([4194304]) is None           # that size ran on RING: not SHARP


def test_nvls_chosen_counts_and_ring_does_not() -> None:
    # Lines quoted in NVIDIA/nccl#1906 (NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING, one 8-GPU node).
    facts = parse_nccl_log("h:1:1 [0] NCCL INFO AllGather: 579600 Bytes -> Algo NVLS proto SIMPLE channel{Lo..Hi}={0..15}\n"
                           "h:1:1 [0] NCCL INFO AllGather: 515200 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..23}\n")
    assert facts.algorithms == {579600: "NVLS", 515200: "RING"}
    assert facts.sharp_used and facts.in_network_algorithm([515200]) is None
    ring = parse_nccl_log(read("nccl-log", "Timez-zx-nccl-tests__nccl.log.txt"))
    assert ring.algorithms and not ring.sharp_used


def test_numeric_algorithms_of_older_nccl_are_named() -> None:
    # NCCL 2.23 printed `%s: %ld Bytes -> Algo %d proto %d time %f`, 2.19-2.22 without the function.
    facts = parse_nccl_log("h:1:1 [0] NCCL INFO AllReduce: 8388608 Bytes -> Algo 2 proto 2 time 96.300003\n"
                           "h:1:1 [0] NCCL INFO 1048576 Bytes -> Algo 1 proto 0 time 20.100000\n")
    assert facts.algorithms == {8388608: "COLLNET_DIRECT", 1048576: "RING"}
    assert facts.sharp_used
