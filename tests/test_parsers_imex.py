"""`nvidia-imex-ctl -N` parser on the real captures of tests/data/corpus/nvidia-imex-ctl (IMEX 570.172
with its Version column and 8-line legend; the older 570.00 layout), tool errors and garbage."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.inventory.from_fabric_tools import this_imex_node
from netdoctor.inventory.model import Inventory, Netdev
from netdoctor.parsers.nvidia_imex_ctl import ImexDomain, ImexNode, parse_nvidia_imex_ctl

CORPUS = Path(__file__).parent / "data" / "corpus" / "nvidia-imex-ctl"
AWS_18 = CORPUS / "aws-parallelcluster-guide__imex-ctl-N-18-nodes-ready-570.172.txt"
GH200_1 = CORPUS / "gh200-dra-repro-notes__imex-ctl-N-1-node-ready-570.00-no-version-column.txt"
GH200_2 = CORPUS / "gh200-dra-repro-notes__imex-ctl-N-2-nodes-ready-570.00-no-version-column.txt"
AWS_ADDRESSES = ["172.31.48.81", "172.31.48.98", "172.31.48.221", "172.31.49.228", "172.31.50.39", "172.31.50.44",
                 "172.31.51.66", "172.31.51.157", "172.31.52.239", "172.31.53.80", "172.31.54.95", "172.31.54.183",
                 "172.31.54.203", "172.31.54.241", "172.31.55.59", "172.31.55.187", "172.31.55.197", "172.31.56.47"]


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_real_570_172_eighteen_trays_all_ready_and_up() -> None:
    domain = parse_nvidia_imex_ctl(text(AWS_18))
    assert domain.state == "UP"
    assert domain.timestamp == "5/12/2025 06:08:10.580"
    assert [node.address for node in domain.nodes] == AWS_ADDRESSES
    assert [node.index for node in domain.nodes] == list(range(18))
    assert {(node.status, node.version) for node in domain.nodes} == {("READY", "570.172")}
    assert all(node.ready for node in domain.nodes)
    assert len(domain.connections) == 18 * 18 and set(domain.connections.values()) == {"C"}
    assert domain.connections[(17, 0)] == "C" and domain.not_connected() == {}
    assert domain.node(10) == ImexNode(10, "172.31.54.95", "READY", "570.172")


@pytest.mark.parametrize(("path", "addresses"), [(GH200_1, ["10.136.206.48"]),
                                                 (GH200_2, ["10.136.206.47", "10.136.206.48"])])
def test_real_570_00_layout_without_version_column(path: Path, addresses: list[str]) -> None:
    # 6-line legend, no `- Version:`, 3-wide cells, `Domain State` straight after the matrix.
    domain = parse_nvidia_imex_ctl(text(path))
    assert domain.state == "UP"
    assert [(node.address, node.status, node.version) for node in domain.nodes] == [
        (address, "READY", None) for address in addresses]
    assert domain.connections == {(row, column): "C" for row in range(len(addresses)) for column in range(len(addresses))}
    assert domain.timestamp in ("3/25/2025 10:39:43.659", "3/25/2025 10:42:08.082")


def down_with_node_3_unavailable() -> str:
    """DERIVED from the real 18-node AWS capture (no real DOWN capture was found): node #3 made
    UNAVAILABLE, its row and column `N`, the state DOWN."""
    out = []
    for line in text(AWS_18).splitlines():
        row = re.fullmatch(r"(\s+(\d+)\s{8})(.*)", line)
        if line.startswith("Node #3 "):
            line = line.replace("READY      ", "UNAVAILABLE")
        elif row is not None:
            cells = ["N"] * 18 if row.group(2) == "3" else row.group(3).split()
            cells[3] = "N"
            line = row.group(1) + "   ".join(cells)
        out.append(line.replace("Domain State: UP", "Domain State: DOWN"))
    return "\n".join(out) + "\n"


def test_derived_down_domain_names_the_node_and_its_cells() -> None:
    domain = parse_nvidia_imex_ctl(down_with_node_3_unavailable())
    assert domain.state == "DOWN"
    assert domain.node(3) == ImexNode(3, "172.31.49.228", "UNAVAILABLE", "570.172") and not domain.node(3).ready
    assert sum(node.ready for node in domain.nodes) == 17
    broken = domain.not_connected(3)
    assert len(broken) == 18 + 17 and set(broken.values()) == {"N"}
    assert domain.not_connected(0) == {(0, 3): "N", (3, 0): "N"}


def test_mismatch_cells_and_a_missing_state_line() -> None:
    # DERIVED from the real 2-node 570.00 capture: `!M!` (node map mismatch) cells, state line dropped.
    sample = text(GH200_2).replace("       1        C  C", "       1        !M!  C").replace("Domain State: UP\n", "")
    domain = parse_nvidia_imex_ctl(sample)
    assert domain.state is None and domain.not_connected() == {(1, 0): "!M!"}


# DERIVED from a public DRA ComputeDomain test log (search index id 68494140414; not stored in the
# corpus: the log abridges the answer, `Node #3 .. #17 - compute-domain-daemon-0003..0017 -
# UNAVAILABLE` and `...` cells). Node lines #0-#2 and `Domain State: DEGRADED` are verbatim; the
# timestamp is its `-N -j` one; node #3 is one of the abridged UNAVAILABLE nodes with the empty
# version its `-N -j` gives (`version ""`), its row `I` as in the log, the matrix cut to 4 nodes;
# `Nodes:` and the blank lines as in the real 570.172 capture (AWS_18).
DRA_DEGRADED = """9/23/2026 16:54:29.117
Nodes:
Node #0   - compute-domain-daemon-0000 - READY                - Version: NO_GPU
Node #1   * compute-domain-daemon-0001 *  - READY             - Version: NO_GPU
Node #2   - compute-domain-daemon-0002 - READY                - Version: NO_GPU
Node #3   - compute-domain-daemon-0003 - UNAVAILABLE          - Version: 

 Nodes From\\To  0   1   2   3
       0        C   C   C   N
       1        C   C   C   N
       2        C   C   C   N
       3        I   I   I   I

