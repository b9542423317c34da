"""Which module-level statements of a notebook the judge runs besides its definitions: a slice.

The contract's class or function (the manifest's [contract] name) is what the checks call. Whatever it
reads from the notebook's module level, directly or through the student's own helpers, must hold what
it holds after a top-to-bottom run of the notebook, or a correct class fails with a NameError. So the
judge follows those reads back, statically (``symtable`` for what function, lambda and class bodies
read; ``ast`` for what a statement reads when it runs: right-hand sides, default arguments,
decorators, base classes), to the statement that last binds each name before the read (the contract's
own reads happen after the whole notebook: its last binding), and runs that statement too, with what
*it* reads, transitively, in notebook order.

A statement found that way runs only if it is plain, cheap computation. It may be: an assignment of any
form (``=``, tuple unpacking, ``+=``, annotated), an ``if``/``try`` made of such statements, or a
statement that changes a needed value in place (``mask[0] = 1``, ``W.uniform_()``, ``nn.init.zeros_(W)``);
its expressions may hold literals, arithmetic, conditional expressions, comprehensions, lambdas, and
calls of: the pure builtins (``SAFE_BUILTINS``), functions of the modules in ``SAFE_MODULES`` (torch,
numpy, math, functools (``partial``), ...: ``torch.cuda.is_available()``, ``torch.ones(T, T).tril()``),
and methods of values the slice itself computed. ``torch.manual_seed(...)`` and the like run when a
statement of the slice follows them. It never runs when it holds any of:

- a loop (``for``, ``while``) or a ``with`` block: loops over data, training loops, open files;
- a call of the student's own function or class (``head = Head(...)``, ``model = train(...)``), or of a
  value the notebook computed (``y = f(x)``): the student's code runs only when a check calls it;
- a call of anything else: ``open``, ``input``, ``print``, ``display``, ``eval``, modules outside
  ``SAFE_MODULES`` (``os``, ``pathlib``, ``urllib``, ``requests``, ``matplotlib``, ``pandas``, the
  course's helper modules that read the corpus), and in any module the names in ``DENIED`` (files:
  ``torch.load``, ``np.loadtxt``, ``read_*``; training: ``.backward()``, ``.step()``; processes:
  ``torch.compile``); a private attribute (``x._y``), but for a method of a class the notebook defines, its
  ``__init__`` included (``old = Cls.__init__``; ``Cls.__init__ = new``; ``Cls._helper = f``, as ``Cls.forward = f``);
- a name whose binding itself never runs (``T = len(text)`` after ``text = open(...).read()``).

Expression statements that bind nothing (``plt.plot(x)``, ``print(...)``, ``loss.backward()`` of a loss
nothing reads) are never part of a slice. Imports, ``def``, ``class`` and literal constants are kept
as before, whether needed or not (``notebook_code``); a literal constant whose name's last binding never
runs is dropped, so a stale value never stands in for the one the notebook computes.

Each needed name whose last binding never runs is recorded with the reason (``Slice.unbound``): the judge
tells the student in one sentence instead of a bare NameError.
"""
from __future__ import annotations

import ast
import symtable
from dataclasses import dataclass, field

SAFE_BUILTINS = {"float", "int", "bool", "str", "tuple", "list", "dict", "set", "frozenset", "range", "len",
                 "abs", "min", "max", "round", "pow", "sum", "sorted", "reversed", "enumerate", "zip", "map",
                 "filter", "any", "all", "isinstance", "divmod", "complex", "slice", "chr", "ord", "hash"}
SAFE_MODULES = {"torch", "numpy", "math", "cmath", "functools", "operator", "itertools", "collections",
                "typing", "dataclasses", "enum", "fractions", "decimal", "statistics", "random", "string",
                "copy", "einops"}
PLOTTING = {"matplotlib", "seaborn", "plotly", "IPython", "ipywidgets", "tqdm"}
FILES = {"os", "sys", "io", "pathlib", "shutil", "glob", "pickle", "json", "csv", "urllib", "requests", "http",
         "socket", "gzip", "zipfile", "tarfile", "pandas", "h5py", "subprocess", "tempfile", "time",
         "datetime", "datasets", "torchvision", "torchtext", "tiktoken", "builtins"}
