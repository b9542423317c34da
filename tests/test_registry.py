"""One folder per assignment (assignments/<A>/), found by the registry; the kit's own code names none of them."""
import io
import re
import tokenize

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
    """(file, line number, name) wherever a file names one of ``names``: in Python, as a name or inside a
    string (prose in comments may use an ordinary word an assignment is also called); elsewhere, as a word."""
    words = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    found = []
    for p in files:
        text = p.read_text(errors="replace")
        if p.suffix == ".py":
            spans = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
                     if tok.type in (tokenize.NAME, tokenize.STRING)]
        else:
            spans = list(enumerate(text.splitlines(), 1))
        found += [(p.relative_to(root).as_posix(), i, m.group(1)) for i, s in spans for m in words.finditer(s)]
    return found


def test_the_registry_finds_each_assignment_folder():
    folders = sorted(p.name for p in (KIT_ROOT / "assignments").iterdir() if (p / "manifest.toml").is_file())
    assert registry.names() == folders and folders
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
    """The scan itself can fail: a name in a string or as an identifier is found, a longer word or prose in a
    comment is not; outside Python every word counts."""
    (tmp_path / "a.py").write_text("x = 'causal_head'\ny = 'causal_header'\n# a causal_head comment\n"
                                   "from assignments import causal_head\n")
    (tmp_path / "b.sh").write_text("echo causal_head\n")
    assert naming(["causal_head"], [tmp_path / "a.py", tmp_path / "b.sh"], root=tmp_path) == [
        ("a.py", 1, "causal_head"), ("a.py", 4, "causal_head"), ("b.sh", 1, "causal_head")]
