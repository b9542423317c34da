"""One folder per assignment (assignments/<A>/), found by the registry; the kit's own code names none of them."""
import re

import pytest

from attnkit import KIT_ROOT
from autograder import config, registry

# The kit's code: what must work for any assignment the registry finds. The tests still name the two
# assignments they were written for (the course's own checks); the kit's modules and benchmarks may not.
KIT_CODE = ("attnkit", "autograder", "bench")
SUFFIXES = {".py", ".j2", ".sh", ".toml", ".cfg", ""}


def kit_files():
    for room in KIT_CODE:
        for p in sorted((KIT_ROOT / room).rglob("*")):
            if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts:
                yield p
    yield KIT_ROOT / "Makefile"
    yield KIT_ROOT / "pyproject.toml"


def naming(names, files, root=KIT_ROOT):
    """(file, line number, name) wherever a file names one of ``names`` as a word."""
    words = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    return [(p.relative_to(root).as_posix(), i, m.group(1)) for p in files
            for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1) for m in words.finditer(line)]


def test_the_registry_finds_each_assignment_folder():
    assert registry.names() == ["attention_lm", "causal_head"]
    for a in registry.every():
        assert a.manifest.is_file() and a.driver.is_file() and (a.source / f"{a.name}.pct.py").is_file()
        assert (KIT_ROOT / "source" / a.name).resolve() == a.source.resolve()     # where nbgrader looks
        judge = a.judge()
        assert callable(judge.make_plan) and callable(judge.evidence) and callable(judge.attention_pattern)
        assert {c.id for c in config.load(a.name).checks} <= {n[5:] for n in dir(judge.checks) if n.startswith("test_")}
        assert a.corpus().SOLUTION_CELL and a.corpus().MISTAKES
    with pytest.raises(KeyError, match="unknown assignment"):
        registry.get("../assignments/causal_head")


def test_no_module_outside_the_assignment_folders_names_an_assignment():
    found = naming(registry.names(), kit_files())
    assert not found, f"the kit's code names an assignment (ask autograder/registry.py instead): {found}"


def test_the_guard_sees_a_name_where_one_is_written(tmp_path):
    """The scan itself can fail: a file that names an assignment is found, a longer word is not."""
    (tmp_path / "a.py").write_text("x = 'causal_head'\ny = 'causal_header'\n")
    assert naming(["causal_head"], [tmp_path / "a.py"], root=tmp_path) == [("a.py", 1, "causal_head")]
