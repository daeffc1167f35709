"""Locate the shared corpus of captured tool outputs, and read the archives it holds.

The corpus lives in the repository at `tests/data/corpus/` (copied from the project's
shared corpus, with its PROVENANCE.tsv), so a plain clone tests everything.
"""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "data" / "corpus"


def corpus_dir(kind: str | None = None) -> Path:
    """The corpus folder (or one kind's folder); a missing one is a broken checkout, not a skip."""
    path = CORPUS / kind if kind else CORPUS
    assert path.is_dir(), f"corpus folder missing: {path}"
    return path


def corpus_files(kind: str) -> list[Path]:
    """Plain files of one corpus kind, sorted (for `parametrize` at collection time)."""
    path = corpus_dir(kind)
    return sorted(entry for entry in path.iterdir() if entry.is_file())


def read_ttar(path: Path) -> dict[str, str]:
    """Regular files of a Prometheus `ttar` text archive: archive path -> content.

    Format: `Path: p` / `Lines: n` / n lines of content / `Mode: m` / `# ttar - - -`
    separators; `Directory:` and `SymlinkTo:` entries carry no content. ttar writes a NUL
    as `NULLBYTE` and ends the content with `EOF` when the file had no final newline.
    """
    lines = path.read_text().split("\n")
    files: dict[str, str] = {}
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("Path: ") and index + 1 < len(lines) and lines[index + 1].startswith("Lines: "):
            name = line[len("Path: "):]
            count = int(lines[index + 1][len("Lines: "):])
            body = lines[index + 2: index + 2 + count]
            content = "\n".join(body)
            if content.endswith("EOF"):
                content = content[: -len("EOF")]
            elif count:
                content += "\n"
            files[name] = content.replace("NULLBYTE", "\0")
            index += 2 + count
            continue
        index += 1
    return files


def read_gcm_json(path: Path) -> dict[str, str]:
    """facebookresearch/gcm health-check snapshot: sysfs path -> raw file content."""
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object of path -> content")
    return {str(key): str(value) for key, value in data.items()}
