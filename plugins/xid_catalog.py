"""GPU Xids graded by NVIDIA's Xid catalog: the pack's tables, the grade of one GPU's Xids, and
a remedy per resolution (and per Xid where the catalog says more).

The catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, Xid-Catalog.xlsx)
gives each Xid a "Resolution Bucket (Immediate Action)": what recovers the GPU now. The pack
holds that table (`[kernel-events.xid_catalog]`, Xid -> bucket) and how each bucket grades
(`[kernel-events.resolution_grade]`); a site changes either, or one Xid through the old
`[kernel-events.xid_severity]` form. Grades:

* `fail` / `warn`: the node needs (or should get) that action before the next job;
* `repeat`: the job's or nothing (RESTART_APP, IGNORE): shown, and a warning only when one
  GPU logs it `application_xid_repeat` times in the window;
* `pass`: shown, never graded.

Xid 154 names the driver's recovery action ("... changed from 0x0 (None) to 0x2 (Node Reboot
Required)"); the newest one of a GPU grades by `[kernel-events.recovery_action_grade]`.

Blackwell's NVLink5 Xids (144-150, bucket WORKFLOW_NVLINK5_ERR) say `Fatal` or `Nonfatal` in
the line (CONTRACT 8): a fatal one grades as the bucket; non-fatal ones grade
`nvlink5_nonfatal_severity` until one GPU logs `nvlink5_nonfatal_repeat` of them in the window,
then as the bucket; a line that says neither keeps the bucket's grade and the finding says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from netdoctor.checks import CheckContext, Status
from netdoctor.errors import RulesError
from netdoctor.inventory.model import KernelEvent
from netdoctor.parsers.kernel_log import nvlink5_fault, recovery_action
from netdoctor.records import record
from netdoctor_plugins.remedy_words import dcgm_diag

GRADES = ("fail", "warn", "repeat", "pass")
OLD_GRADES = {"application": "repeat"}      # `xid_severity` values of netdoctor 0.2
RECOVERY_XID = 154
RECOVERY_BUCKET = "XID_154"
NVLINK5_BUCKET = "WORKFLOW_NVLINK5_ERR"
UNLISTED = "UNLISTED"

# What recovers the GPU, per bucket, in the words of the catalog's "Fault Resolution Buckets"
# sheet; `{pci}` becomes the GPU's PCI address, `{diag}` its field diagnostic, `{links}` the
# NVLink5 units and links the lines name (_fill).
RESET = "`nvidia-smi -r -i {pci}` once no process holds it (or reboot the node)"
REMEDY_BY_BUCKET = {
    "RESTART_APP": "restart the application; NVIDIA's catalog asks for no GPU reset or reboot (RESTART_APP). "
                   "Repeated on one GPU: run {diag} and the job under compute-sanitizer",
    "IGNORE": "no action is needed for one (NVIDIA's catalog: IGNORE); repeated this often on one GPU, collect "
              "`nvidia-bug-report.sh` and follow the catalog's investigatory action for it",
    "RESET_GPU": "drain the GPU and reset it: " + RESET + "; if the Xid returns after the reset, contact support "
                 "(NVIDIA's catalog: RESET_GPU)",
    "RESTART_BM": "drain the node and reboot it (NVIDIA's catalog: RESTART_BM); if the Xid returns, contact support",
    "CONTACT_SUPPORT": "drain the node and open a case with NVIDIA or the system vendor with `nvidia-bug-report.sh` "
                       "(NVIDIA's catalog: CONTACT_SUPPORT)",
    "WORKFLOW_XID_48": "drain the GPU and reset it: " + RESET + "; if `nvidia-smi -q -i {pci}` shows the SRAM error "
                       "threshold exceeded, run field diagnostics and follow the RMA flow (catalog: WORKFLOW_XID_48)",
    "WORKFLOW_NVLINK_ERR": "reset the GPU: " + RESET + "; check `nvidia-smi nvlink -e -i {pci}`; if it persists after the "
                           "reset, reseat the link and contact the hardware vendor (catalog: WORKFLOW_NVLINK_ERR)",
    NVLINK5_BUCKET: "decode the line's IntrInfo and errorStatus (its first two hex words) with the Xid catalog's "
                    "'XID 144-150 Decode' sheet (Xid-Catalog.xlsx){links}; a fatal NVLink5 error needs the GPU reset: "
                    + RESET + "; if it returns, check the link's cable/cartridge with `nvidia-smi nvlink -e -i {pci}` "
                    "and contact the hardware vendor (catalog: WORKFLOW_NVLINK5_ERR)",
    "WORKFLOW_XID_45": "Xid 45 follows another Xid or a killed process: handle that one; alone and repeating, "
                       "restart the fabric manager (`systemctl restart nvidia-fabricmanager`) as the catalog says",
    "CHECK_MECHANICALS": "check that the GPU is seated and its power connectors are secure "
                         "(catalog: CHECK_MECHANICALS)",
    "RESTART_VM": "restart the VM that owns this GPU (catalog: RESTART_VM)",
    "UPDATE_SWFW": "update the GPU driver and firmware to current versions (catalog: UPDATE_SWFW)",
    "CHECK_UVM": "if UVM or vGPU is in use, reset the GPU: " + RESET + "; otherwise no action (catalog: CHECK_UVM)",
    RECOVERY_BUCKET: "the Xid 154 line does not say which recovery action the driver wants: read it with "
                     "`nvidia-smi -q -i {pci} | grep -i -A1 recovery` and follow it",
    UNLISTED: "look the Xid up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors); run {diag}",
}
# Non-fatal NVLink5 Xids: the link recovered; the job may have seen errors.
REMEDY_NVLINK5_NONFATAL = ("non-fatal NVLink5 errors: decode the line's IntrInfo and errorStatus with the Xid catalog's "
                           "'XID 144-150 Decode' sheet (Xid-Catalog.xlsx){links}; watch the link's error counters "
                           "(`nvidia-smi nvlink -e -i {pci}`); if they keep coming, drain the GPU and reset it: " + RESET)
# Where the catalog's trigger conditions say more than the bucket.
REMEDY_BY_XID = {
    63: "each one records a row remap that takes effect at the next GPU reset (gpu-health shows it pending); "
        "this many on one GPU: reset it when idle (" + RESET + ") and compare its remap counts with NVIDIA's "
        "row-remapping RMA thresholds",
    64: "drain the GPU and reset it: " + RESET + "; a row-remapping failure is for support/RMA "
        "(catalog: RESET_GPU, then CONTACT_SUPPORT)",
    79: "drain the node and reboot it; read the PCIe AER lines and the BMC event log of the GPU's slot; if it "
        "falls off again, reseat it or contact support (catalog: RESTART_BM)",
    93: "clear the InfoROM erase limit (`nvflash --elsessionclear`); if that does not help, report it to NVIDIA",
    94: "restart the application; the others on the GPU are unaffected. NVIDIA recommends resetting the GPU when "
        "convenient: " + RESET,
    95: "the GPU must be reset before applications can restart: " + RESET,
    110: "revert recent hardware changes and power-cycle the node; if it persists, contact the hardware vendor",
    119: "reset the GPU (" + RESET + ") or power-cycle the node; if it returns after a power cycle, follow NVIDIA's "
         "GPU Debug Guidelines",
    120: "reset the GPU (" + RESET + ") or power-cycle the node; if it returns after a power cycle, follow NVIDIA's "
         "GPU Debug Guidelines",
    121: "corrected C2C errors: reset the GPU at a service window to retrain the link",
    140: "reset the GPU: " + RESET + "; if it persists, contact the hardware vendor",
}
# nvmlGpuRecoveryAction_t, as NVIDIA's GPU memory error management guide says to answer it.
REMEDY_BY_ACTION = {
    "gpu_reset": "the driver asks for a GPU reset: stop its processes and reset it: " + RESET,
    "node_reboot": "the driver asks for a node reboot (the OS may be inconsistent): drain the node and reboot it",
    "drain_p2p": "the driver asks to quiesce peer-to-peer traffic: end the GPU's P2P processes, disable UVM "
                 "persistence mode, then read the recovery action again (`nvidia-smi -q -i {pci} | grep -i -A1 "
                 "recovery`)",
    "drain_and_reset": "the driver asks to drain and reset: let running jobs end, start none here, then reset the "
                       "GPU: " + RESET,
    "recover_imex_domain": "the driver asks to recover the IMEX domain: restart nvidia-imex on the domain's nodes "
                           "(`systemctl restart nvidia-imex` on each)",
    "bus_reset": "the driver asks for a reset of the GPU's PCIe bus: drain the node and reboot it",
    "system_reboot": "the driver asks for a system reboot: drain the node and reboot it",
}
# The stronger action first, so one finding's remedy is the one that recovers the GPU.
_STRENGTH = ("system_reboot", "node_reboot", "bus_reset", "RESTART_BM", "RESTART_VM", "CONTACT_SUPPORT",
             "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK5_ERR", "drain_and_reset", "gpu_reset",
             "RESET_GPU", "drain_p2p", "recover_imex_domain", "CHECK_MECHANICALS", "CHECK_UVM", "UPDATE_SWFW",
             RECOVERY_BUCKET, UNLISTED, "WORKFLOW_XID_45", "RESTART_APP", "IGNORE")


@record(frozen=True)
class XidVerdict:
    """One Xid code of one GPU: how many, what the catalog says, the grade."""

    code: int
    count: int
    resolution: str                 # the catalog bucket, a recovery action (154), or UNLISTED
    grade: str                      # fail | warn | repeat | pass, as the pack says
    status: Status | None           # what it adds to the GPU's finding; None: shown only
    remedy: str
    said: str = ""                  # Xid 154: the action as the driver wrote it; NVLink5: fatal or not
    rule: str = ""                  # the pack key that set the grade, where not the catalog's
    detail: Mapping[str, object] | None = None      # NVLink5: fatal/non-fatal counts, units, links


class XidRules:
    """The pack's Xid tables, read and checked once per run."""

    def __init__(self, ctx: CheckContext) -> None:
        self.repeat = int(ctx.rule("application_xid_repeat"))
        self.unlisted = self._grade(ctx.rule("unlisted_xid_severity"), "unlisted_xid_severity")
        self.catalog: Mapping[str, str] = ctx.rule("xid_catalog")
        self.by_resolution = {str(key): self._grade(value, f"resolution_grade.{key}")
                              for key, value in ctx.rule("resolution_grade").items()}
        self.by_action = {str(key): self._grade(value, f"recovery_action_grade.{key}")
                          for key, value in ctx.rule("recovery_action_grade").items()}
        self.overrides = {str(key): self._grade(value, f"xid_severity.{key}")
                          for key, value in ctx.rule("xid_severity").items()}
        self.nvlink5_nonfatal = self._grade(ctx.rule("nvlink5_nonfatal_severity"), "nvlink5_nonfatal_severity")
        self.nvlink5_repeat = int(ctx.rule("nvlink5_nonfatal_repeat"))

    @staticmethod
    def _grade(value: object, key: str) -> str:
        grade = OLD_GRADES.get(str(value), str(value))
        if grade not in GRADES:
            raise RulesError(f"[kernel-events] {key} = {value!r}: expected one of {', '.join(GRADES)} "
                             f"(or 'application', the same as 'repeat')")
        return grade

    def resolution(self, code: int) -> str:
        return str(self.catalog.get(str(code), UNLISTED)) or UNLISTED

    def grade_of(self, code: int, resolution: str) -> str:
        """A site's per-Xid grade, else the catalog entry read as a grade (a site may write
        `"94" = "fail"` there too), else the bucket's grade; unlisted ones by their own key."""
        if str(code) in self.overrides:
            return self.overrides[str(code)]
        if resolution in GRADES or resolution in OLD_GRADES:
            return self._grade(resolution, f"xid_catalog.{code}")
        if resolution == UNLISTED:
            return self.unlisted
        if resolution not in self.by_resolution:
            raise RulesError(f"[kernel-events] xid_catalog.{code} = {resolution!r} names no bucket of "
                             f"[kernel-events.resolution_grade] ({', '.join(sorted(self.by_resolution))})")
        return self.by_resolution[resolution]

    def status(self, grade: str, count: int) -> Status | None:
        if grade == "repeat":
            return Status.WARN if count >= self.repeat else None
        return None if grade == "pass" else Status(grade)


