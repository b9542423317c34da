"""What the judge reads from a notebook: definitions, in notebook order, never exploratory code."""
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.notebook_code import extract


def nb(*cells):
    return new_notebook(cells=list(cells))


def test_keeps_definitions_and_constants_only():
    code = extract(nb(new_code_cell("import torch\nx = torch.randn(3)\nplt.plot(x)\nSCALE = 1 / float(4) ** 0.5\n"
                                    "def f():\n    return 1\nclass Head:\n    pass\nhead = Head()\n")))
    assert "import torch" in code.source and "SCALE = 1 / float(4) ** 0.5" in code.source
    assert "class Head" in code.source and "def f" in code.source
    assert "randn" not in code.source and "plt.plot" not in code.source and "head = Head()" not in code.source


def test_skips_test_cells_and_magics_and_keeps_order():
    test = new_code_cell("class Head:\n    wrong = True\n")
    test.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "t"}
    code = extract(nb(new_code_cell("%matplotlib inline\n!ls\nclass Head:\n    v = 1\n"), test,
                      new_markdown_cell("class Head: no"), new_code_cell("class Head:\n    v = 2\n")))
    assert "wrong" not in code.source
    assert code.source.index("v = 1") < code.source.index("v = 2")


def test_syntax_error_is_reported_with_cell_and_line():
    code = extract(nb(new_code_cell("import torch\n"), new_code_cell("class Head:\n    def f(self)\n        pass\n")))
    assert code.problems == ["syntax error in cell 2 at line 2: expected ':'"]
    assert "class Head" not in code.source


def test_line_map_points_back_to_the_cell():
    code = extract(nb(new_code_cell("print(1)\n"), new_code_cell("x = 1\nclass Head:\n    pass\n")))
    line = code.source.splitlines().index("class Head:") + 1
    assert code.where(line) == "cell 2, line 2"
