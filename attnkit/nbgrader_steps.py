"""attnkit's step in nbgrader's autograde pipeline."""
from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor

from autograder import config, judge


def verdict_outputs(check: dict) -> list:
    """The outputs nbgrader reads a grade from: clean stdout for a pass, an error for a fail.

    The error carries the judge's sentence only: no traceback, so no hidden test line reaches feedback.
    """
    if check["passed"]:
        return [new_output("stream", name="stdout", text=f"PASSED {check['title']}\n")]
    text = check["message"] + (f"\nDiagnosis: {check['diagnosis']}" if check.get("diagnosis") else "")
    return [new_output("error", ename="CheckFailed", evalue=text, traceback=[f"CheckFailed: {text}"])]


class JudgeGradeCells(NbGraderPreprocessor):
    """Replace each configured test cell's outputs with attnkit's verdict for its check."""

    def preprocess(self, nb, resources):
        assignment = resources["nbgrader"]["assignment"]
        try:
            cells = config.load(assignment).by_cell()
        except KeyError:
            return nb, resources            # not an attnkit assignment: leave nbgrader's verdicts
        result = judge.grade(nb, assignment)
        checks = {c["id"]: c for c in result["checks"]}
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if cell.cell_type == "code" and grade_id in cells:
                cell.outputs = verdict_outputs(checks[cells[grade_id].id])
        resources["attnkit_result"] = result
        return nb, resources