def _fill(template: str, pci: str, index: int | None, links: str = "") -> str:
    """A remedy template made concrete for one GPU: its PCI address, its field diagnostic, the links named."""
    return template.format(pci=pci, diag=dcgm_diag(index), links=links)


def judge_gpu(rules: XidRules, events: Sequence[KernelEvent], pci: str, index: int | None = None) -> list[XidVerdict]:
    """The verdict of each Xid code among one GPU's current events (history already removed), in code order;
    `index`: the GPU's NVML index where NVML lists it (its diagnostic's command)."""
    counts: dict[int, int] = {}
    for event in events:
        if event.code is not None:
            counts[event.code] = counts.get(event.code, 0) + 1
    verdicts = []
    nvlink5 = {code for code in counts if rules.resolution(code) == NVLINK5_BUCKET and str(code) not in rules.overrides}
    nonfatal = sum(1 for event in events if event.code in nvlink5 and event.fatal is False)
    for code, count in sorted(counts.items()):
        resolution = rules.resolution(code)
        if code == RECOVERY_XID and resolution == RECOVERY_BUCKET and str(code) not in rules.overrides:
            verdicts.append(_recovery(rules, [event for event in events if event.code == code], pci, index))
            continue
        if code in nvlink5:
            verdicts.append(_nvlink5(rules, code, [event for event in events if event.code == code], nonfatal, pci,
                                     index))
            continue
        grade = rules.grade_of(code, resolution)
        remedy = REMEDY_BY_XID.get(code) or REMEDY_BY_BUCKET.get(resolution) or REMEDY_BY_BUCKET[UNLISTED]
        verdicts.append(XidVerdict(code, count, resolution, grade, rules.status(grade, count),
                                   _fill(remedy, pci, index)))
    return verdicts


