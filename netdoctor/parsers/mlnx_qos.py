"""`mlnx_qos -i <netdev>` parser."""

from __future__ import annotations

import re
from dataclasses import field

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.parsers.common import is_paste_noise, numbered_lines, require_text, screen_tool_errors
from netdoctor.records import record

SOURCE = "mlnx_qos"


@record(frozen=True)
class TrafficClass:
    tc: int
    tsa: str | None                      # vendor (default, no ETS) | ets | strict
    bandwidth_percent: int | None        # only with tsa ets
    priorities: tuple[int, ...]
    ratelimit: str | None = None         # `unlimited` or e.g. `10.0 Gbps`


@record(frozen=True)
class MlnxQos:
    """QoS state of one netdev as mlnx_qos shows it (plus ECN lines of wrapper scripts).

    `pfc_enabled` lists the priorities (0-7) with PFC on. `pfc_buffer` maps each priority
    to its receive buffer (newer MLNX_OFED prints a `buffer` row), None when not printed.
    `ecn_np`/`ecn_rp` come from `ECN Enabled for priority N: .../ecn/roce_np|roce_rp/enable/N = 1`
    lines some wrappers print; empty when the text has none.
    """

    dcbx_mode: str | None = None
    trust: str | None = None                        # "pcp" | "dscp"
    pfc_enabled: tuple[int, ...] = ()
    pfc_buffer: tuple[int, ...] | None = None
    cable_length: int | None = None
    traffic_classes: tuple[TrafficClass, ...] = ()
    dscp_to_priority: dict[int, int] = field(default_factory=dict)
    receive_buffer_bytes: tuple[int, ...] | None = None
    ecn_np: dict[int, bool] = field(default_factory=dict)
    ecn_rp: dict[int, bool] = field(default_factory=dict)
    roce_tos: int | None = None                     # `cma_roce_tos: 160`
    cnp_dscp: int | None = None                     # `.../roce_np/cnp_dscp = 48`

    @property
    def ecn_enabled_priorities(self) -> tuple[int, ...]:
        """Priorities with ECN enabled on both the notification (np) and reaction (rp) point."""
        return tuple(sorted(p for p, on in self.ecn_np.items() if on and self.ecn_rp.get(p)))


_DCBX = re.compile(r"^DCBX mode:\s*(?P<value>.+?)\s*$")
_TRUST = re.compile(r"^Priority trust (?:state|mode):\s*(?P<value>\w+)\s*$")
_DSCP_MAP = re.compile(r"^prio:\s*(?P<prio>\d)\s+dscp:\s*(?P<list>[\d,\s]*?)\s*$")
_CABLE = re.compile(r"^Cable len:\s*(?P<value>\d+)\s*$")
_RECEIVE_BUFFER = re.compile(r"^Receive buffer size \(bytes\):\s*(?P<list>[\d,\s]+?)\s*$")
_TABLE_ROW = re.compile(r"^(?P<name>priority|enabled|buffer)\s+(?P<values>\d+(?:\s+\d+)*)\s*$")
_TC = re.compile(
    r"^tc:\s*(?P<tc>\d+)(?:\s+ratelimit:\s*(?P<ratelimit>[^,]+?))?\s*,?\s*tsa:\s*(?P<tsa>\w+)"
    r"(?:\s*,\s*bw:\s*(?P<bw>\d+)%)?\s*$"
)
_TC_PRIORITY = re.compile(r"^priority:\s*(?P<values>\d+(?:\s+\d+)*)\s*$")
_ECN = re.compile(r"^ECN Enabled for priority\s+(?P<prio>\d):\s*\S*/ecn/roce_(?P<point>np|rp)/enable/\d\s*=\s*(?P<on>[01])\s*$")
_ROCE_TOS = re.compile(r"^cma_roce_tos:\s*(?P<value>\d+)\s*$")
_CNP_DSCP = re.compile(r"^QOS for CNP:\s*\S*/cnp_dscp\s*=\s*(?P<value>\d+)\s*$")
# Lines of mlnx_qos itself that carry nothing we use.
_SKIP = re.compile(r"^(?:dscp2prio mapping:|default priority:.*|PFC configuration:|Total buffer size.*|xoff_threshold.*|xon_threshold.*|Buffer \d.*)$")


def _int_list(text: str) -> list[int]:
    return [int(item) for item in re.split(r"[,\s]+", text.strip()) if item]


class _Builder:
    def __init__(self) -> None:
        self.values: dict[str, object] = {}
        self.dscp_to_priority: dict[int, int] = {}
        self.table: dict[str, list[int]] = {}
        self.traffic_classes: list[dict[str, object]] = []
        self.ecn_np: dict[int, bool] = {}
        self.ecn_rp: dict[int, bool] = {}

    @property
    def has_content(self) -> bool:
        return bool(self.values or self.table or self.traffic_classes or self.dscp_to_priority)

    def build(self) -> MlnxQos:
        priorities = self.table.get("priority", list(range(8)))
        enabled = self.table.get("enabled", [])
        buffer = self.table.get("buffer")
        return MlnxQos(
            dcbx_mode=self.values.get("dcbx_mode"),  # type: ignore[arg-type]
            trust=self.values.get("trust"),  # type: ignore[arg-type]
            pfc_enabled=tuple(prio for prio, on in zip(priorities, enabled) if on),
            pfc_buffer=tuple(buffer) if buffer is not None else None,
            cable_length=self.values.get("cable_length"),  # type: ignore[arg-type]
            traffic_classes=tuple(
                TrafficClass(
                    tc=tc["tc"], tsa=tc["tsa"], bandwidth_percent=tc["bw"],  # type: ignore[arg-type]
                    priorities=tuple(tc["priorities"]), ratelimit=tc["ratelimit"],  # type: ignore[arg-type]
                )
                for tc in self.traffic_classes
            ),
            dscp_to_priority=dict(self.dscp_to_priority),
            receive_buffer_bytes=self.values.get("receive_buffer_bytes"),  # type: ignore[arg-type]
            ecn_np=dict(self.ecn_np),
            ecn_rp=dict(self.ecn_rp),
            roce_tos=self.values.get("roce_tos"),  # type: ignore[arg-type]
            cnp_dscp=self.values.get("cnp_dscp"),  # type: ignore[arg-type]
        )