Domain State: DEGRADED
"""


def test_dra_daemon_stars_its_own_node_names_hosts_and_leaves_a_down_peer_without_version() -> None:
    domain = parse_nvidia_imex_ctl(DRA_DEGRADED)
    assert domain.state == "DEGRADED" and domain.timestamp == "9/23/2026 16:54:29.117"
    assert domain.nodes == (ImexNode(0, "compute-domain-daemon-0000", "READY", "NO_GPU"),
                            ImexNode(1, "compute-domain-daemon-0001", "READY", "NO_GPU", local=True),
                            ImexNode(2, "compute-domain-daemon-0002", "READY", "NO_GPU"),
                            ImexNode(3, "compute-domain-daemon-0003", "UNAVAILABLE", None))
    assert domain.not_connected(1) == {(1, 3): "N", (3, 1): "I"}
    # `Version:` with nothing after it, and the old layout's star.
    [node] = parse_nvidia_imex_ctl("Node #3   - compute-domain-daemon-0003 - UNAVAILABLE - Version:\n").nodes
    assert (node.address, node.status, node.version, node.local) == ("compute-domain-daemon-0003", "UNAVAILABLE", None, False)
    [node] = parse_nvidia_imex_ctl("Node #0   * 10.136.206.48 *  - READY\n").nodes
    assert (node.address, node.local, node.version) == ("10.136.206.48", True, None)


def test_this_imex_node_is_the_starred_one_before_any_address() -> None:
    inventory = Inventory(host="worker7", captured_at="2026-09-23T16:54:32Z",
                          imex=parse_nvidia_imex_ctl(DRA_DEGRADED))
    assert this_imex_node(inventory) == inventory.imex.nodes[1]
    # Without a star the host name or an address decides; the star wins over a matching address.
    aws = parse_nvidia_imex_ctl(text(AWS_18))
    named = Inventory(host="ip-172-31-48-98", captured_at="2026-09-23T16:54:32Z", imex=aws,
                      netdevs=[Netdev("enp1s0", addresses=("172.31.48.98/20",))])
    assert this_imex_node(named) == aws.nodes[1]
    starred = parse_nvidia_imex_ctl(text(AWS_18).replace("Node #5   - 172.31.50.44    -", "Node #5   * 172.31.50.44 *  -"))
    named.imex = starred
    assert starred.nodes[5].local and this_imex_node(named) == starred.nodes[5]


@pytest.mark.parametrize("sample", ["", "   \n\n"])
def test_empty_output_is_nothing_to_parse(sample: str) -> None:
    with pytest.raises(NothingToParse):
        parse_nvidia_imex_ctl(sample)


@pytest.mark.parametrize(("sample", "message"), [
    ("Failed to read node configuration file /etc/nvidia-imex/nodes_config.cfg\n", "IMEX is not configured"),
    ("bash: nvidia-imex-ctl: command not found\n", "the tool is not installed"),
    ("hello world\n", "not a legend"),
    ("Nodes:\nNode #0   - 10.0.0.1\n", "ADDRESS - STATUS"),
    ("Node #0   - 10.0.0.1 - READY - Build: 1\n", "Version: V"),
    ("Node #0   * 10.0.0.1 * * - READY\n", "ADDRESS - STATUS"),
    ("Node #0   - 10.0.0.1 * - READY\n", "ADDRESS - STATUS"),
    (" Nodes From\\To  0   1\n       0        C   C   C\n", "2 connection letters"),
    (" Nodes From\\To  0   x\n", "node numbers"),
    (" Nodes From\\To  0\n       0        Z?\n", "connection letters"),
    ("Domain State:\n", "without a state"),
    ("Connectivity Table Legend:\n5/12/2025 06:08:10.580\n", "no `Node #` line"),
])
def test_tool_errors_and_garbage_are_parse_errors(sample: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_nvidia_imex_ctl(sample)


def test_every_cut_and_random_noise_is_parsed_or_a_parse_error() -> None:
    lines = text(AWS_18).splitlines(keepends=True)
    for cut in range(len(lines) + 1):
        try:
            assert isinstance(parse_nvidia_imex_ctl("".join(lines[:cut])), ImexDomain)
        except ParseError:
            pass
    noise = random.Random(23)
    alphabet = "CN!MV -#:0123456789\n\tNode Domain State UP\\To"
    for _ in range(300):
        sample = "".join(noise.choice(alphabet) for _ in range(noise.randint(1, 200)))
        try:
            parse_nvidia_imex_ctl(sample)
        except ParseError:
            pass


def _expect_aws_18(sample: str) -> None:
    domain = parse_nvidia_imex_ctl(sample)
    assert (domain.state, len(domain.nodes), domain.nodes[17].address, set(domain.connections.values())) == (
        "UP", 18, "172.31.56.47", {"C"})


def _expect_gh200(addresses: list[str]) -> Callable[[str], None]:
    def expect(sample: str) -> None:
        domain = parse_nvidia_imex_ctl(sample)
        assert domain.state == "UP" and [node.address for node in domain.nodes] == addresses
        assert {node.version for node in domain.nodes} == {None}
    return expect


# Each real corpus file of tests/data/corpus/nvidia-imex-ctl (test_parsers_corpus.py runs these).
IMEX_EXPECTATIONS: dict[str, Callable[[str], None]] = {
    AWS_18.name: _expect_aws_18,
    GH200_1.name: _expect_gh200(["10.136.206.48"]),
    GH200_2.name: _expect_gh200(["10.136.206.47", "10.136.206.48"]),
}