TRAINING = {"backward", "step", "zero_grad", "fit", "train", "optim"}
FILE_NAMES = {"load", "save", "hub", "fromfile", "tofile", "loadtxt", "savetxt", "genfromtxt", "memmap", "savez",
              "savez_compressed", "open", "urlopen", "urlretrieve", "download", "input", "system", "popen"}
PROCESS_NAMES = {"compile", "distributed", "multiprocessing", "jit"}
PLOT_NAMES = {"show", "plot", "imshow", "savefig", "figure", "subplots", "display"}
DENIED = TRAINING | FILE_NAMES | PROCESS_NAMES | PLOT_NAMES
OWN_CLASS_METHODS = {"__init__", "__call__", "__repr__", "__str__"}     # read or replaced on the notebook's own class
SEEDS = {("torch", "manual_seed"), ("torch", "seed"), ("random", "seed"), ("numpy", "seed")}
BUILTIN_REASONS = {"open": "by opening a file", "input": "by asking for input", "print": "by printing",
                   "display": "by displaying", "exec": "with exec", "eval": "with eval"}

END = 1 << 30          # the position of the checks' calls: after the whole notebook


@dataclass
class Stmt:
    cell: int
    line: int                          # its first line in the cell (its first decorator's, if any)
    node: ast.stmt
    text: str                          # its first line, as the student wrote it
    tables: list = field(default_factory=list)     # symtable scopes (function, lambda, class) inside it


@dataclass
class Slice:
    keep: set[int] = field(default_factory=set)        # indices of value statements to run
    drop: set[int] = field(default_factory=set)        # literal constants not to run (their name is unbound)
    unbound: dict[str, tuple[int, str]] = field(default_factory=dict)   # name -> (statement, why it never runs)
    reads: dict[str, int] = field(default_factory=dict)  # value name the contract reads -> its binding statement


def scope_tables(text: str) -> list | None:
    """The symtable scopes of a cell's code directly under its module scope; None when the compiler refuses
    it (e.g. ``return`` outside a function: the statement then fails where it runs, as it would in Jupyter)."""
    try:
        return symtable.symtable(text, "<cell>", "exec").get_children()
    except (SyntaxError, ValueError, RecursionError):
        return None


def _globals_read(table) -> set[str]:
    """Module-level names read anywhere inside ``table``'s scope and the scopes nested in it."""
    out, stack = set(), [table]
    while stack:
        t = stack.pop()
        out |= {s.get_name() for s in t.get_symbols() if s.is_global() and s.is_referenced()}
        stack.extend(t.get_children())
    return out


def _start(node: ast.stmt) -> int:
    deco = getattr(node, "decorator_list", None)
    return deco[0].lineno if deco else node.lineno


def _target_names(target, binds: set, mutates: set) -> None:
    if isinstance(target, ast.Name):
        binds.add(target.id)
    elif isinstance(target, (ast.Tuple, ast.List)):
        for t in target.elts:
            _target_names(t, binds, mutates)
    elif isinstance(target, ast.Starred):
        _target_names(target.value, binds, mutates)
    elif isinstance(target, (ast.Subscript, ast.Attribute)):
        root = _root(target)
        if isinstance(root, ast.Name):
            mutates.add(root.id)


def _root(node):
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _receiver_root(node):
    """The name a method call's receiver comes from, as _root, or None when the receiver is a fresh value: the
    result of calling a name (``build_mask(ids, 0).int()`` displays a helper's result and changes no module-level
    name; blind set 10's c07, a correct notebook, lost every point when that line was taken for build_mask's last
    binding). A method's result may still be a view of its receiver (``W.view(-1).zero_()``), so it is followed."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return None
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _chain(node) -> list[str] | None:
    """``a.b.c`` -> ["a", "b", "c"]; None when the root is not a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id] + parts[::-1]


