# The course's nbgrader settings live in grading_config/; this file only points nbgrader there.
c = get_config()  # noqa: F821
load_subconfig("grading_config/nbgrader_config.py")  # noqa: F821
