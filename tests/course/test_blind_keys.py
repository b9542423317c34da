"""No re-rolling, measured on what the kit was not built with: every blind notebook (tests/blind/) loses the same
checks and gets the same diagnosis under several grading keys (bench/key_dependence.py --folder)."""
import re
import subprocess
import sys

import pytest

from tests import KIT_ROOT

# A mistake that is a correct head up to float rounding: whether the rounding leaves the future's gradient exactly
# zero depends on the inputs. Named in the README as what the judge still cannot make input-independent.
KNOWN = {"causal_head": {"m04_renormalise_after_softmax.ipynb"}, "attention_lm": set()}
KEYS = {"causal_head": 3, "attention_lm": 2}


@pytest.mark.parametrize("assignment", sorted(KNOWN))
def test_blind_verdicts_do_not_depend_on_the_key(assignment):
    p = subprocess.run([sys.executable, str(KIT_ROOT / "bench" / "key_dependence.py"), "--folder",
                        str(KIT_ROOT / "tests" / "blind" / assignment), assignment, "--keys", str(KEYS[assignment]),
                        "--key-seed", "1", "--jobs", "1"], capture_output=True, text=True, timeout=1800, cwd=KIT_ROOT)
    assert "notebooks x" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
    varies = set(re.findall(r"VARIES (\S+):", p.stdout))
    # nothing but the known one may vary (whether it does under these 3 keys is the luck of its draw: it did under
    # the 32-bit draw, not under the 256-bit one of attnkit/toolkit/draw.py)
    assert varies <= KNOWN[assignment], p.stdout[-3000:]