def effects(node: ast.stmt) -> tuple[set[str], set[str]]:
    """(names ``node`` binds at module level, names whose value it changes in place)."""
    binds, mutates = set(), set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            binds.add(n.name)
            continue
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            binds.update((a.asname or a.name.split(".")[0]) for a in n.names if a.name != "*")
            continue
        if isinstance(n, ast.Assign):
            for t in n.targets:
                _target_names(t, binds, mutates)
        elif isinstance(n, (ast.AnnAssign, ast.AugAssign)) and (getattr(n, "value", None) is not None
                                                                or isinstance(n, ast.AugAssign)):
            _target_names(n.target, binds, mutates)
        elif isinstance(n, (ast.For, ast.AsyncFor)):
            _target_names(n.target, binds, mutates)
        elif isinstance(n, (ast.With, ast.AsyncWith)):
            for item in n.items:
                if item.optional_vars is not None:
                    _target_names(item.optional_vars, binds, mutates)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            binds.add(n.name)
        elif isinstance(n, ast.Expr) and isinstance(n.value, ast.Call):
            call = n.value
            root = _receiver_root(call.func.value) if isinstance(call.func, ast.Attribute) else None
            if isinstance(root, ast.Name):
                mutates.add(root.id)                        # W.uniform_(), params.append(p), W.view(-1).zero_()
            if isinstance(call.func, ast.Attribute) and call.func.attr.endswith("_"):
                mutates.update(a.id for a in call.args if isinstance(a, ast.Name))   # nn.init.zeros_(W)
        for child in ast.iter_child_nodes(n):          # the statements of a compound statement's blocks
            if isinstance(child, (ast.stmt, ast.excepthandler)):
                stack.append(child)
    return binds, mutates


_COMPS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def _arg_parts(args: ast.arguments) -> list:
    parts = args.defaults + [d for d in args.kw_defaults if d is not None]
    for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]:
        if a is not None and a.annotation is not None:
            parts.append(a.annotation)
    return parts


def reads_now(node: ast.stmt) -> set[str]:
    """Names a statement reads when it runs (not what its functions' and lambdas' bodies read when called):
    comprehension variables are the comprehension's own. Iterative, so an expression as deep as the parser
    accepts never runs out of Python's stack here."""
    reads = set()
    stack = [(node, frozenset())]
    while stack:
        n, local = stack.pop()
        if isinstance(n, ast.Name):
            if isinstance(n.ctx, ast.Load) and n.id not in local:
                reads.add(n.id)
        elif isinstance(n, _COMPS):
            bound = set()
            for gen in n.generators:
                _target_names(gen.target, bound, set())
            inner = local | bound
            stack.append((n.generators[0].iter, local))
            stack.extend((g.iter, inner) for g in n.generators[1:])
            stack.extend((cond, inner) for g in n.generators for cond in g.ifs)
            stack.extend((getattr(n, p), inner) for p in ("elt", "key", "value") if getattr(n, p, None) is not None)
        elif isinstance(n, ast.Lambda):
            stack.extend((p, local) for p in _arg_parts(n.args))
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            parts = n.decorator_list + _arg_parts(n.args) + ([n.returns] if n.returns is not None else [])
            stack.extend((p, local) for p in parts)
        elif isinstance(n, ast.ClassDef):          # its body's reads come from its symtable scope
            stack.extend((p, local) for p in n.decorator_list + n.bases + [k.value for k in n.keywords])
        else:
            stack.extend((child, local) for child in ast.iter_child_nodes(n))
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
        reads.add(node.target.id)
    return reads


def reads_later(stmt: Stmt) -> set[str]:
    """What the bodies of the functions, lambdas and classes inside ``stmt`` read from the module."""
    if stmt.tables is None:            # the compiler refused the cell: every name it loads
        return {n.id for n in ast.walk(stmt.node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    out = set()
    for t in stmt.tables:
        out |= _globals_read(t)
    return out


def _is_definition(node) -> bool:
    return isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))


