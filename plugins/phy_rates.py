"""What `phy` turns counts into BERs with: the port's rate and lanes, the window, the FEC's limit."""

from __future__ import annotations


from netdoctor.checks import CheckContext, Finding
from netdoctor.inventory.model import Port
from netdoctor.records import record
from netdoctor.util import duration_text


@record(frozen=True)
class PortRate:
    gbps: float          # the port's data rate (sysfs rate: 400 for 4X NDR)
    lanes: int

    def bits(self, seconds: float) -> float:
        return self.gbps * 1e9 * seconds

    def lane_bits(self, seconds: float) -> float:
        return self.bits(seconds) / self.lanes

    @property
    def lane_gbps(self) -> float:
        return self.gbps / self.lanes


@record(frozen=True)
class Window:
    """The interval counts are judged over: `deltas` are the growth since the last run (None:
    the counts are cumulative over `seconds`, mlxlink's since-clear window or the uptime)."""

    seconds: float | None
    deltas: dict[str, int] | None
    text: str


def usable_interval(ctx: CheckContext, previous: object) -> float | None:
    """Seconds since the earlier reading where growth over it is judged (a reading of this port,
    at least `min_window_s` and at most `history_max_age_s` old); None otherwise."""
    history = ctx.history
    if history is None or previous is None:
        return None
    if not float(ctx.rule("min_window_s")) <= history.elapsed_s <= float(ctx.rule("history_max_age_s")):
        return None
    return history.elapsed_s


def since_last_run(ctx: CheckContext, elapsed_s: float, deltas: dict[str, int]) -> Window:
    source = ctx.history.source if ctx.history is not None else ""
    return Window(elapsed_s, deltas, f"in the {duration_text(elapsed_s)} since the last run ({source})")


def port_rate(port: Port) -> PortRate | None:
    rate = port.rate
    if rate is None or not rate.gbps or not rate.width:
        return None
    return PortRate(rate.gbps, rate.width)


def ber_text(ber: float) -> str:
    return "0" if ber == 0 else f"{ber:.1e}".replace("e-0", "e-")


def fec_limit(ctx: CheckContext, fec: str | None, rate: PortRate | None) -> tuple[float, str] | None:
    """(the pre-FEC BER the port's FEC corrects to 1e-12, its name), or None where unknown.

    mlxlink names the code (`RS-FEC - (544,514)`, `Standard RS-FEC - RS(528,514)`, `No FEC`);
    ethtool -S does not, so the lane rate stands in: 50G and faster PAM4 lanes (HDR, NDR, XDR,
    200/400/800GbE) run RS(544,514), 25G NRZ lanes (EDR, 100GbE) RS(528,514)."""
    if fec is not None:
        text = fec.replace(" ", "")
        if "544" in text:
            return float(ctx.rule("fec_limit_rs544")), "RS-FEC (544,514)"
        if "528" in text:
            return float(ctx.rule("fec_limit_rs528")), "RS-FEC (528,514)"
        if text.lower().startswith("nofec"):
            # Without FEC every raw error reaches the link: the raw BER is the effective one.
            return float(ctx.rule("effective_ber_limit")), "a link without FEC"
        return None     # FireCode / BASE-R FEC: no limit in the pack
    if rate is None:
        return None
    if rate.lane_gbps >= 50:
        return float(ctx.rule("fec_limit_rs544")), "RS-FEC (544,514) (50G+ PAM4 lanes)"
    if rate.lane_gbps >= 25:
        return float(ctx.rule("fec_limit_rs528")), "RS-FEC (528,514) (25G lanes)"
    return None


def link_down_finding(ctx: CheckContext, subject: str, link: str, count: int, window: Window, remedy: str) -> Finding:
    """A RoCE link that went down since the last run (every QP on it broke): past
    `link_down_per_hour` it takes `link_down_severity`, below it `link_down_slow_severity`."""
    per_hour = count * 3600 / window.seconds if window.seconds else float("inf")
    limit = float(ctx.rule("link_down_per_hour"))
    severity = ctx.severity("link_down_severity") if per_hour > limit else ctx.severity("link_down_slow_severity")
    return ctx.graded(severity, subject, f"the link of {link} went down {count} time(s) {window.text} "
                      f"({per_hour:.2g}/h; limit {limit:g}/h): every RDMA connection on it broke",
                      evidence={"link_down": count, "per_hour": round(per_hour, 3)}, rule="link_down_per_hour",
                      remedy=remedy)
