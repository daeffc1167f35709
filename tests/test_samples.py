"""The sample reports in README.md and docs/*.md are the real output of their commands today
(scripts/update_samples.py writes them); a change to the output fails here until they are
regenerated, so the README cannot show an old report again."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "update_samples.py"
REGENERATE = "run `python scripts/update_samples.py` to regenerate"


def _load():
    spec = importlib.util.spec_from_file_location("update_samples", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("update_samples", module)   # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


samples_script = _load()


def test_readme_and_docs_have_samples() -> None:
    found = {path.name: [sample.args for sample in samples_script.samples(path)] for path in samples_script.files()}
    assert found["README.md"] == ["check --no-probe --snapshot tests/fixtures/nodes/dgx-h100-port-hdr"]
    assert found["cli.md"] == ["check --no-probe --snapshot tests/fixtures/nodes/cpu-node"]


def test_the_readme_sample_is_the_set_up_command() -> None:
    """The README opens with the command a new user runs; its sample is that command's report."""
    readme = (REPO / "README.md").read_text()
    first_block = readme.split("```\n", 2)[1]
    args = samples_script.samples(REPO / "README.md")[0].args
    assert f"netdoctor {args}\n" in first_block


@pytest.mark.parametrize("path", samples_script.files(), ids=lambda path: path.name)
def test_samples_are_the_real_output(path: Path) -> None:
    for sample in samples_script.samples(path):
        expected = samples_script.expected_body(sample.args)
        assert sample.body == expected, (f"{path.relative_to(REPO)}: the sample of `netdoctor {sample.args}` is not "
                                         f"what it prints today; {REGENERATE}")


def test_a_sample_is_deterministic() -> None:
    """No run time, no start time, no terminal width: the normalised output of a run is the
    sample, and the grade line keeps nothing that changes."""
    args = "check --no-probe --snapshot tests/fixtures/nodes/dgx-h100-port-hdr"
    body = samples_script.expected_body(args)
    grade_line = body.splitlines()[2]
    assert grade_line == "dgx-h100-port-hdr: FAIL   rules dgx-h100   <run time>   <start time>"
    assert max(len(line) for line in body.splitlines()[1:-1]) <= 100
    samples_script.real_output.cache_clear()
    assert samples_script.expected_body(args) == body


def test_drift_is_found_and_rewritten(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    text = (REPO / "README.md").read_text()
    readme.write_text(text.replace("rules dgx-h100   <run time>", "rules dgx-h100   0.07 s", 1))
    assert samples_script.update(readme, write=False) == [samples_script.samples(REPO / "README.md")[0].args]
    assert samples_script.update(readme, write=True) and readme.read_text() == text
    assert samples_script.update(readme, write=False) == []


def test_a_marker_without_its_end_is_an_error(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- sample: check --no-probe -->\n```\n```\n")
    with pytest.raises(samples_script.SampleError, match="without its"):
        samples_script.update(page, write=False)