class _Slicer:
    def __init__(self, stmts: list[Stmt]):
        self.stmts = stmts
        self.effects = [effects(s.node) for s in stmts]
        modules = set()                 # plt.plot(x), torch.manual_seed(0): calls on a module change no value
        for s, (binds, _) in zip(stmts, self.effects):
            if isinstance(s.node, (ast.Import, ast.ImportFrom)):
                modules |= binds
        self.effects = [(binds, mutates - modules) for binds, mutates in self.effects]
        self.now = [reads_now(s.node) | self.effects[i][1] if not _is_definition(s.node) else reads_now(s.node)
                    for i, s in enumerate(stmts)]
        self.why: dict[int, str | None] = {}

    def binding(self, name: str, before: int) -> int | None:
        """The last statement before position ``before`` that binds ``name`` or changes it in place."""
        for i in range(min(before, len(self.stmts)) - 1, -1, -1):
            binds, mutates = self.effects[i]
            if name in binds or name in mutates:
                return i
        return None

    def _module_of(self, name: str, at: int) -> str | None:
        """The module a name stands for, when its binding before ``at`` is an import."""
        i = self.binding(name, at)
        node = self.stmts[i].node if i is not None else None
        if isinstance(node, ast.Import):
            for a in node.names:
                if (a.asname or a.name.split(".")[0]) == name:
                    return a.name if a.asname else a.name.split(".")[0]
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if (a.asname or a.name) == name:
                    return f"{node.module or ''}.{a.name}"
        return None

    def _call_reason(self, call: ast.Call, at: int) -> str | None:
        func = call.func
        chain = _chain(func)
        if chain is None:                                  # torch.ones(2).tril(), "a,b".split(","), f()(x)
            attr = func.attr if isinstance(func, ast.Attribute) else None
            if attr is None:
                return "by calling the result of a call"
            return self._name_reason([attr])
        head, i = chain[0], self.binding(chain[0], at)
        if i is None:                                      # defined further down: still the student's own
            i = self.binding(chain[0], END)
            i = i if i is not None and _is_definition(self.stmts[i].node) else None
        if any(p.startswith("_") for p in chain[1:]):
            return "by reaching a private attribute"
        module = self._module_of(head, at)
        if module is not None:
            parts = module.split(".") + chain[1:]
            return self._module_reason(parts, ".".join(chain))
        if i is not None and _is_definition(self.stmts[i].node):
            return f"by calling your own `{'.'.join(chain)}`"
        if i is not None:                                  # a value of the notebook
            if len(chain) == 1:
                return f"by calling `{head}`"
            return self._name_reason(chain[1:])
        if len(chain) == 1:
            return None if head in SAFE_BUILTINS else BUILTIN_REASONS.get(head, f"by calling `{head}`")
        return None if head in SAFE_BUILTINS else f"by calling `{'.'.join(chain)}`"

    @staticmethod
    def _name_reason(parts: list[str]) -> str | None:
        for p in parts:
            if p in TRAINING:
                return "by training"
            if p in FILE_NAMES or p.startswith(("read", "write", "save", "load", "from_file", "to_csv")):
                return "by reading or writing a file"
            if p in PROCESS_NAMES:
                return f"with `{p}`"
            if p in PLOT_NAMES:
                return "by plotting"
            if p.startswith("_"):
                return "by reaching a private attribute"
        return None

    def _module_reason(self, parts: list[str], shown: str) -> str | None:
        root = parts[0]
        if root in PLOTTING:
            return "by plotting or displaying"
        if root in FILES:
            return f"with `{shown}` (files, the network or the system)"
        if root not in SAFE_MODULES:
            return f"by calling `{shown}`, from a module the grader does not call at module level"
        return self._name_reason(parts[1:])

    def _own_class_method(self, n: ast.Attribute, at: int) -> bool:
        """An attribute of a class the notebook defines that names a method of the student's: a later cell that
        wraps or replaces the constructor (``old = Cls.__init__``, ``Cls.__init__ = new``) or adds a helper
        (``Cls._attend = _attend``) patches the student's own class, as ``Cls.forward = f`` does (blind set 12: a
        correct notebook adding a dropout so lost every point). Python's own dunders (``__class__``, ``__dict__``)
        and any underscore attribute of another value still never run."""
        dunder = n.attr.startswith("__") and n.attr.endswith("__")
        if (dunder and n.attr not in OWN_CLASS_METHODS) or not isinstance(n.value, ast.Name):
            return False
        name, j = n.value.id, self.binding(n.value.id, at)
        while j is not None and name not in self.effects[j][0]:     # past the patches that change it in place
            j = self.binding(name, j)
        return j is not None and isinstance(self.stmts[j].node, ast.ClassDef)

    def reason(self, i: int) -> str | None:
        """Why statement ``i`` never runs, or None when it runs."""
        if i in self.why:
            return self.why[i]
        self.why[i] = None
        node, found = self.stmts[i].node, []      # (rank, why): a loop before a named call before a method
        for n in ast.walk(node):
            if isinstance(n, (ast.For, ast.AsyncFor, ast.While)):
                found.append((0, "in a loop"))
            elif isinstance(n, (ast.With, ast.AsyncWith)):
                found.append((0, "inside a `with` block"))
            elif isinstance(n, (ast.Await, ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal)):
                found.append((0, "with a statement the grader does not run"))
            elif isinstance(n, ast.Call) and not _in_lambda(node, n):
                why = self._call_reason(n, i)
                if why:
                    found.append((1 if _chain(n.func) else 2, why))
            elif isinstance(n, ast.Attribute) and n.attr.startswith("_") and not _in_lambda(node, n) \
                    and not self._own_class_method(n, i):
                found.append((2, "by reaching a private attribute"))
        why = min(found)[1] if found else None
        if why is None:
            for name in sorted(self.now[i]):
                j = self.binding(name, i)
                if j is not None and not _is_definition(self.stmts[j].node):
                    inner = self.reason(j)
                    if inner:
                        why = f"from `{name}`, which {self.where(j)} binds {inner}"
                        break
        self.why[i] = why
        return why

    def where(self, i: int) -> str:
        s = self.stmts[i]
        return f"cell {s.cell}, line {s.line} (`{s.text}`)"

    def run(self, target: str, constant: list[bool]) -> Slice:
        out = Slice()
        todo = [(target, END, True)]
        seen = set()
        while todo:
            name, at, from_contract = todo.pop()
            if (name, at) in seen:
                continue
            seen.add((name, at))
            i = self.binding(name, at)
            if i is None:
                continue
            node = self.stmts[i].node
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if from_contract and not _is_definition(node) and not _function_value(node):
                out.reads.setdefault(name, i)
            if not _is_definition(node):
                why = self.reason(i)
                if why:
                    out.unbound.setdefault(name, (i, why))
                    continue
                out.keep.add(i)
            contract_side = from_contract and _is_definition(node)
            todo.extend((n, i, False) for n in self.now[i])
            todo.extend((n, END, contract_side or from_contract) for n in reads_later(self.stmts[i]))
        for name, (i, _) in out.unbound.items():       # no stale value for a name whose last binding never runs
            for j, s in enumerate(self.stmts):
                if constant[j] and j not in out.keep and name in self.effects[j][0]:
                    out.drop.add(j)
        self._seeds(out, constant)
        return out

    def _seeds(self, out: Slice, constant: list[bool]) -> None:
        """``torch.manual_seed(0)`` and the like run when a statement of the slice comes after them."""
        computed = [i for i in out.keep if not constant[i]]      # a literal constant draws no random number
        if not computed:
            return
        for i, s in enumerate(self.stmts[:max(computed)]):
            call = s.node.value if isinstance(s.node, ast.Expr) and isinstance(s.node.value, ast.Call) else None
            chain = _chain(call.func) if call is not None else None
            if chain and len(chain) >= 2:
                module = self._module_of(chain[0], i)
                if module and (module.split(".")[0], chain[-1]) in SEEDS and self.reason(i) is None:
                    out.keep.add(i)


def _function_value(node) -> bool:
    """``f = lambda ...`` or ``f = partial(...)``: a function, not a value the contract reads."""
    value = getattr(node, "value", None)
    if isinstance(value, ast.Lambda):
        return True
    chain = _chain(value.func) if isinstance(value, ast.Call) else None
    return bool(chain) and chain[-1] == "partial"


def _in_lambda(top, node) -> bool:
    """Whether ``node`` sits inside a lambda of ``top``: what a lambda calls runs only when it is called."""
    for lam in ast.walk(top):
        if isinstance(lam, ast.Lambda) and lam is not node:
            if any(n is node for n in ast.walk(lam.body)):
                return True
    return False


def slice_for(stmts: list[Stmt], target: str, constant: list[bool]) -> Slice:
    """What to run of ``stmts`` (a notebook's top-level statements, in order) for ``target`` to find at module
    level what it reads; ``constant[i]`` marks the literal constants kept in any case."""
    return _Slicer(stmts).run(target, constant)