def parse_mlnx_qos(text: str) -> MlnxQos:
    """The state after the last mlnx_qos output in `text` (see parse_mlnx_qos_all)."""
    return parse_mlnx_qos_all(text)[-1]


def parse_mlnx_qos_all(text: str) -> list[MlnxQos]:
    """Parse `mlnx_qos -i <if>` output, tolerating the wrapper noise it is usually captured with.

    Sample::

        DCBX mode: OS controlled
        Priority trust state: dscp
        dscp2prio mapping:
                prio:0 dscp:07,06,05,04,03,02,01,00,
                ...
        Cable len: 7
        PFC configuration:
                priority    0   1   2   3   4   5   6   7
                enabled     0   0   0   1   0   0   0   0
        tc: 0 ratelimit: unlimited, tsa: vendor
                 priority:  1
        ...

    Returns every mlnx_qos output found, in order. A setup script that runs
    `mlnx_qos --trust dscp`, then `mlnx_qos --pfc ...` prints the full state each time;
    parse_mlnx_qos returns the LAST one because it is the state the node was left in. Shell traces (`+ cmd`),
    prompts, `====` banners and lines of other commands (sysctl, cma_roce_tos echo) are
    skipped; ECN/cma_roce_tos lines of the spiderpool `rdma-qos.sh q` wrapper are kept.
    """
    require_text(SOURCE, text)
    screen_tool_errors(SOURCE, text)
    outputs: list[_Builder] = []
    current = _Builder()
    pending_tc: dict[str, object] | None = None

    def start_new_if(condition: bool) -> None:
        nonlocal current, pending_tc
        if condition and current.has_content:
            outputs.append(current)
            current, pending_tc = _Builder(), None

    for number, raw in numbered_lines(text):
        line = raw.strip()
        if is_paste_noise(raw) or line.startswith("==") or _SKIP.match(line):
            continue
        if match := _DCBX.match(line):
            start_new_if(True)
            current.values["dcbx_mode"] = match.group("value")
        elif match := _TRUST.match(line):
            start_new_if("trust" in current.values or bool(current.table))
            current.values["trust"] = match.group("value").lower()
        elif match := _DSCP_MAP.match(line):
            for dscp in _int_list(match.group("list")):
                if dscp > 63:
                    raise ParseError(SOURCE, f"DSCP value {dscp} out of range 0-63", number, raw)
                current.dscp_to_priority[dscp] = int(match.group("prio"))
        elif match := _CABLE.match(line):
            current.values["cable_length"] = int(match.group("value"))
        elif match := _RECEIVE_BUFFER.match(line):
            current.values["receive_buffer_bytes"] = tuple(_int_list(match.group("list")))
        elif match := _TABLE_ROW.match(line):
            name, values = match.group("name"), _int_list(match.group("values"))
            if name == "priority":
                start_new_if("priority" in current.table)
                if values != list(range(len(values))) or len(values) > 8:
                    raise ParseError(SOURCE, "PFC table header must list priorities 0..7", number, raw)
            else:
                header = current.table.get("priority")
                if header is None or len(values) != len(header):
                    raise ParseError(SOURCE, f"PFC '{name}' row does not match the priority header", number, raw)
                if name == "enabled" and any(value not in (0, 1) for value in values):
                    raise ParseError(SOURCE, "PFC 'enabled' row must hold 0/1 values", number, raw)
            current.table[name] = values
        elif match := _TC.match(line):
            pending_tc = {
                "tc": int(match.group("tc")), "tsa": match.group("tsa"),
                "bw": int(match.group("bw")) if match.group("bw") else None,
                "ratelimit": match.group("ratelimit"), "priorities": [],
            }
            current.traffic_classes.append(pending_tc)
        elif match := _TC_PRIORITY.match(line):
            if pending_tc is None:
                raise ParseError(SOURCE, "'priority:' line outside a 'tc:' block", number, raw)
            pending_tc["priorities"].extend(_int_list(match.group("values")))  # type: ignore[union-attr]
        elif match := _ECN.match(line):
            table = current.ecn_np if match.group("point") == "np" else current.ecn_rp
            table[int(match.group("prio"))] = match.group("on") == "1"
        elif match := _ROCE_TOS.match(line):
            current.values["roce_tos"] = int(match.group("value"))
        elif match := _CNP_DSCP.match(line):
            current.values["cnp_dscp"] = int(match.group("value"))
        # Anything else is a line of another command in the captured session (sysctl
        # echo, `cma_roce_tos` printing its value, QOS for rdma ...): not mlnx_qos state.
    if current.has_content:
        outputs.append(current)
    if not outputs:
        if any(not is_paste_noise(raw) for _, raw in numbered_lines(text)):
            raise ParseError(SOURCE, "no mlnx_qos output found (no trust, PFC or tc lines)")
        raise NothingToParse(SOURCE, "no mlnx_qos output")
    return [output.build() for output in outputs]
