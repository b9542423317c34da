"""The feedback is not a channel for the hidden inputs (issue 29): no free text of the grading child reaches a page.

The red team's submission raised 200 CJK characters from `forward` (15 bits each: 375 bytes of the hidden inputs a
message, 20 messages a page). On the old judge its text was on every failed check; here none of it is, a class
named after the data shows as "an exception of its own class", the picture is rounded, and what a student needs
to act on (the type, a fixed sentence, the line) is still said.
"""
from attnkit.engine import channel
from attnkit.engine.judge import grade
from tests.notebooks import solution_source, submission

A = "causal_head"
SOL = solution_source(A, "head")
FORWARD_LINE = "    def forward(self, x):                                       # x: (B, T, d)\n"
PAYLOAD = "".join(chr(0x4E00 + i) for i in range(200))


def head(src):
    return submission(A, {"head": src})


def in_forward(code: str) -> str:
    assert FORWARD_LINE in SOL
    return SOL.replace(FORWARD_LINE, FORWARD_LINE + "".join(f"        {line}\n" for line in code.splitlines()))


def page_text(result) -> str:
    return " ".join(f"{c['message']} {c.get('diagnosis') or ''}" for c in result["checks"]) + str(result["error"])


def test_a_payload_raised_by_forward_never_reaches_the_page():
    hidden = "_x = x.detach().flatten()\nraise RuntimeError(''.join(chr(0x4E00 + int(v * 1000) % 20000) for v in _x[:200]))"
    result = grade(head(in_forward(hidden)), A)
    text = page_text(result)
    assert result["score"] < 20
    assert not [ch for ch in text if ord(ch) >= 0x2E80], text[:500]     # no CJK character: nothing of x
    assert "forward raised RuntimeError (at cell 4, line" in text, text[:500]
    fixed = grade(head(in_forward(f"raise RuntimeError({PAYLOAD!r})")), A)
    assert not set(PAYLOAD) & set(page_text(fixed))


def test_a_class_named_after_the_data_shows_as_its_own_class():
    src = in_forward("raise type('E' + str(int(x.sum() * 1e6)), (Exception,), {})('x')")
    text = page_text(grade(head(src), A))
    assert f"forward raised {channel.OWN_CLASS} (at cell 4" in text, text[:300]
    assert not any(f"E{d}" in text for d in range(10)), text[:300]


def test_a_shape_error_still_says_what_went_wrong():
    src = SOL.replace("self.key(x)", "self.key(x).transpose(-2, -1)", 1)
    text = page_text(grade(head(src), A))
    assert "forward raised RuntimeError: a matrix product of tensors whose shapes do not fit together" in text, text[:400]


def test_the_picture_is_rounded():
    result = grade(head(SOL), A)
    cells = [v for row in result["attention"]["student"] for v in row if v is not None]
    assert cells and all(abs(v / channel.PICTURE_STEP - round(v / channel.PICTURE_STEP)) < 1e-6 for v in cells)
    assert result["score"] == 20


def test_a_sentence_names_only_what_the_source_spells():
    assert channel.shown_message("'Head' object has no attribute 'tril'", "self.tril = ...") == "no attribute `tril`"
    assert channel.shown_message("'Head' object has no attribute 'q0x3f2a'", "self.tril") == "no attribute"
    assert channel.shown_message("anything at all: " + PAYLOAD) == ""
    assert channel.shown_message("called sys.exit(0)") == "called sys.exit(0)"
    assert channel.shown_message("called sys.exit('" + PAYLOAD + "')") == ""
    assert channel.shown_type("ValueError") == "ValueError" and channel.shown_type("E12345") == channel.OWN_CLASS
    assert channel.monitor_message("exited (status 3)") == "exited (status 3)"
    assert channel.monitor_message("exited (status 3) " + PAYLOAD) == ""
    known = channel.vocabulary("self.query = nn.Linear(d, d_head)\ntype parameters")
    assert channel.words({"type": "Linear" + PAYLOAD, "parameters": {"query.weight": [4, 8], "q0x3f.weight": [1]},
                          "dtype": "float32\x1b[2J", "n": 2**60, "shape": [0] + [2**40] * 200}, known) == \
        {"type": "?", "parameters": {"query.weight": [4, 8], "?": [1]}, "?": [0, None, None, None, None, None]}


def test_a_shape_cannot_carry_the_inputs():
    """The second red team's door: an empty tensor whose 255 dimensions held 7 bytes of the inputs each, printed
    by the interface check as "forward returned shape [...]" (1.8 KB in one message). Dimensions are now capped
    (channel.SHAPE_DIMS of at most channel.DIM_LIMIT), in what the driver reports and in the arrays returned."""
    code = ("_b = (x.detach().flatten()[:8] * 1000).abs().long() + 5000\n"
            "if x.requires_grad:\n    return torch.empty_strided([0] + _b.tolist(), [0] * 9)")
    result = grade(head(in_forward(code)), A)
    text = page_text(result)
    assert result["score"] < 20
    import re
    dims = [int(n) for n in re.findall(r"\d+", text)]
    assert not [d for d in dims if d > channel.DIM_LIMIT], text[:600]
    assert channel.small_shape((2, 6, 4)) and not channel.small_shape((0, 5001)) and not channel.small_shape((1,) * 7)


def test_a_students_own_lookup_error_is_reported_as_theirs_not_as_a_missing_class():
    # the kit's "class not found" was once told apart by the type's name alone: a LookupError raised in forward
    # then showed as an empty sentence on every check (its message is the student's, so not shown)
    text = page_text(grade(head(in_forward("raise LookupError('no such entry')")), A))
    assert "forward raised LookupError (at cell 4, line" in text, text[:400]
    assert "not found in your notebook" not in text and not text.startswith(";"), text[:400]
    missing = grade(head(SOL.replace("class Head(", "class Heed(", 1)), A)
    assert "class `Head` not found in your notebook" in page_text(missing), page_text(missing)[:400]
