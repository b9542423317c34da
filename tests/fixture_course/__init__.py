"""The fixture course: the course the kit's own tests grade, apart from the demonstration course.

The demonstration course (this checkout's autograder/, source/, release/) is one course the kit serves; its
assignments come and go. A test of the kit (the command line, the judge's pipeline, nbgrader's steps, pages,
exports) needs *an* assignment, not that one: it grades the fixture course instead, so adding, renaming or
removing a demonstration assignment breaks no kit test (tests/test_kit_apart.py proves it on a copy of the
checkout with one removed). The demonstration course's own tests (its judge catches its mistakes, its release
text is right, its blind corpora) live in tests/course/.

The fixture course is made, once per test run, the way an instructor starts one, by the kit's own commands:
``attnkit quickstart fixture``, ``attnkit new week1`` (the scaffold's worked example, a row-wise softmax with
two checks, two mistakes, one correct alternative and a written answer a TA grades: it grades in about a second, with no torch module to
build) and ``attnkit release week1``. So it is always what the kit writes today, never a copy that drifts.

fixtures.py holds the pytest fixtures (registered by tests/conftest.py's ``pytest_plugins``).
"""

NAME = "week1"            # the fixture course's assignment: the scaffold's example, as `attnkit new` writes it
COURSE_ID = "fixture"
# What the example's manifest gives (attnkit/templates/scaffold/manifest.toml.j2): its checks and points.
CHECKS = ("rows_sum_to_one", "reference_agreement")
MAX_SCORE = 2
CONTRACT_CELL = "softmax_rows"          # the solution cell: the manifest's [contract]
MISTAKES = ("normalised_over_columns", "no_max_subtracted")     # attnkit/scaffold.py's MISTAKE_IDS
