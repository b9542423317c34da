"""Child side of the causal_head checks: the one narrow door to the student's `Head`.

Runs inside the submission's process (see child_runtime.py). It only builds
heads, loads the judge's weights, calls forward/backward on the judge's inputs
and hands back raw tensors; it decides nothing. The child's fork server loads it as a
module of its own (sandbox.child_program); `student_object` and `as_tensor` (attnkit.toolkit.driver) are
its one door to the student's code.
"""
from attnkit.toolkit.driver import (as_tensor, build, changed_since, device_guard, device_mismatch, error_text,
                                    float64, forward, load_weights, module_state, submission_line)


def _build(module, exp, tensors, torch, state):
    ctor = exp["ctor"]
    state["stage"] = "__init__"
    # the contract's defaults (causal None): built as the seed builds it
    head = build(module, (ctor["d"], ctor["d_head"], ctor["T_max"]),
                 None if ctor["causal"] is None else {"causal": ctor["causal"]})
    if exp.get("weights"):
        state["stage"] = "loading the judge's weights into query/key/value"
        load_weights(head, tensors, exp["weights"], ("query", "key", "value"), torch)
    return head


def _inspect(head, torch):
    def linear(name):
        m = getattr(head, name, None)
        return {"type": type(m).__name__, "is_linear": isinstance(m, torch.nn.Linear),
                "in": getattr(m, "in_features", None), "out": getattr(m, "out_features", None),
                "bias": getattr(m, "bias", None) is not None}
    buffers = {n: list(b.shape) for n, b in head.named_buffers()}
    params = {n: list(p.shape) for n, p in head.named_parameters()}
    plain = {n: list(v.shape) for n, v in vars(head).items()           # tensors kept as plain attributes
             if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter)}
    roles = ("query", "key", "value")
    # two roles held by one module (self.key = self.query): its weights are loaded twice, the last load wins
    shared = [[a, b] for i, a in enumerate(roles) for b in roles[i + 1:]
              if getattr(head, a, None) is not None and getattr(head, a, None) is getattr(head, b, None)]
    meta = {"linears": {n: linear(n) for n in roles}, "causal": _causal_flag(head),
            "buffers": buffers, "parameters": params, "plain_tensors": plain, "shared": shared}
    arrays = {}
    tensors = dict(vars(head), **dict(head.named_parameters()), **dict(head.named_buffers()))
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.dim() == 2 and t.shape[0] == t.shape[1] <= 64:   # mask-like
            arrays["tril" if name == "tril" else f"square_{name}"] = t.detach().to(torch.float64)
    return meta, arrays


def _read_A(head, torch, meta):
    """self.A as a tensor. A NumPy array is read as one (and its type noted for the contract check): storing
    the weights in another type is one slip of the contract, not a reason to measure nothing else."""
    A = getattr(head, "A", None)
    if not isinstance(A, torch.Tensor):
        import numpy
        if isinstance(A, numpy.ndarray) and A.dtype.kind in "fiu":
            meta.setdefault("A_types", []).append(type(A).__name__)
            return torch.from_numpy(numpy.array(A, dtype=numpy.float64))
    return as_tensor(A, "self.A", torch)


def _calls(head, exp, tensors, torch, state):
    """The calls of a notebook on one instance (plan.STATE_CALLS), each recorded or its error noted; the
    buffers and parameters are compared before and after the first call."""
    meta, arrays = {"errors": {}, "changed_by_first_call": []}, {}
    before = module_state(head)
    for i, call in enumerate(exp["calls"]):
        state["stage"] = f"forward ({call['what']}, on the same head)"
        if call["mode"] == "eval":
            head.eval()
        elif call["mode"] == "to":
            head.train()
            head.to(torch.device("cpu"))
        else:
            head.train()
        try:
            out = forward(head, tensors[call["input"]], "forward's return value", torch)     # (B, T, d_head)
            A = _read_A(head, torch, {})                                                      # (B, T, T)
            arrays[f"out{i}"], arrays[f"A{i}"] = float64(out, torch), float64(A, torch)
        except Exception as e:  # noqa: BLE001 - the student's error, reported as data; timeouts are not caught
            meta["errors"][str(i)] = error_text(e)
        if i == 0:
            meta["changed_by_first_call"] = changed_since(before, head, torch)
    head.train()
    return meta, arrays


def _on_meta(head, exp, tensors, torch, state):
    """forward on the meta device (shapes, no data): only a tensor made on the CPU inside forward meeting the
    head's moved ones is recorded; anything else meta cannot do (.item(), NumPy, assertions on values) is
    no finding and costs nothing."""
    state["stage"] = "moving the head to another device (.to('meta'))"
    try:
        head.to("meta")
        with torch.no_grad(), device_guard(torch):
            head(tensors[exp["inputs"][0]].to("meta"))
    except Exception as e:  # noqa: BLE001 - only the device mismatch is a finding
        return {"device_mismatch": device_mismatch(e), "device_line": submission_line(e)}, {}
    return {"device_mismatch": None}, {}


def _causal_flag(head):
    causal = getattr(head, "causal", None)
    return causal if isinstance(causal, bool) else repr(causal)[:80]


def run_experiment(module, exp, tensors, torch, state):
    head = _build(module, exp, tensors, torch, state)
    meta, arrays = {}, {}
    if exp["op"] == "inspect":
        return _inspect(head, torch)
    if exp["op"] == "calls":
        return _calls(head, exp, tensors, torch, state)
    if exp["op"] == "meta":
        return _on_meta(head, exp, tensors, torch, state)
    if exp["op"] == "forward":
        meta["dtypes"], meta["causal"] = [], _causal_flag(head)
        before = module_state(head)
        for i, key in enumerate(exp["inputs"]):
            state["stage"] = "forward"
            out = forward(head, tensors[key], "forward's return value", torch)    # (B, T, d_head)
            state["stage"] = "reading self.A after forward"
            A = _read_A(head, torch, meta)                                        # (B, T, T)
            if i == 0:
                meta["changed_by_first_call"] = changed_since(before, head, torch)
            meta["dtypes"].append(str(out.dtype).replace("torch.", ""))
            arrays[f"out{i}"], arrays[f"A{i}"] = float64(out, torch), float64(A, torch)
        if exp.get("then"):                    # later calls on the same instance: their errors are data
            calls = _calls(head, {"calls": [{"what": k, "input": k, "mode": "train"} for k in exp["then"]]},
                           tensors, torch, state)
            meta["then_errors"] = calls[0]["errors"]
            arrays.update({f"then_{k}": v for k, v in calls[1].items()})
        return meta, arrays
    if exp["op"] == "backward":
        b, t = exp["target"]
        x = tensors[exp["inputs"][0]].clone().requires_grad_(True)
        state["stage"] = "forward"
        out = as_tensor(head(x), "forward's return value", torch)
        A = _read_A(head, torch, meta)
        meta["A_requires_grad"] = bool(A.requires_grad)
        meta["out_dtype"] = str(out.dtype).replace("torch.", "")
        meta["out_shape"], meta["A_shape"] = list(out.shape), list(A.shape)
        meta["out_requires_grad"] = bool(out.requires_grad)
        if not out.requires_grad:              # detached or under no_grad: nothing to differentiate
            return meta, arrays
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
