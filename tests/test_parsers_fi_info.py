"""parse_fi_info (`fi_info -p efa`) and parse_fi_info_version (`fi_info --version`).

The real outputs (AWS docs, p4d and EKS captures, CSCS's cxi console, lgproxy's
`--version`) are in tests/data/corpus/fi_info/ and asserted value by value in
test_parsers_corpus.py; this file covers the answers that are not records.
"""

from __future__ import annotations

import pytest

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.parsers.fi_info import FiProvider, parse_fi_info, parse_fi_info_version
from tests.corpus_util import corpus_dir


def read(name: str) -> str:
    return (corpus_dir("fi_info") / name).read_text()


# -- fi_info -p efa ---------------------------------------------------------------------

def test_no_efa_is_an_empty_list_in_both_spellings() -> None:
    # libfabric before fi_strerror was added prints the bare code; newer appends the reason.
    assert parse_fi_info(read("pbelevich-fair_seq_fsdp_slurm__fi_getinfo-61-no-efa.txt")) == []
    assert parse_fi_info(read("eth-cscs-cscs-docs__fi_info-p-cxi-fi_getinfo-61-no-data-available.txt")) == []


def test_another_fi_getinfo_error_is_a_tool_error_not_an_empty_answer() -> None:
    # util/info.c prints `fi_getinfo: %d` for any failure; only -61 (-FI_ENODATA) means "none".
    with pytest.raises(ParseError, match=r"fi_getinfo failed with -22 \(Invalid argument\)") as caught:
        parse_fi_info("fi_getinfo: -22 (Invalid argument)\n")
    assert caught.value.line_number == 1


def test_records_and_no_data_together_are_refused() -> None:
    text = read("pbelevich-fair_seq_fsdp_slurm__fi_info-p-efa-t-rdm_p4d-rdmap.txt") + "fi_getinfo: -61\n"
    with pytest.raises(ParseError, match="no data"):
        parse_fi_info(text)


def test_empty_and_prompt_only_say_nothing() -> None:
    with pytest.raises(NothingToParse):
        parse_fi_info("")
    with pytest.raises(NothingToParse):
        parse_fi_info("$ fi_info -p efa\n\n")


@pytest.mark.parametrize(("text", "message"), [
    ("hello world\n", "not recognised"),
    ("    fabric: efa\n", "before any 'provider:'"),
    ("provider: efa\n    fabric: efa\n    fabric: efa-direct\n", "given twice"),
    ("provider: efa\n    version: new\n", "unexpected version"),
    ("provider: efa\n    type: RDM\n", "unexpected ep_type"),
    ("provider: efa\n    protocol: EFA\n", "unexpected protocol"),
    ("provider: efa\n    caps: FI_MSG\n", "unexpected field 'caps'"),
    ("provider:\n", "without a name"),
    # `fi_info -l` (providers only) and `fi_info -v` (full dump) are other formats.
    ("efa:\n    version: 111.20\n", "unexpected field 'efa'"),
    ("---\nfi_info:\n", "not recognised"),
])
def test_garbage_is_a_parse_error(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_fi_info(text)


def test_version_output_is_not_a_provider_listing() -> None:
    with pytest.raises(ParseError):
        parse_fi_info(read("telescope-proj-lgproxy__fi_info-version-1.21.0a1.txt"))


def test_indentation_is_not_relied_on() -> None:
    """The AWS docs lost fi_info's field indentation; the parse is the same as fi_info's own layout."""
    flat = parse_fi_info(read("awsdocs-amazon-ec2-user-guide__fi_info-p-efa-t-rdm_p3dn-one-device.txt"))
    indented = parse_fi_info("\n".join(line.strip() if line.strip().startswith("provider:") else "    " + line.strip()
                                       for line in read("awsdocs-amazon-ec2-user-guide__fi_info-p-efa-t-rdm_p3dn-one-device.txt")
                                       .splitlines()))
    assert flat == indented == [FiProvider("efa", "EFA-fe80::94:3dff:fe89:1b70", "efa_0-rdm", "2.0", "FI_EP_RDM",
                                           "FI_PROTO_EFA")]


# -- fi_info --version ------------------------------------------------------------------

def test_version_from_the_source_format() -> None:
    """No capture of `fi_info --version` from an EFA node with provenance exists; this sample is
    built from libfabric's util/info.c format strings (`"%s: %s\\n"` with argv[0] and
    PACKAGE_VERSION, `"libfabric: %s\\n"`, `"libfabric api: %d.%d\\n"`) with the EFA installer's
    version string as values. The real capture of another build is in the corpus
    (telescope-proj-lgproxy__fi_info-version-1.21.0a1.txt)."""
    sample = "fi_info: 1.22.0amzn4.0\nlibfabric: 1.22.0amzn4.0\nlibfabric api: 1.22\n"
    assert parse_fi_info_version(sample) == "1.22.0amzn4.0"
    # argv[0] is printed as typed: run by its path, the first line carries the path.
    by_path = "/opt/amazon/efa/bin/fi_info: 1.22.0amzn4.0\nlibfabric: 1.22.0amzn4.0\nlibfabric api: 1.22\n"
    assert parse_fi_info_version(by_path) == "1.22.0amzn4.0"


def test_version_real_capture() -> None:
    assert parse_fi_info_version(read("telescope-proj-lgproxy__fi_info-version-1.21.0a1.txt")) == "1.21.0a1"


def test_version_nothing_and_garbage() -> None:
    with pytest.raises(NothingToParse):
        parse_fi_info_version("")
    with pytest.raises(NothingToParse):
        parse_fi_info_version("fi_info: 1.22.0amzn4.0\nlibfabric api: 1.22\n")
    with pytest.raises(ParseError):
        parse_fi_info_version(read("pbelevich-fair_seq_fsdp_slurm__fi_info-p-efa-t-rdm_p4d-rdmap.txt"))
    with pytest.raises(ParseError, match="two 'libfabric:'"):
        parse_fi_info_version("libfabric: 1.22.0\nlibfabric: 2.1.0\n")
