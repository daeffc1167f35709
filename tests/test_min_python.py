"""Python 3.10 is the oldest netdoctor runs on (Ubuntu 22.04 and DGX OS 6 ship 3.10.12).

The suite runs on 3.11+, so 3.10 is held by:
- vermin, a static minimum-version check, over every module of netdoctor/, plugins/ and packaging/;
- an AST scan for what vermin does not see: 3.11 behaviour of APIs that exist in 3.10
  (fromisoformat's `Z`, to_bytes' defaults), regex syntax, starred subscripts;
- the zipapp run with every `sys.version_info` branch taking its 3.10 side (tomllib absent),
  and its version guard, which must refuse an older interpreter with exit 3 and one line;
- where real interpreters are found (python3.10, python3.9, 2.7: pyenv, a distribution), the
  zipapp run on them. A fresh CI machine has none: the tests above stand without them.
Failures name the file and line.
"""

from __future__ import annotations

import ast
import enum
import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from netdoctor.util import parse_iso_utc
from netdoctor.vocabulary import _StrEnumBackport

REPO = Path(__file__).resolve().parent.parent
MINIMUM = (3, 10)
GUARD = REPO / "packaging" / "zipapp" / "__main__.py"
PRODUCT = sorted(path for root in ("netdoctor", "plugins", "packaging") for path in (REPO / root).rglob("*.py")
                 if path != GUARD)
FIXTURE = REPO / "tests" / "fixtures" / "nodes" / "dgx-h100"
# The only lines vermin is told to skip (`# novermin`): imports guarded by a version or ImportError.
NOVERMIN_ALLOWED = {("netdoctor/packs/load.py", "import tomllib"), ("netdoctor/vocabulary.py", "from enum import StrEnum")}
# Runs a script or archive as __main__ with sys.version_info faked (argv: version, path, args...);
# a faked 3.10 has no tomllib. Says at exit which StrEnum and TOML parser netdoctor took.
HARNESS = textwrap.dedent("""
    import atexit, collections, runpy, sys
    numbers = tuple(int(part) for part in sys.argv[1].split("."))
    sys.version_info = collections.namedtuple("version_info", "major minor micro releaselevel serial")(*numbers, "final", 0)
    if numbers < (3, 11):
        sys.modules["tomllib"] = None
    def took():
        vocabulary, load = sys.modules.get("netdoctor.vocabulary"), sys.modules.get("netdoctor.packs.load")
        sys.stderr.write("took: %s %s\\n" % (vocabulary and vocabulary.StrEnum.__name__, load and load.tomllib.__name__))
    atexit.register(took)
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")
""")


def _relative(path: Path | str) -> str:
    return str(Path(path).resolve().relative_to(REPO)) if Path(path).resolve().is_relative_to(REPO) else str(path)


# -- vermin --------------------------------------------------------------------------------


def _vermin(paths: list[Path], *targets: str) -> tuple[int, list[str]]:
    """vermin's violations of `targets` in `paths`: `file:line: feature requires X`."""
    pytest.importorskip("vermin", reason="vermin is in the test extra: pip install -e '.[test]'")
    arguments = [f"--target={target}" for target in targets]
    done = subprocess.run([sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())", *arguments, "--violations",
                           "--eval-annotations", "--no-tips", "--format", "parsable", *map(str, paths)],
                          capture_output=True, text=True, timeout=120)
    found = []
    for line in done.stdout.splitlines():
        file, number, _, _, py3, feature = (line.split(":", 5) + [""] * 6)[:6]
        if feature.strip():
            found.append(f"{_relative(file)}:{number}: {feature.strip()} requires Python {py3}")
    return done.returncode, found


def test_every_module_runs_on_python_3_10_by_vermin() -> None:
    assert len(PRODUCT) > 150 and REPO / "packaging" / "zipapp" / "_netdoctor_pyz.py" in PRODUCT
    code, found = _vermin(PRODUCT, "%d.%d-" % MINIMUM)
    assert found == [] and code == 0, "needs a newer Python than 3.10:\n" + "\n".join(found)


def test_the_zipapp_guard_parses_on_any_python() -> None:
    code, found = _vermin([GUARD], "2.7-", "3.0-")
    assert found == [] and code == 0, "the version guard must parse on old interpreters:\n" + "\n".join(found)


