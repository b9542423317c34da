"""What the judge reads from a notebook: definitions, in notebook order, never exploratory code."""
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from attnkit.isolation.notebook_code import extract


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


def test_ipython_lines_are_skipped_line_by_line_and_the_rest_loads():
    code = extract(nb(new_code_cell(
        "%matplotlib inline\n!pip install -q numpy\nfiles = !ls\nres = %timeit -o f()\na, b = !echo 1 2\n"
        "help?\nHead??\n?Head\n%timeit?\n"
        "def f():\n    !echo hi\n    x = %time 1\n    return 1\n"
        "!pip install \\\n    torch\n"
        "class Head:\n    v = 1\n")))
    assert code.problems == []
    assert code.source.splitlines() == ["def f():", "    pass", "    pass", "    return 1", "class Head:", "    v = 1"]
    assert code.where(5) == "cell 1, line 16"


def test_cell_magics_keep_a_python_body_and_skip_any_other():
    code = extract(nb(new_code_cell("%%time\nA = 1\n"), new_code_cell("\n%%capture out --no-stderr\n!ls\nB = 2\n"),
                      new_code_cell("%%writefile head.py\nclass Head:\n    pass\n"),
                      new_code_cell("%%bash\nfor f in *; do echo $f; done\n")))
    assert code.problems == [] and code.source == "A = 1\nB = 2\n"
    assert code.line_map == [(1, 2), (2, 4)]


def test_python_with_percent_signs_is_never_changed():
    src = ('FMT = "%d items" % 3\nR = 7 % 3\nDOC = """\n%d lines\n!not a shell line\nhelp?\n"""\n'
           "def f(x):\n    return '%s' % (x %\n        2)\n")
    code = extract(nb(new_code_cell(src), new_code_cell("%matplotlib inline\nS = '''\n%d\n'''\n")))
    assert code.source == src + "S = '''\n%d\n'''\n"


def test_a_syntax_error_after_magics_is_reported_as_it_is():
    code = extract(nb(new_code_cell("%matplotlib inline\n!ls\nclass Head:\n    def f(self)\n        pass\n")))
    assert code.problems == ["syntax error in cell 1 at line 4: expected ':'"]
    code = extract(nb(new_code_cell("def f():\n%time 1\n")))      # a magic cannot be a block's body
    assert code.problems == ["syntax error in cell 1 at line 2: expected an indented block after function "
                             "definition on line 1"]


def test_lines_are_python_lines():
    """A Unicode line separator inside a string is not a line break for Python, nor for the line map."""
    code = extract(nb(new_code_cell("S = 'a\u2028b\x0cc'\nclass Head:\n    pass\n")))
    assert code.source == "S = 'a\u2028b\x0cc'\nclass Head:\n    pass\n"
    assert code.where(2) == "cell 1, line 2"


def test_strange_cells_are_read_as_empty():
    weird = nb(new_code_cell("class Head:\n    pass\n"))
    weird.cells += [{"cell_type": "code", "source": 5, "metadata": []}, "not a cell",
                    {"cell_type": "code", "source": ["x = 1\n", 2, "y = 2\n"], "metadata": {"nbgrader": 1}},
                    new_code_cell("S = '\ud800'\n")]
    code = extract(weird)
    assert code.source == "class Head:\n    pass\nx = 1\ny = 2\n"
    assert code.problems == ["syntax error in cell 5: the cell holds text that is not valid Unicode "
                             "(UnicodeEncodeError)"]


def test_names_the_kept_code_mentions():
    code = extract(nb(new_code_cell("import torch.nn.functional as F\nF.scaled_dot_product_attention\n"
                                    "class Head:\n    def f(self, q):\n        return F.softmax(q, -1)\n")))
    assert {"F", "softmax"} <= code.names and "scaled_dot_product_attention" not in code.names   # a dropped line
    assert not {"q", "f", "Head", "self"} & code.names                                           # its own names


def test_names_are_those_taken_from_outside_not_the_students_own():
    """The judge's text scan reads ``names``: a helper of the student's own that shares a library's name
    (or a method, an argument, a variable) is the student's, while what is imported or reached as an
    attribute stays in, however it is bound."""
    code = extract(new_notebook(cells=[new_code_cell(
        "from torch.nn.functional import multi_head_attention_forward as mine\n"
        "def scaled_dot_product_attention(q, k, v):\n    return (q @ k.transpose(-2, -1)).softmax(-1) @ v\n"
        "class Head:\n    def MultiheadAttention(self, flex_attention):\n        return flex_attention\n"
        "    def forward(self, x):\n        return scaled_dot_product_attention(x, x, x), F.scaled_dot_product_"
        "attention, self.MultiheadAttention(1), nn.attention.flex_attention\n")]))
    assert {"multi_head_attention_forward", "F", "nn", "attention"} <= code.names
    assert not {"scaled_dot_product_attention", "MultiheadAttention", "flex_attention", "mine", "q"} & code.names
