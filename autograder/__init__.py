"""What judges: the hidden checks, and the machinery that runs a submission where it cannot touch them.

Never released to students. ``judge.grade`` is the single entry point.
"""
