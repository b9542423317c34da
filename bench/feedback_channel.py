"""How many bits of the submission's choosing one feedback page can carry (issue 29's covert channel).

Before: each failed check could quote 200 characters of the submission's own exception text, any Unicode (15 bits
a CJK character), 20 checks a page. After (attnkit/engine/channel.py): what a page shows of a run is a choice
among fixed sets; this adds up, per page, the most bits each choice can carry, for each assignment, with the
demo course's own figures (checks, driver stages, a solution's source lines), and also grades a submission that
packs a payload into every message and checks that none of it reaches the page.

    python bench/feedback_channel.py
"""
import datetime
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from attnkit.engine import channel, config, judge, registry, results  # noqa: E402
from attnkit.mutants import module, solution_source, submission  # noqa: E402

os.environ.setdefault("ATTNKIT_GRADING_KEY", "ab" * 32)


def bits_per_page(assignment: str) -> dict:
    cfg = config.load(assignment)
    checks = len(cfg.checks)
    corpus = module(assignment)
    lines = len(solution_source(assignment, corpus.SOLUTION_CELL).splitlines()) * 4   # a generous answer
    literals, patterns = judge._driver_stages(assignment)
    plan = registry.get(assignment).plugin().make_plan(1)
    stages = len(literals) + len(results.STAGES) + len(patterns) * len(judge._strings(plan["experiments"]))
    per_error = (math.log2(len(channel.KNOWN_TYPES) + 1) + math.log2(len(channel.CAUSES) * 64 + 1)
                 + math.log2(stages) + math.log2(lines + 1))
    # What a check prints of what the child returned, generously: two measured numbers (`largest error 0.0132`,
    # 3 significant digits and an exponent: ~20 bits), two shapes (channel.SHAPE_DIMS dimensions within
    # channel.DIM_LIMIT) and three names (each one of the vocabulary: the source's identifiers and torch's names).
    names = math.log2(len(channel.library_names()) + 400)
    shape = channel.SHAPE_DIMS * math.log2(channel.DIM_LIMIT + 2)
    per_message = 2 * 20 + 2 * shape + 3 * names
    plugin = judge._plugin(assignment)
    pattern = type(plugin).attention_pattern is not type(plugin).__mro__[-2].attention_pattern
    cells = 36 if pattern else 0                       # the picture: T x T = 6 x 6 weights
    picture = cells * math.log2(1 / channel.PICTURE_STEP + 2)
    return {"checks": checks, "pass_fail": checks, "per_check": max(per_error, per_message),
            "per_error": per_error, "per_message": per_message, "picture": picture}


PAYLOAD = "".join(chr(0x4E00 + i) for i in range(200))     # 200 CJK characters, as the red team packed them


def payload_reaches_the_page(assignment: str) -> int:
    """Grade a solution whose every forward raises the payload; count the payload's characters on the page."""
    corpus = module(assignment)
    src = solution_source(assignment, corpus.SOLUTION_CELL)
    head, sep, rest = src.partition("    def forward(")
    line_end = rest.index(":\n") + 2
    src = head + sep + rest[:line_end] + f"        raise RuntimeError({PAYLOAD!r})\n" + rest[line_end:]
    result = judge.grade(submission(assignment, {corpus.SOLUTION_CELL: src}), assignment)
    text = " ".join(c["message"] + str(c.get("diagnosis") or "") for c in result["checks"]) + str(result["error"])
    return sum(ch in text for ch in set(PAYLOAD))


def main():
    print(f"feedback channel, {datetime.date.today()}: bits of the submission's choosing a page can carry")
    print("before (200 characters of any Unicode a failed check, 15 bits each): "
          "20 checks x 200 x 15 bits = 7,500 bytes a page")
    for a in registry.names():
        b = bits_per_page(a)
        total = b["pass_fail"] + b["checks"] * b["per_check"] + b["picture"]
        print(f"{a:13s} after: {b['checks']} checks; a failed check <= {b['per_check'] / 8:.0f} bytes (an error's "
              f"type, sentence, stage and line {b['per_error']:.0f} bits; or what it prints of the child's arrays "
              f"and reports {b['per_message']:.0f} bits); picture <= {b['picture'] / 8:.0f} bytes; pass/fail "
              f"{b['pass_fail']} bits; page <= {total / 8:.0f} bytes if every check failed")
        print(f"{'':13s} a payload of 200 CJK characters raised by forward: "
              f"{payload_reaches_the_page(a)} of them reach the page")


if __name__ == "__main__":
    main()