def _recovery(rules: XidRules, events: Sequence[KernelEvent], pci: str, index: int | None) -> XidVerdict:
    """Xid 154: the newest line's action decides (an earlier "GPU Reset Required" that a later
    line changed back to "None" is over)."""
    timed = [(event.time, order) for order, event in enumerate(events) if event.time is not None]
    newest = events[max(timed)[1]] if timed else events[-1]
    said = recovery_action(newest.message)
    if said is None or said.action is None or said.action not in rules.by_action:
        grade = rules.by_resolution.get(RECOVERY_BUCKET, "warn")
        words = said.words if said is not None else ""
        return XidVerdict(RECOVERY_XID, len(events), RECOVERY_BUCKET, grade, rules.status(grade, len(events)),
                          _fill(REMEDY_BY_BUCKET[RECOVERY_BUCKET], pci, index), words)
    grade = rules.by_action[said.action]
    remedy = REMEDY_BY_ACTION.get(said.action, REMEDY_BY_BUCKET[RECOVERY_BUCKET])
    return XidVerdict(RECOVERY_XID, len(events), said.action, grade, rules.status(grade, len(events)),
                      _fill(remedy, pci, index), said.words)


def _nvlink5(rules: XidRules, code: int, events: Sequence[KernelEvent], nonfatal_on_gpu: int, pci: str,
             index: int | None) -> XidVerdict:
    """An NVLink5 Xid (144-150) by the `Fatal`/`Nonfatal` its lines carry: any fatal one, or one
    that says neither, grades as the bucket; only non-fatal ones grade `nvlink5_nonfatal_severity`
    until the GPU has logged `nvlink5_nonfatal_repeat` non-fatal NVLink5 Xids in the window."""
    fatal = sum(1 for event in events if event.fatal is True)
    unsaid = sum(1 for event in events if event.fatal is None)
    faults = [fault for fault in (nvlink5_fault(event.message) for event in events) if fault is not None]
    links = sorted({fault.link for fault in faults if fault.link is not None})
    units = sorted({fault.unit for fault in faults})
    bucket = rules.by_resolution.get(NVLINK5_BUCKET)
    if bucket is None:
        raise RulesError(f"[kernel-events] xid_catalog.{code} = {NVLINK5_BUCKET!r} names no bucket of "
                         f"[kernel-events.resolution_grade] ({', '.join(sorted(rules.by_resolution))})")
    if fatal:
        grade, rule, said = bucket, "", f"{NVLINK5_BUCKET}, fatal" + (f" x{fatal}" if fatal < len(events) else "")
    elif unsaid:
        grade, rule, said = bucket, "", f"{NVLINK5_BUCKET}; the line does not say Fatal or Nonfatal"
    elif nonfatal_on_gpu >= rules.nvlink5_repeat:
        grade, rule = bucket, "nvlink5_nonfatal_repeat"
        said = f"{NVLINK5_BUCKET}, non-fatal, {nonfatal_on_gpu} non-fatal NVLink5 Xids on this GPU"
    else:
        grade, rule, said = rules.nvlink5_nonfatal, "nvlink5_nonfatal_severity", f"{NVLINK5_BUCKET}, non-fatal"
    where = f" ({', '.join(units)} on {_links(links)})" if units else ""
    template = REMEDY_NVLINK5_NONFATAL if not fatal and not unsaid else REMEDY_BY_BUCKET[NVLINK5_BUCKET]
    detail = {"fatal": fatal, "nonfatal": len(events) - fatal - unsaid, "fatality_not_logged": unsaid,
              "units": units, "links": links}
    return XidVerdict(code, len(events), NVLINK5_BUCKET, grade, rules.status(grade, len(events)),
                      _fill(template, pci, index, where), said, rule, detail)


def _links(links: Sequence[int]) -> str:
    if not links:
        return "no link named"
    named = [f"{link:02d}" for link in links if link >= 0]
    words = [("link " if len(named) == 1 else "links ") + ", ".join(named)] if named else []
    if -1 in links:
        words.append("no single link (Link -1)")
    return " and ".join(words)


def remedy_of(verdicts: Sequence[XidVerdict]) -> str | None:
    """The remedy of the strongest action among the graded Xids, and of a second, different one."""
    graded = [verdict for verdict in verdicts if verdict.status is not None]
    if not graded:
        return None
    graded.sort(key=lambda verdict: (verdict.status is not Status.FAIL, _strength(verdict.resolution)))
    remedies = list(dict.fromkeys(f"Xid {verdict.code}: {verdict.remedy}" for verdict in graded))
    return "; ".join(remedies[:2])


def _strength(resolution: str) -> int:
    return _STRENGTH.index(resolution) if resolution in _STRENGTH else len(_STRENGTH)
