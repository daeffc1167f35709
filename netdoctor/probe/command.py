"""`netdoctor probe`: run the NCCL probe alone, grade it with the `nccl-probe` check, print it.

The probe grades from NVML facts it gathers itself, so it does not wait for a full
discovery of the node (ibstat, perfquery, ...): `netdoctor probe` takes little more
than the probe's own time.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from netdoctor import __version__
from netdoctor.errors import ParseError, UsageError
from netdoctor.inventory.model import Gpu, Inventory, PcieLink, SourceState, SourceStatus
from netdoctor.parsers import sysfs_values
from netdoctor.probe.engine import DEFAULT_LOCALISE_FRACTION, run_probe
from netdoctor.probe.expectation import size_text
from netdoctor.report.model import Grade, Report, grade_of
from netdoctor.util import canonical_pci_address

CHECK_ID = "nccl-probe"
SYSFS = Path("/sys")
# Probe outcomes that mean "nothing to probe here" (run_probe's reason codes): on them a
# node without GPUs is graded as one (skip), whatever the probe result says.
_NOT_APPLICABLE = {"single-gpu", "no-gpus", "no-driver"}


def parse_gpu_list(text: str | None) -> list[int] | None:
    """`"0,1,3"` -> [0, 1, 3]; None or empty -> None (all GPUs)."""
    if text is None or not text.strip():
        return None
    indices: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise UsageError(f"--gpus {text!r}: expected comma-separated GPU indices such as 0,1,2,3")
        if int(part) in indices:
            raise UsageError(f"--gpus {text!r}: GPU {part} is listed twice")
        indices.append(int(part))
    return indices


def inventory_from_probe(result: dict[str, Any], host: str, captured_at: str) -> Inventory:
    """A GPU-only inventory from the NVML facts the probe gathered (no full discovery).

    Without NVML (pynvml not importable in this Python, say) the GPUs are the ones the
    probe itself ran on (its `devices` from CUDA, else its `gpus` indices): the check must
    grade what the probe measured, not skip the node as GPU-less. When neither NVML nor the
    probe names a GPU and the probe did not find the node GPU-less, the NVML source
    carries the probe's reason as not usable, so the check is `unknown`, never `skip`.
    """
    gpus = []
    for entry in result.get("gpu_links") or []:
        pcie = None
        if entry.get("pcie_gen") or entry.get("pcie_width"):
            pcie = PcieLink(address="", max_gen=entry.get("pcie_gen"), max_width=entry.get("pcie_width"), source="nvml")
        gpus.append(Gpu(index=int(entry["index"]), name=entry.get("name"), pcie=pcie,
                        nvlink_active=entry.get("nvlink_active"), nvlink_total=entry.get("nvlink_total"),
                        sources=("nvml",)))
    sources = {"nvml": SourceStatus("nvml", SourceState.OK if gpus else SourceState.MISSING,
                                    "" if gpus else "no GPUs reported by NVML")}
    not_applicable = result.get("status") == "skipped" and result.get("reason_code") in _NOT_APPLICABLE
    if not gpus and not not_applicable:
        gpus = _gpus_from_probe(result)
        if gpus:
            sources["probe"] = SourceStatus("probe", SourceState.OK, "GPUs named by the probe (CUDA); NVML gave none")
        elif result.get("reason_code") == "budget-too-short":      # refused before NVML or CUDA was asked
            sources["nvml"] = SourceStatus("nvml", SourceState.NOT_RUN, str(result.get("reason")))
        else:
            sources["nvml"] = SourceStatus("nvml", SourceState.ERROR, "no GPUs from NVML, and the probe named none: "
                                           f"{result.get('status')}: {result.get('reason') or 'no reason given'}")
    return Inventory(host=host, captured_at=captured_at, gpus=gpus, sources=sources)


def _sysfs_pcie(address: str | None, root: Path | None = None) -> PcieLink | None:
    """A GPU's PCIe link from sysfs, read without NVML: the expectation's floor (the PCIe link)."""
    if address is None:
        return None
    base = (root or SYSFS) / "bus" / "pci" / "devices" / address

    def read(name: str, parse: Any) -> Any:
        try:
            return parse((base / name).read_text(encoding="ascii", errors="replace"))
        except (OSError, ParseError):
            return None

    max_speed = read("max_link_speed", sysfs_values.parse_pcie_speed)
    current_speed = read("current_link_speed", sysfs_values.parse_pcie_speed)
    max_width = read("max_link_width", sysfs_values.parse_link_width)
    current_width = read("current_link_width", sysfs_values.parse_link_width)
    if max_speed is None and max_width is None:
        return None
    return PcieLink(address=address, current_gen=sysfs_values.pcie_generation(current_speed) if current_speed else None,
                    max_gen=sysfs_values.pcie_generation(max_speed) if max_speed else None,
                    current_width=current_width, max_width=max_width, current_speed_gts=current_speed,
                    max_speed_gts=max_speed, source="sysfs")


def _gpus_from_probe(result: dict[str, Any]) -> list[Gpu]:
    """The probed GPUs as the probe saw them: CUDA's name and PCI bus id (with the PCIe link
    from sysfs, so the check has an expected level), else their indices alone."""
    gpus: list[Gpu] = []
    seen: set[int] = set()
    for device in result.get("devices") or []:
        if not isinstance(device, dict) or not isinstance(device.get("index"), int) or device["index"] in seen:
            continue
        seen.add(device["index"])
        bus_id = device.get("pci_bus_id")
        address = canonical_pci_address(bus_id) if isinstance(bus_id, str) else None
        gpus.append(Gpu(index=device["index"], name=device.get("name") or None, pci_address=address,
                        pcie=_sysfs_pcie(address), sources=("probe",)))
    if gpus:
        return gpus
    for index in result.get("gpus") or []:
        if isinstance(index, int) and not isinstance(index, bool) and index not in seen:
            seen.add(index)
            gpus.append(Gpu(index=index, sources=("probe",)))
    return gpus


def probe_command(gpus: str | None, engine: str, budget_s: float, output_format: str, output: Path | None,
                  rules: str | None, snapshot: Path | None) -> int:
    """The body of `netdoctor probe`; returns the exit code (0 pass, 1 warn, 2 fail, 3 unknown)."""
    from netdoctor.checks.engine import run_checks
    from netdoctor.checks.registry import Registry
    from netdoctor.packs import load_rules
    from netdoctor.report.render import emit, render

    if snapshot is not None:
        raise UsageError("the NCCL probe runs only on a live node; --snapshot cannot be probed "
                         "(use `netdoctor check --snapshot` to judge a snapshot)")
    if engine not in ("auto", "nccl", "nccl-tests"):
        raise UsageError(f"--engine {engine!r}: choose auto, nccl or nccl-tests")
    if budget_s <= 0:
        raise UsageError(f"--budget {budget_s}: must be positive")
    indices = parse_gpu_list(gpus)
    if indices is not None and len(indices) < 2:
        raise UsageError(f"--gpus {gpus!r}: an all-reduce needs at least 2 GPUs")
    started = time.monotonic()
    started_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    host = socket.gethostname().split(".")[0]     # the short name, as netdoctor.host.live reports it
    # An explicit pack is loaded first so that a bad --rules fails before the GPUs are touched.
    pack = load_rules(rules, None) if rules is not None else None
    # The pack's pass_fraction is also the worker's localisation threshold. The auto-selected
    # pack is matched against the GPUs the probe finds, so it is known only afterwards; until
    # then the default pack with the site's overrides stands in (the bundled packs inherit
    # its pass_fraction).
    threshold_pack = pack if pack is not None else load_rules(None, None)
    fraction = threshold_pack.section(CHECK_ID).get("pass_fraction", DEFAULT_LOCALISE_FRACTION)
    # Loading the check plugins overlaps the probe (which mostly waits on its worker); a
    # failure to load them is raised here once the probe is done, not lost with the thread.
    registry = Registry()
    load_error: list[BaseException] = []

    def load_checks() -> None:
        try:
            registry.load_builtins()
        except BaseException as error:  # handed to the main thread below
            load_error.append(error)

    loader = threading.Thread(target=load_checks, name="load-checks", daemon=True)
    loader.start()
    result = run_probe(gpus=indices, engine=engine, budget_s=budget_s, localise_below_fraction=fraction)
    loader.join()
    if load_error:
        raise load_error[0]
    if result.get("reason_code") == "bad-gpus":
        raise UsageError(f"--gpus {gpus!r}: {result.get('reason')}")
    inventory = inventory_from_probe(result, host, started_at)
    if pack is None:
        pack = load_rules(None, inventory)
    findings, outcomes = run_checks(inventory, pack, registry, only=[CHECK_ID], probe=result,
                                    deadline=time.monotonic() + 5.0)
    # The probe is the one check here: whatever the pack requires, its `unknown` (nothing
    # measured: no NCCL, no all_reduce_perf, an init error, too short a budget) is the
    # command's answer, exit 3, not a pass.
    required = pack.required | {CHECK_ID}
    outcomes = [dataclasses.replace(outcome, required=True) if outcome.check == CHECK_ID else outcome
                for outcome in outcomes]
    grade = grade_of(findings, required) if findings else Grade.UNKNOWN
    report = Report(host=host, grade=grade, started_at=started_at, duration_s=time.monotonic() - started,
                    rules=pack.name, findings=findings, checks=outcomes, probe=result, netdoctor_version=__version__)
    text = render(report, "json") if output_format == "json" else render_probe_text(report, result)
    if output_format not in ("text", "json"):
        text = render(report, output_format)
    emit(text, output)
    return report.grade.exit_code


def render_probe_text(report: Report, result: dict[str, Any]) -> str:
    """A human summary: the measured sizes, how NCCL carried them, the findings."""
    lines = [f"netdoctor probe on {report.host}: {str(report.grade).upper()}"]
    devices = result.get("devices") or []
    names = sorted({device.get("name") for device in devices if device.get("name")})
    if result.get("gpu_count"):
        nccl = f"NCCL {result['nccl_version']}" if result.get("nccl_version") else "NCCL not loaded"
        lines.append(f"  engine {result.get('engine')}, {nccl}, {result['gpu_count']} GPU(s) {result.get('gpus')}"
                     + (f" ({', '.join(names)})" if names else ""))
    transport = result.get("transport") or {}
    if transport.get("kind"):
        gdr = transport.get("gdr")
        gdr_text = "" if gdr is None else f", GPUDirect RDMA {'on' if gdr else 'off'}"
        lines.append(f"  transport {transport['kind']}, {transport.get('channels')} channel(s){gdr_text}")
    if result.get("sizes"):
        lines.append(f"  {'size':>10} {'time (us)':>11} {'algbw GB/s':>11} {'busbw GB/s':>11}  verified")
        for row in result["sizes"]:
            lines.append(f"  {size_text(row['bytes']):>10} {row['time_us']:>11.2f} {row['algbw_gbps']:>11.2f} "
                         f"{row['busbw_gbps']:>11.2f}  {'yes' if row.get('verified') else 'NO'}")
    if result.get("status") != "ok":
        lines.append(f"  probe {result.get('status')}: {result.get('reason')}")
    for finding in report.findings:
        lines.append(f"  [{finding.status}] {finding.subject}: {finding.summary}")
        if finding.evidence.get("reasoning"):
            lines.append(f"         expected: {finding.evidence['reasoning']}")
        if finding.remedy and finding.status not in ("pass", "skip"):
            lines.append(f"         remedy: {finding.remedy}")
    lines.append(f"  took {result.get('duration_s', 0):.2f} s")
    return "\n".join(lines) + "\n"
