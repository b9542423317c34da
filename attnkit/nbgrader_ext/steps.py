"""attnkit's step in nbgrader's autograde pipeline."""
import copy

from nbformat.v4 import new_code_cell, new_markdown_cell, new_output
from nbgrader.nbgraderformat import MetadataValidator
from nbgrader.preprocessors import CheckCellMetadata, DeduplicateIds, NbGraderPreprocessor
from traitlets import Integer

from attnkit.engine import registry
from attnkit.nbgrader_ext import kernel_outputs, patch

# The judge (attnkit.engine.judge, .sandbox, .config) is imported by the steps that use it, when they run: every
# nbgrader command loads this module through the course's configuration, and importing the judge (torch) costs
# seconds of CPU per command to generate_assignment, db, generate_feedback and export, which never grade.


def use_the_course(step) -> None:
    """Grade with the hidden autograders of the course nbgrader runs on: its CourseDirectory.root (configured,
    else the current directory, as nbgrader has it)."""
    from nbgrader.coursedir import CourseDirectory
    registry.use_course(CourseDirectory(config=step.config).root)


def verdict_outputs(check: dict) -> list:
    """The outputs nbgrader reads a grade from: clean stdout for a pass, an error for a fail.

    The error carries the judge's sentence only: no traceback, so no hidden test line reaches feedback.
    """
    if check["passed"]:
        return [new_output("stream", name="stdout", text=f"PASSED {check['title']}\n")]
    from attnkit.nbgrader_ext.feedback_report import named_cause
    cause = named_cause(check)              # "no known pattern" is no cause: it is said nowhere (issue 32)
    text = check["message"] + (f"\nDiagnosis: {cause}" if cause else "")
    return [new_output("error", ename="CheckFailed", evalue=text, traceback=[f"CheckFailed: {text}"])]


class DeduplicateGradeIds(DeduplicateIds):
    """nbgrader's DeduplicateIds, minus its failure: a duplicated grade cell stops being a grade cell.

    Stock nbgrader empties the duplicate's nbgrader metadata, and the metadata check then rejects
    the whole submission ("old version of the nbgrader metadata format"). Removing the key keeps
    the copy as an ordinary cell and lets the original carry the grade.
    """

    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.metadata.get("nbgrader") == {}:
            del cell.metadata["nbgrader"]
        return cell, resources


class _CompiledMetadataValidator(MetadataValidator):
    """nbgrader's cell-metadata validator with its JSON schema compiled once per process."""
    _compiled = None

    def validate_cell(self, cell):
        if "nbgrader" not in cell.metadata:
            return
        if cell.metadata["nbgrader"].get("schema_version", 0) != self.schema_version:
            return super().validate_cell(cell)            # nbgrader's own errors for old or new schemas
        cls = type(self)
        if cls._compiled is None:
            import jsonschema
            cls._compiled = jsonschema.validators.validator_for(self.schema)(self.schema)
        import jsonschema.exceptions
        error = jsonschema.exceptions.best_match(cls._compiled.iter_errors(cell.metadata["nbgrader"]))
        if error is not None:                             # what jsonschema.validate would raise
            raise error


class CheckCellMetadataCompiled(CheckCellMetadata):
    """nbgrader's CheckCellMetadata, same schema and same errors, without re-checking the schema per cell.

    Stock nbgrader calls jsonschema.validate on every cell, which first validates nbgrader's own
    schema against the JSON-Schema meta-schema: about 40 ms per notebook here, twice per
    submission. `attnkit autograde` swaps this in; `nbgrader autograde` keeps the stock step.
    """

    def preprocess(self, nb, resources):
        import traceback
        from nbgrader.nbgraderformat import ValidationError
        try:
            _CompiledMetadataValidator().validate_nb(nb)
        except ValidationError:
            self.log.error(traceback.format_exc())
            msg = "Notebook failed to validate; the nbgrader metadata may be corrupted."
            self.log.error(msg)
            raise ValidationError(msg)
        return nb, resources


class SandboxedExecute(NbGraderPreprocessor):
    """nbgrader's Execute, but the student's kernel runs in the grading sandbox.

    No network, the course hidden, a scratch copy of the notebook's folder, a
    memory cap, a time limit per cell and for the whole notebook, and every
    process it starts ended with it. The run only produces the outputs students
    see; grades come from JudgeGradeCells.

    What the run returns is written by the student's code, so it never becomes the
    graded notebook: the submission ``nb`` given here is kept (cells, sources, ids,
    metadata, points) and only the validated, size-capped outputs of its non-grade
    code cells are copied from the run (attnkit.nbgrader_ext.kernel_outputs.merge).
    """
    timeout = Integer(120, help="seconds per cell").tag(config=True)
    notebook_seconds = Integer(600, help="seconds for the whole notebook").tag(config=True)
    memory_mb = Integer(6144, help="address-space limit of the kernel").tag(config=True)

    def preprocess(self, nb, resources):
        from attnkit.isolation import sandbox
        if resources.get(patch.OVER_CAPS):
            return nb, resources               # the file was refused before it was read: no kernel to run
        folder = resources.get("metadata", {}).get("path") or "."
        source, missing = _corpora(resources)
        if missing:
            # Without its corpus every data cell would fail, and the student would read tracebacks naming the
            # sandbox's folders: the kernel run is skipped (the grades never depend on it) and the kit says why.
            if missing not in _REPORTED:
                _REPORTED.add(missing)
                self.log.warning("the notebooks' outputs are not shown: %s", missing)
            executed = None
        else:
            executed = sandbox.run_notebook(copy.deepcopy(nb), folder, self.timeout, self.notebook_seconds,
                                            self.memory_mb, log=self.log.warning, data_dir=source)
        return kernel_outputs.merge(nb, executed, _judged_cells(resources), log=self.log.warning), resources


