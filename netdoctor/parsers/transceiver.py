"""Module (transceiver) diagnostics: `mlxlink -d DEV -m` and `ethtool -m NETDEV`.

Both give temperature, voltage and per-lane laser bias, transmit and receive power, with
the module's own limits: mlxlink prints the alarm range after the value
(`Temperature [C] : 54 [-5..75]`, `Bias Current [mA] : 8.380,8.380,8.380,8.380 [2..15]`);
ethtool prints separate `... high alarm threshold` / `... low warning threshold` lines
(SFF-8472 for SFP, SFF-8636 and CMIS for QSFP/OSFP, `(Channel N)` per lane).

A module without digital diagnostics (passive copper) reads zeros with a `[0..0]` range or
`N/A`, and all-zero thresholds mean the module publishes none: both read as unknown (None),
never as a value of zero. `-inf dBm` (no light at all) is read as -40 dBm, the floor
modules report.
"""

from __future__ import annotations

import re

from netdoctor.errors import ParseError
from netdoctor.records import record

NO_LIGHT_DBM = -40.0
_RANGE = re.compile(r"^(?P<values>.*?)\s*\[(?P<low>-?[\d.]+)\.\.(?P<high>-?[\d.]+)\]\s*$")
_NUMBER = re.compile(r"-?(?:\d+(?:\.\d+)?|inf)", re.IGNORECASE)


@record(frozen=True)
class ModuleReading:
    """One quantity: a value per lane (one for temperature and voltage) and the module's limits."""

    values: tuple[float, ...]
    alarm_low: float | None = None
    alarm_high: float | None = None
    warning_low: float | None = None
    warning_high: float | None = None


@record(frozen=True)
class ModuleDiagnostics:
    source: str                                  # mlxlink | ethtool
    identifier: str | None = None                # OSFP, QSFP28, SFP
    vendor: str | None = None
    part_number: str | None = None
    serial: str | None = None
    cable: str | None = None                     # `Passive copper cable`, `100G Ethernet: 100G AOC ...`
    temperature_c: ModuleReading | None = None
    voltage_v: ModuleReading | None = None
    bias_ma: ModuleReading | None = None
    tx_power_dbm: ModuleReading | None = None
    rx_power_dbm: ModuleReading | None = None

    @property
    def monitored(self) -> bool:
        """The module reports diagnostics (an optical module, an active cable)."""
        return any(reading is not None for reading in (self.temperature_c, self.bias_ma, self.rx_power_dbm,
                                                        self.tx_power_dbm))


def _key_values(text: str, source: str) -> list[tuple[str, str]]:
    pairs = []
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, _, value = line.partition(":")
        key = key.strip()
        if key and not key.startswith("-"):
            pairs.append((key, value.strip()))
    if not pairs:
        raise ParseError(source, "no `Key : value` line")
    return pairs


def _float(text: str) -> float:
    return NO_LIGHT_DBM if text.lower().lstrip("-") == "inf" else float(text)


def _limits(low: float | None, high: float | None) -> tuple[float | None, float | None]:
    """A pair of limits, or none where the module publishes zeros."""
    if low is None or high is None or (low == 0 and high == 0) or low >= high:
        return None, None
    return low, high


# ---- mlxlink -m ---------------------------------------------------------------------------------

_MLXLINK_READINGS = {
    "Temperature [C]": ("temperature_c", 1.0),
    "Voltage [mV]": ("voltage_v", 0.001),
    "Bias Current [mA]": ("bias_ma", 1.0),
    "Rx Power Current [dBm]": ("rx_power_dbm", 1.0),
    "Tx Power Current [dBm]": ("tx_power_dbm", 1.0),
}
_MLXLINK_TEXT = {"Identifier": "identifier", "Vendor Name": "vendor", "Vendor Part Number": "part_number",
                 "Vendor Serial Number": "serial", "Cable Type": "cable"}


def parse_mlxlink_module(text: str) -> ModuleDiagnostics:
    """`mlxlink -d DEV -m`: the Module Info section (other sections are ignored)."""
    fields: dict[str, object] = {}
    for key, value in _key_values(text, "mlxlink"):
        if key in _MLXLINK_TEXT and value and value != "N/A":
            fields[_MLXLINK_TEXT[key]] = value
        elif key in _MLXLINK_READINGS:
            name, scale = _MLXLINK_READINGS[key]
            fields[name] = _mlxlink_reading(value, scale, key)
    if not any(key in fields for key in ("identifier", "vendor", *(name for name, _ in _MLXLINK_READINGS.values()))):
        raise ParseError("mlxlink", "no Module Info lines (`Temperature [C] : ...`, `Identifier : ...`)")
    return ModuleDiagnostics(source="mlxlink", **fields)  # type: ignore[arg-type]


