"""Parser for perftest's bandwidth tests (`ib_write_bw`, `ib_read_bw`, `ib_send_bw` with
`--report_gbits`): the settings header and the result table.

Pure: text in, a frozen dataclass out. The table is

     #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
     65536      4159603          0.00               363.47             0.693268

(peak is printed as 0.00 in duration mode, `-D`); the row of the largest message size
is the one to read. Without `--report_gbits` the unit is MB/sec, converted here.
"""

from __future__ import annotations

import re

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.parsers.common import decimal_or_none
from netdoctor.records import record

_HEADER = re.compile(r"^\s*#bytes\s+#iterations\s+BW peak\[(Gb|MB|MiB)/sec\]\s+BW average\[(?:Gb|MB|MiB)/sec\]")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)(?:\s+(\d+(?:\.\d+)?))?\s*$")
_SETTING = re.compile(r"^\s*([A-Za-z][\w .*/-]*?)\s*:\s*(\S[^\t]*?)\s*$")
# MB/sec in perftest is 2^20 bytes per second.
_TO_GBITS = {"Gb": 1.0, "MB": 8 * 1048576 / 1e9, "MiB": 8 * 1048576 / 1e9}


@record(frozen=True)
class PerftestRow:
    bytes: int
    iterations: int
    peak_gbps: float          # Gb/s
    average_gbps: float       # Gb/s
    message_rate_mpps: float | None


@record(frozen=True)
class PerftestRun:
    test: str | None          # "RDMA_Write BW Test"
    device: str | None
    link_type: str | None     # IB | Ethernet
    gid_index: int | None
    qps: int | None
    rows: tuple[PerftestRow, ...]

    @property
    def bandwidth_gbps(self) -> float:
        """BW average of the largest message size measured."""
        return max(self.rows, key=lambda row: row.bytes).average_gbps


def parse_perftest_bw(text: str) -> PerftestRun:
    settings: dict[str, str] = {}
    test = None
    unit: str | None = None
    rows: list[PerftestRow] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip() or set(line.strip()) == {"-"}:
            continue
        if line.strip().endswith(" Test") and test is None and ":" not in line:
            test = line.strip()
            continue
        if header := _HEADER.match(line):
            unit = header.group(1)
            continue
        if unit is not None and (row := _ROW.match(line)):
            scale = _TO_GBITS[unit]
            rows.append(PerftestRow(int(row[1]), int(row[2]), float(row[3]) * scale, float(row[4]) * scale,
                                    float(row[5]) if row[5] else None))
            continue
        # Header lines hold two settings separated by tabs: `Dual-port : OFF\t\tDevice : mlx5_0`.
        for part in re.split(r"\t+", line):
            if setting := _SETTING.match(part):
                settings.setdefault(setting[1].strip(), setting[2].strip())
    if unit is None:
        raise NothingToParse("perftest", "no '#bytes #iterations BW peak' table (did the test run?)")
    if not rows:
        raise ParseError("perftest", "the result table has no rows")
    gid = settings.get("GID index")
    qps = settings.get("Number of qps")
    return PerftestRun(test, settings.get("Device"), settings.get("Link type"),
                       decimal_or_none(gid), decimal_or_none(qps),
                       tuple(rows))
