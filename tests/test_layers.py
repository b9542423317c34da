"""The kit's layers, arrows only downward: commands -> nbgrader_ext -> engine -> isolation -> toolkit.

Read from the source (every import statement, at the top or inside a function), not from what happens to be
imported at run time. A course's autograder/ imports the toolkit alone of the kit, every file of it with no
exemption (plug-in, driver, corpus): attnkit.toolkit is the one public API a course uses.
"""
import ast
from pathlib import Path

import pytest

from tests import KIT_ROOT

PACKAGE = KIT_ROOT / "attnkit"
ORDER = ["toolkit", "isolation", "engine", "nbgrader_ext", "commands"]


def layer_of(module: str) -> str:
    """attnkit.engine.judge -> engine; attnkit.cli, attnkit.autograde.run -> commands."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in ORDER else "commands"


def imports(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, imported attnkit module) of every import statement in ``path`` (the module ``module``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")[:-1] if path.name != "__init__.py" else module.split(".")
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            found += [(node.lineno, f"{base}.{a.name}" if (PACKAGE.parent / Path(*f"{base}.{a.name}".split("."))).with_suffix(".py").exists()
                       or (PACKAGE.parent / Path(*f"{base}.{a.name}".split("."))).is_dir() else base) for a in node.names]
    return [(line, m) for line, m in found if m.split(".")[0] == "attnkit"]


def upward_imports(root: Path) -> list[str]:
    wrong = []
    for path in sorted((root / "attnkit").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        here = ORDER.index(layer_of(module))
        for line, target in imports(path, module):
            if target in ("attnkit", "attnkit.fast_start"):      # the package's own start-up: no layer
                continue
            if ORDER.index(layer_of(target)) > here:
                wrong.append(f"{path.relative_to(root)}:{line} ({layer_of(module)}) imports {target} ({layer_of(target)})")
    return wrong


def plugin_imports(root: Path) -> list[str]:
    """Where a course's autograder/ imports anything of the kit but the toolkit: every file, its driver, its corpus
    (mutants.py) and any test helper alike; what is released to students, nothing of the kit at all."""
    wrong = []
    for path in sorted((root / "autograder").rglob("*.py")):
        released = "source" in path.relative_to(root).parts
        for line, target in imports(path, "autograder.x"):
            if released or not (target == "attnkit.toolkit" or target.startswith("attnkit.toolkit.")):
                wrong.append(f"{path.relative_to(root)}:{line} imports {target}")
    return wrong


def test_the_kit_imports_only_downward():
    assert not upward_imports(KIT_ROOT), "\n".join(upward_imports(KIT_ROOT))


def test_a_plugin_imports_only_the_toolkit():
    assert not plugin_imports(KIT_ROOT), "\n".join(plugin_imports(KIT_ROOT))


@pytest.mark.parametrize("room, line, wrong", [
    ("attnkit/isolation/x.py", "from attnkit.engine import judge", True),
    ("attnkit/toolkit/x.py", "def f():\n    from attnkit.isolation.sandbox import run_child", True),
    ("attnkit/engine/x.py", "from attnkit import safe_csv", True),                    # a command, from the engine
    ("attnkit/engine/x.py", "from attnkit.isolation import sandbox", False),
    ("attnkit/x.py", "from attnkit.nbgrader_ext import steps", False),
])
def test_the_scan_sees_an_upward_import(tmp_path, room, line, wrong):
    """The scan can fail: an import placed in a lower layer is found, one that points down is not."""
    for sub in ("toolkit", "isolation", "engine", "nbgrader_ext"):
        (tmp_path / "attnkit" / sub).mkdir(parents=True)
        (tmp_path / "attnkit" / sub / "__init__.py").write_text("")
    (tmp_path / "attnkit" / "__init__.py").write_text("")
    (tmp_path / room).write_text(line + "\n")
    assert bool(upward_imports(tmp_path)) is wrong


@pytest.mark.parametrize("name, line", [
    ("checks.py", "from attnkit.engine.judge import grade"),
    ("drive.py", "from attnkit.isolation.child_runtime import student_object"),
    ("mutants.py", "from attnkit.mutants import mutant"),
    ("mutants.py", "def f():\n    from attnkit.engine import config"),
    ("conftest.py", "import attnkit.engine.judge"),
    ("source/helper.py", "from attnkit.toolkit.require import require"),          # released: no kit at all
])
def test_the_plugin_scan_sees_any_import_but_the_toolkit(tmp_path, name, line):
    path = tmp_path / "autograder" / "a" / name
    path.parent.mkdir(parents=True)
    path.write_text(line + "\n")
    assert len(plugin_imports(tmp_path)) == 1, plugin_imports(tmp_path)
    path.write_text("from attnkit.toolkit.driver import student_object\nimport attnkit.toolkit.corpus\n")
    assert plugin_imports(tmp_path) == ([] if "source" not in name else
                                        [f"autograder/a/{name}:1 imports attnkit.toolkit.driver",
                                         f"autograder/a/{name}:2 imports attnkit.toolkit.corpus"])


def test_a_fresh_scaffold_imports_only_the_toolkit(tmp_path):
    """What `attnkit new` writes is a course's too: rendered, it passes the same scan."""
    from attnkit.scaffold import MISTAKE_IDS, TEMPLATES
    import jinja2
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined)
    rendered = 0
    for template in TEMPLATES.rglob("*.py.j2"):
        rel = template.relative_to(TEMPLATES).as_posix()
        out = tmp_path / "autograder" / "tiny" / rel[:-len(".j2")].replace("NAME", "tiny")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(env.get_template(rel).render(name="tiny", ids=MISTAKE_IDS))
        rendered += 1
    assert rendered >= 8 and plugin_imports(tmp_path) == [], plugin_imports(tmp_path)