def test_vermin_would_catch_3_11_code(tmp_path: Path) -> None:
    sample = tmp_path / "new.py"
    sample.write_text("import enum\nimport tomllib\n\n\nclass Kind(enum.StrEnum):\n    A = 'a'\n\n\n"
                      "try:\n    pass\nexcept* ValueError:\n    pass\n")
    old = tmp_path / "guard.py"
    old.write_text("import sys\nsys.stderr.write(f'{sys.version}')\n")
    code, found = _vermin([sample], "3.10-")
    assert code != 0 and [line.split(": ", 1)[0].rsplit(":", 1)[1] for line in found] == ["2", "5", "11"], found
    code, found = _vermin([old], "2.7-", "3.0-")
    assert code != 0 and "f-strings" in "\n".join(found), found


def test_only_guarded_imports_are_hidden_from_vermin() -> None:
    hidden = {(_relative(path), line.split("#")[0].strip()) for path in PRODUCT
              for line in path.read_text(encoding="utf-8").splitlines() if re.search(r"#\s*novermin|#\s*novm\b", line)}
    assert hidden == NOVERMIN_ALLOWED


# -- what vermin does not see --------------------------------------------------------------

RE_FUNCTIONS = {"compile", "match", "search", "fullmatch", "findall", "finditer", "sub", "subn", "split"}
# Keyword arguments new in 3.11 that vermin does not know.
KEYWORDS_311 = {"process_group": "subprocess's process_group=", "weakref_slot": "dataclass(weakref_slot=)"}


def _regex_syntax_311(pattern: str | bytes, flags: int) -> list[str]:
    from re import _constants, _parser  # type: ignore[attr-defined]  # 3.11+, as the suite

    found: list[str] = []

    def walk(item: Any) -> None:
        if isinstance(item, _parser.SubPattern):
            for op, argument in item:
                if op is _constants.ATOMIC_GROUP:
                    found.append("an atomic group (?>...)")
                elif op is _constants.POSSESSIVE_REPEAT:
                    found.append("a possessive quantifier (*+ ++ ?+ {}+)")
                walk(argument)
        elif isinstance(item, (list, tuple)):
            for element in item:
                walk(element)

    walk(_parser.parse(pattern, flags))
    return found


def _behaviour_311(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "fromisoformat":
            found.append((node.lineno, "fromisoformat: 3.10's refuses `Z` and most ISO forms (netdoctor.util.parse_iso_utc)"))
        elif isinstance(node, ast.Subscript) and (isinstance(node.slice, ast.Starred) or isinstance(node.slice, ast.Tuple)
                                                  and any(isinstance(e, ast.Starred) for e in node.slice.elts)):
            found.append((node.lineno, "a starred subscript (3.11 syntax)"))
        elif isinstance(node, ast.Call):
            function = node.func
            named = {keyword.arg for keyword in node.keywords}
            for keyword, what in KEYWORDS_311.items():
                if keyword in named:
                    found.append((node.lineno, f"{what} (3.11)"))
            if isinstance(function, ast.Attribute) and function.attr in ("to_bytes", "from_bytes"):
                needed = 2 if function.attr == "to_bytes" else 1      # from_bytes(data, byteorder)
                given = len(node.args) - (1 if function.attr == "from_bytes" else 0)
                if given + len(named & {"length", "byteorder"}) < needed:
                    found.append((node.lineno, f"{function.attr}() without length/byteorder (3.11 defaults)"))
            if (isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name) and function.value.id == "re"
                    and function.attr in RE_FUNCTIONS and node.args and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, (str, bytes))):
                verbose = any(isinstance(n, ast.Attribute) and n.attr in ("VERBOSE", "X")
                              for argument in [*node.args[1:], *node.keywords] for n in ast.walk(argument))
                for what in _regex_syntax_311(node.args[0].value, re.VERBOSE if verbose else 0):
                    found.append((node.lineno, f"{what} in a regular expression (3.11)"))
    return found


def test_no_3_11_behaviour_vermin_cannot_see() -> None:
    found = [f"{_relative(path)}:{line}: {what}" for path in PRODUCT
             for line, what in _behaviour_311(ast.parse(path.read_text(encoding="utf-8"), str(path)))]
    assert found == [], "3.11-only behaviour:\n" + "\n".join(found)


def test_the_scan_would_catch_each_case() -> None:
    sample = textwrap.dedent("""
        import datetime, re, subprocess
        datetime.datetime.fromisoformat("2026-11-21T22:40:00Z")
        x = table[*keys]
        y = (5).to_bytes()
        z = int.from_bytes(b"a")
        subprocess.run(["true"], process_group=0)
        A = re.compile(r"a*+b")
        B = re.match(r"(?>ab|a)c", "abc")
        fine = (5).to_bytes(2, "big"), int.from_bytes(b"a", "big"), re.compile(r"a*b+?"), table[keys]
        also_fine = re.compile(r"x  # a++ in a comment is no quantifier", re.VERBOSE)
    """)
    assert sorted(line for line, _ in _behaviour_311(ast.parse(sample))) == [3, 4, 5, 6, 7, 8, 9]


