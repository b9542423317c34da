"""The demonstration course's own tests: that its judge catches its assignments' mistakes and keeps their
correct alternatives, that its release text is right, its recorded scores and blind corpora.

Everything here may name the course's assignments (causal_head, attention_lm): adding, renaming or removing
one is a change to these tests. The kit's own tests (tests/, outside this folder) grade the fixture course
(tests/fixture_course/) and name no demonstration assignment (tests/test_kit_apart.py).
"""
