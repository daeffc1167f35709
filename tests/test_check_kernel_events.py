"""kernel-events: Xids graded by NVIDIA's Xid catalog (its immediate resolution), Xid 154 by the
recovery action it names, Xids older than the driver's last load as history; SXids, link flaps
and AER, each in its window back from the capture time; events of another boot never count."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from netdoctor.errors import RulesError
from netdoctor.inventory.model import Inventory, KernelEvent, KernelEventKind, KernelLog
from netdoctor.packs import RulePack, load_rules
from netdoctor.parsers.kernel_log import parse_kernel_log
from netdoctor.report.model import Finding, Status
from netdoctor_plugins.kernel_events import kernel_events
from inventory_factory import CAPTURED_AT, dgx_h100, pack, run_check, site_pack

CHECK = "kernel-events"
NOW = datetime.fromisoformat(CAPTURED_AT.replace("Z", "+00:00"))
BOOT = NOW - timedelta(days=1)
GPU0 = "0000:18:00.0"
RECOVERY = "GPU recovery action changed from {} to {}"


def event(kind: KernelEventKind, subject: str, minutes_ago: float, code: int | None = None,
          fatal: bool | None = None, message: str = "") -> KernelEvent:
    return KernelEvent(kind, subject, NOW - timedelta(minutes=minutes_ago), code,
                       message or f"{kind} {subject} {code}", fatal)


def xid(code: int, minutes_ago: float = 30, subject: str = GPU0, said: str = "") -> KernelEvent:
    line = f"NVRM: Xid (PCI:{subject[:-2]}): {code}, {said or 'pid=1, name=python3'}"
    return event(KernelEventKind.XID, subject, minutes_ago, code, message=line)


def driver_load(minutes_ago: float, version: str = "580.95.05") -> KernelEvent:
    return event(KernelEventKind.DRIVER_LOAD, version, minutes_ago,
                 message=f"NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build")


def judged(*events: KernelEvent, rule_pack: RulePack | None = None, **overrides: object) -> list[Finding]:
    inventory: Inventory = dgx_h100()
    inventory.hcas[0].ports[1].netdev = "ibp24s0"
    inventory.kernel_log = KernelLog(tuple(events), BOOT, BOOT)
    return run_check(kernel_events, CHECK, inventory, pack_name="dgx-h100", rule_pack=rule_pack,
                     overrides=overrides or None)


def gpu0(findings: list[Finding]) -> Finding:
    [finding] = [finding for finding in findings if finding.subject == f"GPU0 {GPU0}"]
    return finding


def test_a_clean_log_passes_and_says_how_far_back_it_reaches() -> None:
    [finding] = judged(event(KernelEventKind.LINK_UP, "ibp24s0", 600), driver_load(60 * 23))
    assert finding.status is Status.PASS and finding.subject == "node"
    assert finding.summary.endswith("the log reaches back to 2026-11-20T22:40:00Z")
    assert finding.evidence["driver_version"] == "580.95.05"


def test_xid_79_an_hour_ago_fails_naming_the_gpu_its_resolution_and_a_reboot() -> None:
    [finding] = judged(xid(79, 60, "0000:3a:00.0", "GPU has fallen off the bus."))
    assert finding.status is Status.FAIL and finding.subject == "GPU2 0000:3a:00.0"
    assert finding.summary == "Xid 79 (RESTART_BM) (1x, 2026-11-21T21:40:00Z): GPU has fallen off the bus."
    assert finding.evidence["codes"] == {"79": {"count": 1, "resolution": "RESTART_BM", "grade": "fail"}}
    assert finding.rule == "resolution_grade" and "reboot" in (finding.remedy or "")
    assert "RMA" not in (finding.remedy or "")


# One Xid of each bucket of the catalog's immediate resolution, as the default pack grades it once.
@pytest.mark.parametrize(("code", "bucket", "status"), [
    (46, "RESET_GPU", Status.FAIL), (109, "RESET_GPU", Status.FAIL), (110, "RESET_GPU", Status.FAIL),
    (136, "RESET_GPU", Status.FAIL), (143, "RESET_GPU", Status.FAIL), (155, "RESET_GPU", Status.FAIL),
    (158, "RESET_GPU", Status.FAIL), (119, "RESET_GPU", Status.FAIL),
    (79, "RESTART_BM", Status.FAIL), (61, "CONTACT_SUPPORT", Status.FAIL), (142, "CONTACT_SUPPORT", Status.FAIL),
    (48, "WORKFLOW_XID_48", Status.FAIL), (74, "WORKFLOW_NVLINK_ERR", Status.FAIL),
    (149, "WORKFLOW_NVLINK5_ERR", Status.FAIL), (54, "CHECK_MECHANICALS", Status.FAIL),
    (151, "RESTART_VM", Status.FAIL), (78, "UPDATE_SWFW", Status.WARN), (159, "CHECK_UVM", Status.WARN),
    (94, "RESTART_APP", Status.PASS), (13, "RESTART_APP", Status.PASS), (63, "IGNORE", Status.PASS),
    (38, "IGNORE", Status.PASS), (45, "WORKFLOW_XID_45", Status.PASS),
    (167, "UNLISTED", Status.WARN), (999, "UNLISTED", Status.WARN),     # catalogued without a bucket; unknown
])
def test_each_resolution_bucket_grades_as_the_pack_says(code: int, bucket: str, status: Status) -> None:
    finding = gpu0(judged(xid(code)))
    assert finding.status is status
    assert finding.evidence["codes"][str(code)]["resolution"] == bucket
    if status is Status.PASS:
        assert "the job's or nothing" in finding.summary and finding.remedy is None
    else:
        assert f"Xid {code} ({bucket}" in finding.summary and finding.remedy


def test_restart_app_and_ignore_warn_only_when_one_repeats_past_the_packs_count() -> None:
    once = judged(xid(94), xid(63), xid(13), xid(43))
    assert [finding.status for finding in once] == [Status.PASS, Status.PASS]       # GPU0 shown, node clean
    assert gpu0(once).summary.startswith("Xid 13 (RESTART_APP), Xid 43 (IGNORE), Xid 63 (IGNORE), Xid 94 (RESTART_APP) "
                                         "(4x, 2026-11-21T22:10:00Z): the job's or nothing")
    nine = judged(*(xid(94, minutes) for minutes in range(10, 19)))
    assert gpu0(nine).status is Status.PASS
    ten = gpu0(judged(*(xid(94, minutes) for minutes in range(10, 20))))
    assert ten.status is Status.WARN and ten.summary.startswith("Xid 94 x10 (RESTART_APP) (10x, ")
    assert ten.rule == "application_xid_repeat"
    assert "restart the application" in (ten.remedy or "") and "nvidia-smi -r -i 0000:18:00.0" in (ten.remedy or "")
    assert "RMA" not in (ten.remedy or "")
    assert gpu0(judged(*(xid(63, minutes) for minutes in range(10, 13)), application_xid_repeat=3)).status is Status.WARN


def test_a_reset_gpu_xid_beside_an_application_one_fails_with_the_reset_remedy() -> None:
    finding = gpu0(judged(xid(13, 31), xid(109, 30, said="Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005")))
    assert finding.status is Status.FAIL and finding.summary.startswith("Xid 109 (RESET_GPU) (1x, 2026-11-21T22:10:00Z)")
    assert finding.evidence["count"] == 2 and finding.evidence["codes"]["13"]["grade"] == "repeat"
    assert finding.summary.endswith("errorString CTX SWITCH TIMEOUT, Info 0x58005")
    assert (finding.remedy or "").startswith("Xid 109: drain the GPU and reset it: `nvidia-smi -r -i 0000:18:00.0`")


@pytest.mark.parametrize(("words", "status", "remedy"), [
    ("0x0 (None) to 0x2 (Node Reboot Required)", Status.FAIL, "reboot"),
    ("0x0 (None) to 0x1 (GPU Reset Required)", Status.FAIL, "nvidia-smi -r -i 0000:18:00.0"),
    ("0x0 (None) to 0x4 (Drain and Reset)", Status.FAIL, "drain and reset"),
    ("0x0 (None) to 0x3 (Drain P2P)", Status.FAIL, "peer-to-peer"),
    ("0x1 (GPU Reset Required) to 0x0 (None)", Status.PASS, None),
])
def test_xid_154_grades_by_the_action_it_names(words: str, status: Status, remedy: str | None) -> None:
    finding = gpu0(judged(xid(154, said=RECOVERY.format(*words.split(" to ")))))
    assert finding.status is status
    to = words.split(" to ")[1].split("(")[1].rstrip(")")
    if remedy is None:
        assert finding.remedy is None and "Xid 154 (None)" in finding.summary
    else:
        assert f"Xid 154 ({to})" in finding.summary and remedy in (finding.remedy or "")
        assert finding.rule == "recovery_action_grade"


def test_the_newest_xid_154_of_a_gpu_decides() -> None:
    reset = xid(154, 30, said=RECOVERY.format("0x4 (Drain and Reset)", "0x1 (GPU Reset Required)"))
    cleared = xid(154, 10, said=RECOVERY.format("0x1 (GPU Reset Required)", "0x0 (None)"))
    assert gpu0(judged(reset, cleared)).status is Status.PASS
    assert gpu0(judged(cleared, xid(154, 5, said=RECOVERY.format("0x0 (None)", "0x2 (Node Reboot Required)")))
                ).status is Status.FAIL


def test_an_xid_154_that_names_no_action_warns_and_says_how_to_read_it() -> None:
    finding = gpu0(judged(xid(154, said="GPU recovery action changed")))
    assert finding.status is Status.WARN and "Xid 154 (XID_154)" in finding.summary
    assert "nvidia-smi -q" in (finding.remedy or "") and finding.rule == "resolution_grade"


def test_xids_before_the_newest_driver_load_are_history_shown_not_graded() -> None:
    findings = judged(driver_load(60 * 23), xid(79, 120, said="GPU has fallen off the bus."), xid(48, 119),
                      driver_load(60, "580.95.05"))
    finding = gpu0(findings)
    assert finding.status is Status.PASS
    assert finding.summary == ("Xid 48, Xid 79 (2026-11-21T20:40:00Z .. 2026-11-21T20:41:00Z) came before the NVIDIA "
                               "driver was loaded again at 2026-11-21T21:40:00Z (580.95.05): history, not graded")
    assert finding.evidence["history"]["count"] == 2 and "codes" not in finding.evidence
    assert [item.status for item in findings] == [Status.PASS, Status.PASS]
    # The same Xid after that load counts, and the history is named beside it.
    after = gpu0(judged(driver_load(60 * 23), xid(79, 120), driver_load(60), xid(79, 30)))
    assert after.status is Status.FAIL and "history, not graded" in after.summary
    assert after.evidence["count"] == 1 and after.evidence["history"]["count"] == 1


def test_a_driver_load_of_another_boot_makes_nothing_history() -> None:
    stale = KernelEvent(KernelEventKind.DRIVER_LOAD, "570.86.15", BOOT - timedelta(minutes=5))
    assert gpu0(judged(stale, xid(79, 60))).status is Status.FAIL


def test_a_site_override_of_one_xid_in_the_catalog_table(tmp_path: Path) -> None:
    site = site_pack(tmp_path, "dgx-h100", '[kernel-events.xid_catalog]\n"94" = "RESET_GPU"\n"79" = "warn"\n')
    assert gpu0(judged(xid(94), rule_pack=site)).status is Status.FAIL
    assert gpu0(judged(xid(79), rule_pack=site)).status is Status.WARN
    assert gpu0(judged(xid(13), rule_pack=site)).status is Status.PASS        # the others as the catalog says


def test_the_old_xid_severity_form_still_works_in_a_site_file(tmp_path: Path) -> None:
    site = site_pack(tmp_path, "dgx-h100", '[kernel-events.xid_severity]\n"13" = "fail"\n"79" = "application"\n'
                                           '"999" = "pass"\n')
    assert gpu0(judged(xid(13), rule_pack=site)).status is Status.FAIL
    assert gpu0(judged(xid(79), rule_pack=site)).status is Status.PASS          # "application" = repeat
    assert gpu0(judged(*(xid(79, minutes) for minutes in range(10, 20)), rule_pack=site)).status is Status.WARN
    assert gpu0(judged(xid(999), rule_pack=site)).status is Status.PASS
    finding = gpu0(judged(xid(13), rule_pack=site))
    assert finding.rule == "xid_severity"


def test_the_old_xid_severity_form_still_works_in_a_site_pack_of_its_own(tmp_path: Path) -> None:
    own = tmp_path / "site-dgx.toml"
    own.write_text('[pack]\nname = "site-dgx"\nextends = "dgx-h100"\n\n'
                   '[kernel-events.xid_severity]\n"43" = "fail"\n"31" = "application"\n')
    site = load_rules(str(own), env={})
    assert gpu0(judged(xid(43), rule_pack=site)).status is Status.FAIL
    assert gpu0(judged(xid(31), rule_pack=site)).status is Status.PASS
    assert gpu0(judged(xid(109), rule_pack=site)).status is Status.FAIL       # the catalog still grades the rest


def test_a_bucket_grade_changes_for_every_xid_of_it() -> None:
    grades = dict(pack("dgx-h100").section(CHECK)["resolution_grade"])
    grades["RESTART_APP"] = "fail"
    assert gpu0(judged(xid(94), resolution_grade=grades)).status is Status.FAIL
    assert gpu0(judged(xid(13), resolution_grade=grades)).status is Status.FAIL


@pytest.mark.parametrize(("key", "value"), [("xid_severity", {"13": "explode"}), ("unlisted_xid_severity", "fatal")])
def test_a_grade_the_pack_cannot_mean_is_a_rules_error(key: str, value: object) -> None:
    with pytest.raises(RulesError, match=key):
        judged(xid(13), **{key: value})


def test_the_default_catalog_holds_every_catalogued_xid_with_a_resolution() -> None:
    section = pack("default").section(CHECK)
    catalog = section["xid_catalog"]
    assert sorted(map(int, catalog)) == list(range(1, 162))           # 162-172 have no resolution in the catalog
    assert set(catalog.values()) <= set(section["resolution_grade"])
    assert [code for code in (46, 109, 110, 136, 143, 155, 158) if catalog[str(code)] != "RESET_GPU"] == []
    assert (catalog["94"], catalog["63"], catalog["38"], catalog["154"]) == ("RESTART_APP", "IGNORE", "IGNORE", "XID_154")


def test_events_outside_their_window_or_before_this_boot_do_not_count() -> None:
    old = xid(79, 60 * 30)                                                      # 30 h ago, window 24 h
    previous_boot = KernelEvent(KernelEventKind.XID, GPU0, BOOT - timedelta(minutes=5), 79)
    assert [finding.status for finding in judged(old, previous_boot)] == [Status.PASS]


def test_a_link_flapping_six_times_in_an_hour_fails_and_twice_warns() -> None:
    flaps = [event(KernelEventKind.LINK_DOWN, "ibp24s0", minutes) for minutes in (5, 15, 25, 35, 45, 55)]
    [finding] = judged(*flaps)
    assert finding.status is Status.FAIL and finding.subject == "mlx5_0:1 (ibp24s0)"
    assert finding.summary.startswith("link went down 6 times in the last 1 h")
    assert judged(*flaps[:2])[0].status is Status.WARN


def test_fatal_sxid_fails_and_uncorrected_aer_on_a_gpu_fails_but_not_on_other_devices() -> None:
    findings = judged(event(KernelEventKind.SXID, "0000:07:00.0", 10, 20034, fatal=True),
                      event(KernelEventKind.AER_UNCORRECTED, GPU0, 10),
                      event(KernelEventKind.AER_UNCORRECTED, "0000:e3:00.0", 10))
    assert [(finding.status, finding.subject) for finding in findings] == [
        (Status.FAIL, "GPU0 0000:18:00.0"), (Status.FAIL, "0000:07:00.0")]


# Blackwell NVLink5 Xids (144-150): graded by the Fatal/Nonfatal the line carries (CONTRACT 8).
# Real GB200 lines (tests/data/corpus/dmesg/leptonai-gpud__*), given to GPU0 of the fixture.
NL5_FATAL = "149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"
NL5_NONFATAL = ("145, pid=876767, name=ray::WorkerDict, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 "
                "0x00000001 0x00000000 0x00100000 0x00000004)")
NL5_BER = "149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x00086226 0x00000001 0x00000000 0x00000000 0x00000000 0x00000000)"


def logged(*lines: tuple[float, str], subject: str = GPU0) -> list[KernelEvent]:
    """Xid lines as the parser reads them ("<code>, <words>"), `minutes_ago` each, on one GPU."""
    text = "".join(f"{(NOW - timedelta(minutes=minutes)).strftime('%Y-%m-%dT%H:%M:%S')},000000+00:00 "
                   f"NVRM: Xid (PCI:{subject[:-2]}): {said}\n" for minutes, said in lines)
    return [KernelEvent(line.kind, line.subject, line.time, line.code, line.message, line.fatal)
            for line in parse_kernel_log(text).events]


def test_a_fatal_nvlink5_xid_fails_naming_the_decode_sheet_and_the_link() -> None:
    finding = gpu0(judged(*logged((30, NL5_FATAL))))
    assert finding.status is Status.FAIL and finding.rule == "resolution_grade"
    assert finding.summary.startswith("Xid 149 (WORKFLOW_NVLINK5_ERR, fatal) (1x, 2026-11-21T22:10:00Z): "
                                      "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01")
    assert finding.evidence["codes"]["149"] == {"count": 1, "resolution": "WORKFLOW_NVLINK5_ERR", "grade": "fail",
                                                "fatal": 1, "nonfatal": 0, "fatality_not_logged": 0,
                                                "units": ["NETIR_LINK_EVT"], "links": [1]}
    remedy = finding.remedy or ""
    assert "'XID 144-150 Decode' sheet" in remedy and "(NETIR_LINK_EVT on link 01)" in remedy
    assert "nvidia-smi -r -i 0000:18:00.0" in remedy


def test_a_nonfatal_nvlink5_xid_warns_and_names_its_link() -> None:
    finding = gpu0(judged(*logged((30, NL5_NONFATAL))))
    assert finding.status is Status.WARN and finding.rule == "nvlink5_nonfatal_severity"
    assert finding.summary.startswith("Xid 145 (WORKFLOW_NVLINK5_ERR, non-fatal) (1x, 2026-11-21T22:10:00Z): "
                                      "pid=876767, name=ray::WorkerDict, RLW_RXPIPE Nonfatal")
    assert finding.evidence["codes"]["145"]["grade"] == "warn"
    assert "(RLW_RXPIPE on link 13)" in (finding.remedy or "") and "Decode" in (finding.remedy or "")


def test_nonfatal_nvlink5_xids_of_one_gpu_fail_once_they_repeat_past_the_packs_count() -> None:
    # 145 and 149 together: the count is of all the GPU's non-fatal NVLink5 Xids in the window.
    nine = logged(*[(minutes, NL5_NONFATAL) for minutes in range(10, 15)],
                  *[(minutes, NL5_BER) for minutes in range(20, 24)])
    assert gpu0(judged(*nine)).status is Status.WARN
    ten = nine + logged((25, NL5_BER))
    finding = gpu0(judged(*ten))
    assert finding.status is Status.FAIL and finding.rule == "nvlink5_nonfatal_repeat"
    assert "Xid 145 x5 (WORKFLOW_NVLINK5_ERR, non-fatal, 10 non-fatal NVLink5 Xids on this GPU)" in finding.summary
    assert finding.evidence["codes"]["149"]["links"] == [3]
    assert gpu0(judged(*ten, nvlink5_nonfatal_repeat=11)).status is Status.WARN
    # Another GPU's non-fatal ones do not add to this GPU's count.
    other = logged(*[(minutes, NL5_BER) for minutes in range(30, 35)], subject="0000:3a:00.0")
    assert gpu0(judged(*nine, *other)).status is Status.WARN


def test_one_fatal_line_among_nonfatal_ones_fails() -> None:
    finding = gpu0(judged(*logged((10, NL5_BER), (20, "149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000)"))))
    assert finding.status is Status.FAIL and finding.rule == "resolution_grade"
    assert "Xid 149 x2 (WORKFLOW_NVLINK5_ERR, fatal x1)" in finding.summary
    assert "(NETIR, NETIR_BER_EVENT on link 03 and no single link (Link -1))" in (finding.remedy or "")


def test_an_nvlink5_xid_that_does_not_say_fatal_keeps_the_buckets_fail_and_says_so() -> None:
    finding = gpu0(judged(*logged((30, "146, driver-specific detail"), (40, NL5_NONFATAL))))
    assert finding.status is Status.FAIL and finding.rule == "resolution_grade"
    assert "Xid 146 (WORKFLOW_NVLINK5_ERR; the line does not say Fatal or Nonfatal)" in finding.summary
    assert "Xid 145 (WORKFLOW_NVLINK5_ERR, non-fatal)" in finding.summary
    assert finding.evidence["codes"]["146"]["fatality_not_logged"] == 1


def test_the_nonfatal_grade_and_a_sites_per_xid_grade_come_from_the_pack() -> None:
    assert gpu0(judged(*logged((30, NL5_NONFATAL)), nvlink5_nonfatal_severity="pass")).status is Status.PASS
    with pytest.raises(RulesError, match="nvlink5_nonfatal_severity"):
        judged(*logged((30, NL5_NONFATAL)), nvlink5_nonfatal_severity="loud")
    site = judged(*logged((30, NL5_FATAL)), xid_severity={"149": "warn"})
    assert gpu0(site).status is Status.WARN and gpu0(site).rule == "xid_severity"


def test_real_gb200_nvlink5_lines_grade_per_gpu_by_their_fatality() -> None:
    # The 19 real lines of three GB200 GPUs, one minute apart (the source has no time stamps).
    lines = (Path(__file__).parent / "data" / "corpus" / "dmesg" /
             "leptonai-gpud__kmsg-no-timestamp-xid-145-149-gb200.txt").read_text().splitlines()
    text = "".join(f"{(NOW - timedelta(minutes=60 - n)).strftime('%Y-%m-%dT%H:%M:%S')},000000+00:00 {line}\n"
                   for n, line in enumerate(lines))
    events = [KernelEvent(line.kind, line.subject, line.time, line.code, line.message, line.fatal)
              for line in parse_kernel_log(text).events]
    by_gpu = {finding.subject: finding for finding in judged(*events)}
    assert {subject: finding.status for subject, finding in by_gpu.items()} == {
        "0008:01:00.0": Status.FAIL, "0018:01:00.0": Status.FAIL, "0019:01:00.0": Status.FAIL}
    assert by_gpu["0008:01:00.0"].evidence["codes"]["145"] == {
        "count": 3, "resolution": "WORKFLOW_NVLINK5_ERR", "grade": "warn", "fatal": 0, "nonfatal": 3,
        "fatality_not_logged": 0, "units": ["RLW_SRC_TRACK"], "links": [3, 12, 16]}
    assert by_gpu["0008:01:00.0"].evidence["codes"]["149"]["grade"] == "fail"
    # Only the non-fatal lines of GPU 0018: a warning.
    nonfatal = [event for event in events if event.subject == "0018:01:00.0" and event.fatal is False]
    assert [finding.status for finding in judged(*nonfatal) if finding.subject == "0018:01:00.0"] == [Status.WARN]


def test_old_a100_h100_xid_lines_grade_as_before_with_no_fatality() -> None:
    events = logged((30, "79, pid=1207, name=python3, GPU has fallen off the bus."),
                    (40, "74, pid=1, name=python3, NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0)"))
    assert [event.fatal for event in events] == [None, None]
    finding = gpu0(judged(*events))
    assert finding.status is Status.FAIL and finding.rule == "resolution_grade"
    assert finding.evidence["codes"] == {"74": {"count": 1, "resolution": "WORKFLOW_NVLINK_ERR", "grade": "fail"},
                                         "79": {"count": 1, "resolution": "RESTART_BM", "grade": "fail"}}
