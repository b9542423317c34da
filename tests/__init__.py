"""The kit's tests (tests/*.py, on the fixture course: tests/fixture_course/) and the demonstration course's
(tests/course/); tests/README.md says which is which."""
from pathlib import Path

# This checkout: the kit's source (the editable install) and the demonstration course at once.
KIT_ROOT = Path(__file__).resolve().parents[1]
