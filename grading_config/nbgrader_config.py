"""nbgrader settings for the attnkit course (loaded by the course root's nbgrader_config.py).

The kit is the installed package `attnkit`; this course's hidden autograders are its autograder/ folder,
found from the course directory nbgrader runs in (attnkit/engine/registry.py), never from this file.

The grade of every test cell comes from attnkit's judge, which runs the
submission's code in a separate, limited process: `JudgeGradeCells` replaces
those cells' outputs after execution and before nbgrader saves the grades,
so nothing the student's kernel did can change a score.
"""
import os

# Torch in grading kernels: one OpenMP thread each, or parallel grading oversubscribes the cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, ClearHiddenTests,  # noqa: E402
                                    ClearOutput, GetGrades, IgnorePattern, LimitOutput, OverwriteCells,
                                    OverwriteKernelspec, SaveAutoGrades)
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor  # noqa: E402

from attnkit.nbgrader_ext import patch  # noqa: E402
from attnkit.nbgrader_ext.steps import (DeduplicateGradeIds, JudgeGradeCells, PrependTeachingReport,  # noqa: E402
                                    SandboxedExecute)

# A submission folder is the student's: nbgrader's own copy of it (find_all_files + shutil.copy in
# BaseConverter.init_assignment) follows symbolic links and reads to the end, so a link to gradebook.db
# or to the instructor's source notebook would land in autograded/ and feedback/, a link to /dev/zero
# would fill the disk, a FIFO would hang grading, and a linked notebook would be graded as the student's.
# This makes `nbgrader autograde` and `nbgrader generate_feedback` copy regular files and folders only
# (no link followed, capped) and read each notebook the same way; what was refused is listed at the top
# of the student's notebook and feedback (attnkit/nbgrader_ext/patch.py: the kit's one patch of nbgrader).
patch.install()

c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "attnkit"
# The jupytext twins of the source notebooks hold solutions: never copy them into a release.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.pct.py"]

# A correct notebook runs in seconds; the default 30 s per cell failed on a loaded machine.
c.Execute.timeout = 120                      # nbgrader validate
c.SandboxedExecute.timeout = 60              # autograde: per cell ...
c.SandboxedExecute.notebook_seconds = 180    # ... and for the whole notebook (a hung kernel costs no more)
c.SandboxedExecute.memory_mb = 6144

c.Autograde.sanitize_preprocessors = [
    ClearOutput, DeduplicateGradeIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata,
]
c.Autograde.autograde_preprocessors = [
    SandboxedExecute,                    # the student's kernel runs in the grading sandbox
    IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
    JudgeGradeCells,                     # every test cell's verdict comes from the judge
    SaveAutoGrades, AssignLatePenalties, CheckCellMetadata,
]
# The file students receive opens with the teaching report: score, diagnoses, their attention pattern.
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, CSSHTMLHeaderPreprocessor, PrependTeachingReport]

# LaTeX renders offline in feedback (opened from disk, mailed) and in formgrader: nbgrader's templates call
# nbconvert's mathjax() macro without a URL, so HTMLExporter.mathjax_url is never read and the CDN default
# always applied. attnkit's templates come first and replace that macro (attnkit/templates/nbconvert/): in
# feedback with MathJax 3 inlined from the venv, in formgrader with the MathJax 2.7 its script expects, from
# the Jupyter server itself (jupyter-server-mathjax). nbgrader's own templates stay on the path after them.
from attnkit.nbgrader_ext.feedback_report import nbconvert_template_dirs  # noqa: E402
c.HTMLExporter.extra_template_basedirs = nbconvert_template_dirs()
c.HTMLExporter.filters = {"mathjax_source": "attnkit.nbgrader_ext.feedback_report.mathjax_source"}

# What a TA opens is inert (attnkit/nbgrader_ext/inert.py): every page made of a student's notebook, nbgrader's feedback and
# formgrader's notebook views alike (formgrader's exporter reads this configuration too), cleans the markdown
# it renders (nbgrader's templates call markdown2html themselves), the raw cells and HTML outputs
# (sanitize_html routes them through clean_html, the kit's), and reduces kernel outputs to what shows inertly.
c.HTMLExporter.sanitize_html = True
c.HTMLExporter.filters.update({"markdown2html": "attnkit.nbgrader_ext.inert.markdown2html",
                               "clean_html": "attnkit.nbgrader_ext.inert.clean_html"})
c.HTMLExporter.preprocessors = ["attnkit.nbgrader_ext.inert.InertOutputs"]