_REPORTED = set()                  # each missing corpus is said once per grading process, not once per student


def _corpora(resources) -> tuple[str | None, str | None]:
    """The data directory the kernel reads (attnkit.engine.datasets's), and why it cannot (None when every corpus the
    assignment needs is there and verified)."""
    from attnkit.engine import datasets
    source = datasets.data_dir()
    try:
        for name, sha in datasets.needed(resources["nbgrader"]["assignment"]).items():
            datasets.verified(name, sha, source)
    except (KeyError, TypeError):
        return str(source), None              # not an attnkit assignment: nothing the kit knows it needs
    except datasets.CorpusProblem as e:
        return str(source), str(e)
    return str(source.resolve()), None


def _judged_cells(resources) -> frozenset:
    """The grade ids whose verdicts JudgeGradeCells writes (none for an assignment the kit does not know)."""
    from attnkit.engine import config
    try:
        return frozenset(config.load(resources["nbgrader"]["assignment"]).by_cell())
    except (KeyError, TypeError, ValueError, OSError):
        return frozenset()


class JudgeGradeCells(NbGraderPreprocessor):
    """Replace each configured test cell's outputs with attnkit's verdict for its check.

    A test cell the student deleted comes back at the end of the notebook with its verdict,
    so no submission is left waiting for manual grading of an automatic check.
    """
    # Verdicts judged elsewhere, looked up before judging here: `attnkit autograde --scheduler` sets it for its
    # run (autograde/cluster_pool.py: the Dask worker's verdict on what the judge reads of this same notebook).
    # None, or None for a notebook, and the judge runs in this process.
    verdicts_from = None

    def preprocess(self, nb, resources):
        from attnkit.engine import config
        use_the_course(self)
        assignment = resources["nbgrader"]["assignment"]
        try:
            cfg = config.load(assignment)
        except KeyError:
            return nb, resources            # not an attnkit assignment: leave nbgrader's verdicts
        cells = cfg.by_cell()
        refused = resources.get(patch.OVER_CAPS)
        if refused:                         # the file was refused before it was read (patch.py): nothing to judge
            result = cfg.refused(refused)
        else:
            from attnkit.engine import judge
            found = JudgeGradeCells.verdicts_from(nb, assignment) if JudgeGradeCells.verdicts_from else None
            student = resources["nbgrader"].get("student") or ""
            result = found if found is not None else judge.grade(nb, assignment, student=student)
        checks = {c["id"]: c for c in result["checks"]}
        seen = set()
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if cell.cell_type == "code" and grade_id in cells:
                cell.outputs = verdict_outputs(checks[cells[grade_id].id])
                seen.add(grade_id)
        for grade_id, check in cells.items():
            if grade_id not in seen:
                restored = new_code_cell(f"# {check.title} (this test cell was missing from the submission)")
                restored.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "locked": True,
                                                 "points": check.points, "schema_version": 3,
                                                 "solution": False, "task": False}
                restored.outputs = verdict_outputs(checks[check.id])
                nb.cells.append(restored)
        nb.metadata["attnkit"] = result         # the teaching report of generate_feedback is built from it
        return nb, resources


def _written_cells(nb) -> list:
    from nbgrader import utils
    return [c.metadata.nbgrader for c in nb.cells if c.cell_type == "markdown" and utils.is_grade(c)]


def mark_ungraded(nb, resources) -> None:
    """GetGrades writes 0 as the score of a written answer no TA has graded yet (nbgrader's Grade.score falls back
    to 0.0): here its ``score`` becomes None, from the gradebook's own record (no manual or automatic score), so
    the page can say "not yet graded" (attnkit/templates/nbconvert/feedback/index.html.j2)."""
    from nbgrader.api import Gradebook
    meta = resources.get("nbgrader", {})
    cells = _written_cells(nb)
    if not cells or "db_url" not in meta:
        return
    with Gradebook(meta["db_url"]) as gb:
        for cell in cells:
            grade = gb.find_grade(cell["grade_id"], meta["notebook"], meta["assignment"], meta["student"])
            if grade.manual_score is None and grade.auto_score is None:
                cell["score"] = None


def written_state(nb) -> dict | None:
    """The written answers' state in the cells (``score`` None until a TA grades it: mark_ungraded), for the
    page's one total: the automatic points beside it. None when the notebook has no written answer."""
    written = _written_cells(nb)
    if not written:
        return None
    scores = [w.get("score") for w in written]
    graded = all(s is not None for s in scores)
    return {"graded": graded, "score": f"{sum(scores):g}" if graded else None,
            "max": f"{sum(float(w.get('points') or 0) for w in written):g}"}


class PrependTeachingReport(NbGraderPreprocessor):
    """In nbgrader's feedback: put attnkit's report (diagnoses, attention pictures) at the top, and its style in
    the page's head. The report is a markdown cell like any other, cleaned like any other (attnkit/nbgrader_ext/inert.py):
    no exemption a student could claim. After CSSHTMLHeaderPreprocessor, which replaces the page's inlined CSS."""

    def preprocess(self, nb, resources):
        from attnkit.nbgrader_ext.feedback_report import fragment, report_css
        result = nb.metadata.get("attnkit")
        if result:
            student = resources.get("nbgrader", {}).get("student")
            mark_ungraded(nb, resources)
            nb.cells.insert(0, new_markdown_cell(fragment(result, student, written_state(nb))))
            resources.setdefault("inlining", {}).setdefault("css", []).append(report_css())
        return nb, resources