def _mlxlink_reading(value: str, scale: float, key: str) -> ModuleReading | None:
    if not value or value.startswith("N/A"):
        return None
    match = _RANGE.match(value)
    values_text = match["values"] if match else value
    try:
        values = tuple(_float(part.strip()) * scale for part in values_text.split(",") if part.strip())
        low, high = (float(match["low"]) * scale, float(match["high"]) * scale) if match else (None, None)
    except ValueError as error:
        raise ParseError("mlxlink", f"{key}: not a number list with a range: {value!r}") from error
    low, high = _limits(low, high)
    if low is None and not any(values):
        return None                      # `0 [0..0]`: no diagnostics (passive copper)
    return ModuleReading(values, alarm_low=low, alarm_high=high)


# ---- ethtool -m ---------------------------------------------------------------------------------

# Reading name -> (value keys without the channel suffix, threshold key stem)
_ETHTOOL_READINGS = {
    "temperature_c": (("Module temperature",), "Module temperature"),
    "voltage_v": (("Module voltage",), "Module voltage"),
    "bias_ma": (("Laser bias current", "Laser tx bias current"), "Laser bias current"),
    "tx_power_dbm": (("Laser output power", "Transmit avg optical power"), "Laser output power"),
    "rx_power_dbm": (("Receiver signal average optical power", "Rcvr signal avg optical power",
                      "Receiver signal OMA"), "Laser rx power"),
}
_ETHTOOL_TEXT = {"Vendor name": "vendor", "Vendor PN": "part_number", "Vendor SN": "serial"}
_CHANNEL = re.compile(r"\s*\((?:Channel|Chan)\s*(\d+)\)\s*$")


def parse_ethtool_module(text: str) -> ModuleDiagnostics:
    """`ethtool -m NETDEV` (SFF-8472, SFF-8636, CMIS)."""
    pairs = _key_values(text, "ethtool-m")
    fields: dict[str, object] = {}
    values: dict[str, list[float]] = {}
    thresholds: dict[str, float] = {}
    for raw_key, value in pairs:
        key = _CHANNEL.sub("", raw_key).strip()      # per-lane values arrive in channel order
        if key == "Identifier":
            inner = re.search(r"\(([^)]+)\)", value)
            fields["identifier"] = inner.group(1) if inner else value
        elif key == "Transceiver type" and "cable" not in fields:
            fields["cable"] = value
        elif key in _ETHTOOL_TEXT and value:
            fields[_ETHTOOL_TEXT[key]] = value
        elif key.endswith("threshold"):
            number = _ethtool_number(value)
            if number is not None:
                thresholds[key] = number
        elif not key.endswith(("alarm", "warning")):
            for name, (value_keys, _) in _ETHTOOL_READINGS.items():
                if key in value_keys:
                    number = _ethtool_number(value)
                    if number is not None:
                        values.setdefault(name, []).append(number)
                    break
    for name, (_, stem) in _ETHTOOL_READINGS.items():
        if name not in values:
            continue
        alarm = _limits(thresholds.get(f"{stem} low alarm threshold"), thresholds.get(f"{stem} high alarm threshold"))
        warning = _limits(thresholds.get(f"{stem} low warning threshold"),
                          thresholds.get(f"{stem} high warning threshold"))
        fields[name] = ModuleReading(tuple(values[name]), alarm[0], alarm[1], warning[0], warning[1])
    if "identifier" not in fields and not values:
        raise ParseError("ethtool-m", "no `Identifier` and no diagnostics line")
    return ModuleDiagnostics(source="ethtool", **fields)  # type: ignore[arg-type]


def _ethtool_number(value: str) -> float | None:
    """`47.30 degrees C / 117.13 degrees F` -> 47.3; `0.2132 mW / -6.71 dBm` -> -6.71 (dBm wins);
    `3.2576 V` -> 3.2576; `-inf dBm` -> -40."""
    if "dBm" in value:
        dbm = re.search(r"(-?(?:\d+(?:\.\d+)?|inf))\s*dBm", value, re.IGNORECASE)
        return _float(dbm.group(1)) if dbm else None
    number = _NUMBER.search(value)
    return _float(number.group(0)) if number else None
