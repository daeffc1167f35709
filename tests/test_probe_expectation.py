"""The expected-busbw model: NVLink, PCIe, limits, reasoning."""

from __future__ import annotations

import pytest

from netdoctor.probe.expectation import (GpuLinks, expected_busbw, nvlink_version_name, pcie_gbps,
                                         size_text)

GIB = 1 << 30


def h200(index: int, active: int = 18) -> GpuLinks:
    return GpuLinks(index=index, name="NVIDIA H200", nvlink_version="4.0", nvlink_active=active, nvlink_total=18,
                    pcie_gen=5, pcie_width=16)


def test_nvml_enum_is_not_the_version_number() -> None:
    assert nvlink_version_name(6) == "4.0"        # what the H200 reports
    assert nvlink_version_name(4) == "3.0"
    assert nvlink_version_name(None, "NVIDIA A100-SXM4-80GB") == "3.0"
    assert nvlink_version_name(None, "NVIDIA H100 80GB HBM3") == "4.0"
    assert nvlink_version_name(None, "Tesla T4") is None


def test_two_h200_match_the_measurement() -> None:
    expectation = expected_busbw([h200(0), h200(1)], GIB)
    # Measured 330.6 / 328.5 / 332.1 GB/s on nvidia-h200-x2 (benchmarks/results/probe.md).
    assert expectation.busbw_gbps == pytest.approx(331.8, abs=0.1)
    assert expectation.interconnect == "NVLink"
    assert expectation.nominal_gbps == 450
    assert "18 active link(s)" in expectation.reasoning


def test_fewer_active_links_lower_the_expectation_and_name_the_gpu() -> None:
    expectation = expected_busbw([h200(0), h200(1, active=12)], GIB)
    assert expectation.limiting_gpu == 1
    assert expectation.nominal_gbps == 300
    assert "12 of 18" in expectation.reasoning


def test_mesh_without_switch_counts_only_links_to_the_probed_peers() -> None:
    gpus = [GpuLinks(index=i, name="Tesla V100", nvlink_version="2.0", nvlink_active=6, nvlink_peers=2) for i in range(2)]
    assert expected_busbw(gpus, GIB).nominal_gbps == 50


def test_pcie_only_gpus() -> None:
    gpus = [GpuLinks(index=i, name="NVIDIA L40S", nvlink_active=0, pcie_gen=4, pcie_width=16) for i in range(4)]
    expectation = expected_busbw(gpus, GIB)
    assert expectation.interconnect == "PCIe"
    assert expectation.nominal_gbps == pytest.approx(31.5, abs=0.1)
    assert expectation.busbw_gbps == pytest.approx(31.5 * 0.44 * GIB / (GIB + 37 * (1 << 20)), abs=0.2)


def test_pcie_bandwidth_per_generation() -> None:
    assert pcie_gbps(5, 16) == pytest.approx(63.0, abs=0.1)
    assert pcie_gbps(3, 8) == pytest.approx(7.88, abs=0.01)
    assert pcie_gbps(1, 16) == pytest.approx(4.0)
    assert pcie_gbps(None, 16) is None


def test_no_model() -> None:
    assert expected_busbw([h200(0)], GIB).busbw_gbps is None
    unknown = expected_busbw([GpuLinks(index=0), GpuLinks(index=1)], GIB)
    assert unknown.busbw_gbps is None and "GPU0" in unknown.reasoning


def test_smaller_messages_expect_less() -> None:
    large = expected_busbw([h200(0), h200(1)], GIB).busbw_gbps
    medium = expected_busbw([h200(0), h200(1)], 256 << 20).busbw_gbps
    assert large is not None and medium is not None and medium < large
    # Measured 299.1 at 256 MiB; the model stays within 3 %.
    assert medium == pytest.approx(299.1, rel=0.03)


def test_size_text() -> None:
    assert [size_text(size) for size in (1 << 30, 256 << 20, 8192, 6000, 3 << 29)] == [
        "1 GiB", "256 MiB", "8 KiB", "6000 B", "1536 MiB"]
