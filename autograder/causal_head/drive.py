"""Child side of the causal_head checks: the one narrow door to the student's `Head`.

Runs inside the submission's process (see child_runtime.py). It only builds
heads, loads the judge's weights, calls forward/backward on the judge's inputs
and hands back raw tensors; it decides nothing. `student_class` and `as_tensor` come from
child_runtime.py, which precedes this file in the child's program.
"""


def _head_class(module):
    return student_class(module, "Head")


def _build(module, exp, tensors, torch, state):
    ctor = exp["ctor"]
    state["stage"] = "__init__"
    head = _head_class(module)(ctor["d"], ctor["d_head"], ctor["T_max"], causal=ctor["causal"])
    if exp.get("weights"):
        state["stage"] = "loading the judge's weights into query/key/value"
        with torch.no_grad():
            for name in ("query", "key", "value"):
                getattr(head, name).weight.copy_(tensors[f"{exp['weights']}_{name}"])
    return head


def _inspect(head, torch):
    def linear(name):
        m = getattr(head, name, None)
        return {"type": type(m).__name__, "is_linear": isinstance(m, torch.nn.Linear),
                "in": getattr(m, "in_features", None), "out": getattr(m, "out_features", None),
                "bias": getattr(m, "bias", None) is not None}
    buffers = {n: list(b.shape) for n, b in head.named_buffers()}
    params = {n: list(p.shape) for n, p in head.named_parameters()}
    causal = getattr(head, "causal", None)
    meta = {"linears": {n: linear(n) for n in ("query", "key", "value")},
            "causal": causal if isinstance(causal, bool) else repr(causal),
            "buffers": buffers, "parameters": params}
    arrays = {}
    tril = dict(head.named_buffers()).get("tril")
    if isinstance(tril, torch.Tensor):
        arrays["tril"] = tril.detach().to(torch.float64)
    return meta, arrays


def run_experiment(module, exp, tensors, torch, state):
    head = _build(module, exp, tensors, torch, state)
    meta, arrays = {}, {}
    if exp["op"] == "inspect":
        return _inspect(head, torch)
    if exp["op"] == "forward":
        meta["dtypes"] = []
        for i, key in enumerate(exp["inputs"]):
            state["stage"] = "forward"
            with torch.no_grad():
                out = as_tensor(head(tensors[key].clone()), "forward's return value", torch)
            state["stage"] = "reading self.A after forward"
            A = as_tensor(getattr(head, "A", None), "self.A", torch)
            meta["dtypes"].append(str(out.dtype).replace("torch.", ""))
            arrays[f"out{i}"], arrays[f"A{i}"] = out.detach().to(torch.float64), A.detach().to(torch.float64)
        return meta, arrays
    if exp["op"] == "backward":
        b, t = exp["target"]
        x = tensors[exp["inputs"][0]].clone().requires_grad_(True)
        state["stage"] = "forward"
        out = as_tensor(head(x), "forward's return value", torch)
        A = as_tensor(getattr(head, "A", None), "self.A", torch)
        meta["A_requires_grad"] = bool(A.requires_grad)
        meta["out_dtype"] = str(out.dtype).replace("torch.", "")
        meta["out_shape"], meta["A_shape"] = list(out.shape), list(A.shape)
        state["stage"] = "backward"
        out[b, t].sum().backward()
        if x.grad is not None:
            arrays["grad_x"] = x.grad.to(torch.float64)
        for name in ("query", "key", "value"):
            g = getattr(head, name).weight.grad
            if g is not None:
                arrays[f"grad_{name}"] = g.to(torch.float64)
        return meta, arrays
    raise ValueError(f"unknown experiment op {exp['op']!r}")
