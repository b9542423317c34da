"""One folder per assignment (autograder/<A>/), found by the registry; the kit's own code names none of them."""
import ast

import nbformat
import pytest

from tests import KIT_ROOT
from tests.fixture_course import NAME
from attnkit.mutants import solution_source
from attnkit.naming import kit_files, naming
from attnkit.engine import config, registry
from attnkit.toolkit.plugin import Assignment

def test_the_registry_finds_each_assignment_folder():
    folders = sorted(p.name for p in (KIT_ROOT / "autograder").iterdir() if (p / "manifest.toml").is_file())
    assert registry.names() == folders and folders
    for a in registry.every():
        assert a.manifest.is_file() and a.driver.is_file() and (a.source / f"{a.name}.pct.py").is_file()
        assert (KIT_ROOT / "source" / a.name).resolve() == a.source.resolve()     # where nbgrader looks
        plugin = a.plugin()
        assert isinstance(plugin, Assignment) and type(plugin) is not Assignment
        assert {c.id for c in config.load(a.name).checks} == set(plugin.checks) and plugin.mistakes
        assert a.mutants().SOLUTION_CELL and a.mutants().MUTANTS
    with pytest.raises(KeyError, match="unknown assignment"):
        registry.get(f"../autograder/{registry.names()[0]}")


def test_the_contract_names_what_the_solution_defines():
    """The manifest's [contract] is the one place the student's class or function is named: its cell is a
    solution cell of the source, the solution defines that name there as that kind, and the corpus's answer
    cell is that cell."""
    for a in registry.every():
        contract = config.load(a.name).contract
        nb = nbformat.read(a.source / f"{a.name}.ipynb", as_version=4)
        cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == contract.cell]
        assert len(cells) == 1 and cells[0].metadata["nbgrader"]["solution"], (a.name, contract.cell)
        defined = {(type(n).__name__, n.name) for n in ast.parse(solution_source(a.name, contract.cell)).body
                   if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        kind = "ClassDef" if contract.kind == "class" else "FunctionDef"
        assert (kind, contract.name) in defined, (a.name, contract, defined)
        assert contract.signature.startswith(contract.name + "(")
        assert a.mutants().SOLUTION_CELL == contract.cell


def test_a_contract_of_another_kind_is_refused(tmp_path, fixture_course):
    manifest = registry.get(NAME).manifest.read_text()
    assert 'kind = "function"' in manifest
    (tmp_path / "manifest.toml").write_text(manifest.replace('kind = "function"', 'kind = "module"'))
    with pytest.raises(ValueError, match='kind must be "class" or "function"'):
        config.parse(tmp_path / "manifest.toml")


def test_no_module_outside_the_assignment_folders_names_an_assignment():
    found = naming(registry.names(), kit_files(KIT_ROOT), KIT_ROOT)
    assert not found, f"the kit's code names an assignment (ask attnkit/engine/registry.py instead): {found}"


def shipped_imports_of_tests(root=KIT_ROOT) -> list[str]:
    """Where the kit's shipped code (attnkit, and the course's autograder/) imports the test suite, which an installed
    kit and a command run from outside the checkout do not have (`make demo` failed so)."""
    found = []
    for room in ("attnkit", "autograder"):
        for p in sorted((root / room).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text(), str(p))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
                found += [f"{p.relative_to(root)}:{node.lineno}" for n in names if n.split(".")[0] == "tests"]
    return found


def test_the_shipped_code_never_imports_the_test_suite(tmp_path):
    assert not shipped_imports_of_tests(), shipped_imports_of_tests()
    (tmp_path / "attnkit").mkdir()
    (tmp_path / "autograder").mkdir()
    (tmp_path / "autograder" / "x.py").write_text("def f():\n    from tests.notebooks import cell\n")
    assert shipped_imports_of_tests(tmp_path) == ["autograder/x.py:2"]       # the scan can fail


def test_the_guard_sees_a_name_where_one_is_written(tmp_path):
    """The scan itself can fail: a name in a string or as an identifier is found, a longer word or prose in a
    comment is not; outside Python every word counts."""
    (tmp_path / "a.py").write_text("x = 'week5'\ny = 'week5s'\n# a week5 comment\n"
                                   "from autograder import week5\n")
    (tmp_path / "b.sh").write_text("echo week5\n")
    assert naming(["week5"], [tmp_path / "a.py", tmp_path / "b.sh"], root=tmp_path) == [
        ("a.py", 1, "week5"), ("a.py", 4, "week5"), ("b.sh", 1, "week5")]


def test_a_plugin_that_lacks_a_check_of_its_manifest_is_refused(fixture_course, monkeypatch):
    """The plug-in's checks are what the judge calls: a manifest id without one is said, naming the folder."""
    plugin = registry.get(NAME).plugin()
    monkeypatch.delitem(plugin.checks, "reference_agreement")
    with pytest.raises(TypeError, match="manifest.toml lists checks its plug-in has not: reference_agreement"):
        registry.get(NAME).plugin()
