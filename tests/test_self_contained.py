"""The suite runs from a plain clone: no test reads outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPOSITORY = TESTS.parent
# Ways a test could reach past the repository root: the old `../shared` corpus, an
# absolute workspace path, or a parents[N] that climbs above the repository.
OUTSIDE = re.compile(r"\.\./shared|/work/shared|/work/main|parents\[(?:[2-9]|\d\d+)\]")


def test_no_test_reads_outside_the_repository() -> None:
    offenders = [f"{path.relative_to(REPOSITORY)}:{number}: {line.strip()}"
                 for path in sorted(TESTS.rglob("*.py")) if path != Path(__file__).resolve()
                 for number, line in enumerate(path.read_text().splitlines(), 1) if OUTSIDE.search(line)]
    assert not offenders, "tests that reach outside the repository:\n" + "\n".join(offenders)


def test_corpus_is_in_the_repository_with_its_provenance() -> None:
    corpus = TESTS / "data" / "corpus"
    provenance = (corpus / "PROVENANCE.tsv").read_text().splitlines()
    listed = {line.split("\t", 1)[0] for line in provenance[1:] if line.strip()}
    assert len(listed) >= 50
    missing = sorted(path for path in listed if not (corpus / path).exists())
    assert not missing, f"PROVENANCE.tsv names files that are not in tests/data/corpus: {missing[:10]}"