# -- 3.10 code paths, on this interpreter --------------------------------------------------


class _Backport(_StrEnumBackport):
    RED = "red"
    GREEN = enum.auto()


class _Real(enum.StrEnum):
    RED = "red"
    GREEN = enum.auto()


def test_the_str_enum_backport_behaves_as_3_11s() -> None:
    for kind in (_Backport, _Real):
        assert (str(kind.RED), f"{kind.RED}", f"{kind.RED:>5}", "%s" % kind.RED) == ("red", "red", "  red", "red")
        assert json.dumps({kind.RED: [kind.GREEN]}) == '{"red": ["green"]}'
        assert kind("red") is kind.RED and kind.RED == "red" and isinstance(kind.RED, str)
        assert repr(kind.RED) == f"<{kind.__name__}.RED: 'red'>"
    with pytest.raises(TypeError, match="is not a string"):
        _StrEnumBackport("Numbers", {"ONE": 1})


@pytest.mark.parametrize(("text", "utc"), [
    ("2026-11-21T22:40:00Z", "2026-11-21T22:40:00+00:00"),
    ("2026-11-21t22:40:00z", "2026-11-21T22:40:00+00:00"),
    ("2026-11-21T23:40:00+01:00", "2026-11-21T22:40:00+00:00"),
    ("2026-11-21 20:40:00-0200", "2026-11-21T22:40:00+00:00"),
    ("2026-11-21T23:40:00.5+01", "2026-11-21T22:40:00.500000+00:00"),
    ("2026-11-21T22:40:00.123456789Z", "2026-11-21T22:40:00.123456+00:00"),
    (" 2026-11-21T22:40 ", "2026-11-21T22:40:00+00:00"),
    ("2026-11-21", "2026-11-21T00:00:00+00:00"),
])
def test_times_parse_alike_on_every_python(text: str, utc: str) -> None:
    assert parse_iso_utc(text).isoformat() == utc


@pytest.mark.parametrize("text", ["last tuesday", "2026-13-01T00:00:00Z", "2026-11-21T22:40:00+25:00",
                                  "\uff12\uff10\uff12\uff16-11-21", "2026-11-21T22:40:00Zjunk", "0001-01-01T00:00:00+01:00"])
def test_times_that_are_not_iso_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not an ISO 8601 time"):
        parse_iso_utc(text)


# -- the zipapp ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def zipapp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("zipapp") / "netdoctor.pyz"
    subprocess.run([sys.executable, str(REPO / "packaging" / "build-zipapp.py"), "-o", str(output)], check=True,
                   capture_output=True, text=True, timeout=120)
    return output


