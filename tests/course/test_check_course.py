"""`attnkit check` on the demonstration course: causal_head holds every invariant, under one key (the kit's own
tests of the command are tests/test_check.py, on the fixture course)."""
from tests import KIT_ROOT
from tests.test_check import attnkit


def test_the_demonstration_course_holds_every_invariant_of_causal_head():
    p = attnkit("check", "causal_head", "--keys", "1", "--key-seed", "1", "--jobs", "2", cwd=KIT_ROOT, timeout=1800)
    assert p.returncode == 0 and "causal_head: every invariant holds" in p.stdout, p.stdout + p.stderr[-3000:]