def _run(python: str, *arguments: str, cache: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env.update(NETDOCTOR_PYZ_CACHE=str(cache), **extra)
    return subprocess.run([python, *arguments], capture_output=True, text=True, timeout=120, env=env, cwd=cache.parent)


def _without_timing(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_timing(item) for key, item in value.items() if key not in ("started_at", "duration_s")}
    if isinstance(value, list):
        return [_without_timing(item) for item in value]
    return value


def _refusal(version: str) -> str:
    return f"netdoctor: error: needs Python >= {MINIMUM[0]}.{MINIMUM[1]}, this is {version}\n"


def test_the_guard_refuses_older_pythons_with_exit_3(tmp_path: Path) -> None:
    start = tmp_path / "start"
    start.mkdir()
    (start / "_netdoctor_pyz.py").write_text("def run(build_id):\n    print('started', build_id)\n")
    for version, code in (("3.9.18", 3), ("2.7.18", 3), ("3.10.0", 0), ("3.12.1", 0)):
        done = _run(sys.executable, "-c", HARNESS, version, str(GUARD), cache=tmp_path / "cache", PYTHONPATH=str(start))
        assert done.returncode == code, (version, done.stderr)
        if code:
            assert done.stderr.startswith(_refusal(version)) and done.stdout == "", done.stderr
        else:
            assert done.stdout == "started @BUILD_ID@\n", done.stderr


def test_the_zipapp_refuses_older_pythons_with_exit_3(zipapp: Path, tmp_path: Path) -> None:
    done = _run(sys.executable, "-c", HARNESS, "3.9.18", str(zipapp), "--version", cache=tmp_path / "cache")
    assert done.returncode == 3 and done.stderr.startswith(_refusal("3.9.18")), done.stderr
    assert not (tmp_path / "cache").exists()      # refused before unpacking anything


def test_the_zipapp_takes_its_3_10_branches_and_reports_the_same(zipapp: Path, tmp_path: Path) -> None:
    arguments = ("check", "--no-probe", "--snapshot", str(FIXTURE), "--format", "json")
    native = _run(sys.executable, str(zipapp), *arguments, cache=tmp_path / "cache")
    assert native.returncode == 0, native.stderr
    as_310 = _run(sys.executable, "-c", HARNESS, "3.10.12", str(zipapp), *arguments, cache=tmp_path / "cache")
    assert as_310.returncode == 0, as_310.stderr
    assert "took: _StrEnumBackport tomli\n" in as_310.stderr
    assert _without_timing(json.loads(as_310.stdout)) == _without_timing(json.loads(native.stdout))


@functools.cache
def _real_pythons() -> dict[tuple[int, int], str]:
    """Interpreters older than this one found here (PATH, pyenv), by version."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates = [str(path) for path in sorted(root.glob("*/bin/python"))]
    candidates += [found for minor in range(0, 11) for name in (f"python3.{minor}", "python2.7") if (found := shutil.which(name))]
    pythons: dict[tuple[int, int], str] = {}
    for candidate in dict.fromkeys(candidates):
        try:
            done = subprocess.run([candidate, "-c", "import sys; print('%d %d' % sys.version_info[:2])"],
                                  capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and len(done.stdout.split()) == 2:
            version = tuple(int(part) for part in done.stdout.split())
            if version < sys.version_info[:2]:
                pythons.setdefault(version, candidate)     # type: ignore[arg-type]
    return pythons


def test_the_zipapp_runs_on_a_real_python_3_10(zipapp: Path, tmp_path: Path) -> None:
    python = _real_pythons().get(MINIMUM)
    if python is None:
        pytest.skip("no Python 3.10 here (pyenv or a distribution's python3.10)")
    arguments = ("check", "--no-probe", "--snapshot", str(FIXTURE), "--format", "json")
    version = _run(python, str(zipapp), "--version", cache=tmp_path / "cache")
    assert version.returncode == 0 and version.stdout.startswith("netdoctor "), version.stderr
    old = _run(python, str(zipapp), *arguments, cache=tmp_path / "cache")
    native = _run(sys.executable, str(zipapp), *arguments, cache=tmp_path / "cache")
    assert old.returncode == 0 == native.returncode, old.stderr
    assert _without_timing(json.loads(old.stdout)) == _without_timing(json.loads(native.stdout))


def test_real_older_pythons_are_refused_in_one_line(zipapp: Path, tmp_path: Path) -> None:
    older = {version: python for version, python in _real_pythons().items() if version < MINIMUM}
    if not older:
        pytest.skip("no Python older than 3.10 here")
    for version, python in sorted(older.items()):
        done = _run(python, str(zipapp), "--version", cache=tmp_path / "cache")
        assert done.returncode == 3 and done.stdout == "", (python, done.stderr)
        assert re.fullmatch(r"netdoctor: error: needs Python >= 3\.10, this is %d\.%d\.\d+\n" % version, done.stderr)


def test_the_build_refuses_a_dependency_that_dropped_3_10() -> None:
    spec = importlib.util.spec_from_file_location("build_zipapp", REPO / "packaging" / "build-zipapp.py")
    assert spec and spec.loader
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    assert [build._refuses_minimum(needs) for needs in (None, ">=3.8", ">=3.10", ">=3.7,<4", ">=3.11", ">3.10.0", "~=3.12")] \
        == [None, None, None, None, ">=3.11", ">3.10.0", "~=3.12"]


def test_every_place_that_names_the_minimum_agrees() -> None:
    wanted = "%d.%d" % MINIMUM
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert f'requires-python = ">={wanted}"' in pyproject
    assert "tomli>=1.1; python_version < '3.11'" in pyproject
    assert f"MINIMUM = ({MINIMUM[0]}, {MINIMUM[1]})" in GUARD.read_text(encoding="utf-8")
    assert f'MINIMUM_PYTHON = "{wanted}"' in (REPO / "packaging" / "build-zipapp.py").read_text(encoding="utf-8")
    assert f"python3 (>= {wanted})" in (REPO / "packaging" / "debian" / "control.in").read_text(encoding="utf-8")
