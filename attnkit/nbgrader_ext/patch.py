"""The one patch of nbgrader: stock `nbgrader autograde` and `generate_feedback` copy and read a student's
folder safely (``attnkit.isolation.files``).

nbgrader 0.9.6 copies a submission in ``BaseConverter.init_assignment`` (find_all_files + shutil.copy, which
follow links and read to the end) before any preprocessor runs, and its apps construct their converters
themselves (``Autograde``, ``GenerateFeedback``), so no configuration reaches that copy: this module is the
only place the kit replaces nbgrader code, and ``install()`` is its only entry. The course's
``grading_config/nbgrader_config.py`` calls it (nbgrader loads that file before it builds a converter) and so
does ``attnkit autograde``. tests/test_attack_nbgrader.py proves it both ways (links, FIFOs, huge files), and
tests/test_active_files.py (pages, SVG, XML, scripts handed in, opened by a TA in Chromium).

The same read is where a notebook's shape is capped (``attnkit.isolation.notebook_shape``: cells, nesting,
outputs, sizes) before nbformat builds anything: nbgrader reads the student's file here and nowhere before it,
so the caps hold on stock ``nbgrader autograde`` as on ``attnkit autograde`` (tests/test_attack_bombs.py).
"""
from __future__ import annotations

import os

from attnkit.isolation import notebook_shape
from attnkit.isolation.files import (MAX_NOTEBOOK_BYTES, MAX_TIMESTAMP_BYTES, Refused, _mib, _refusal, copy_tree,
                                     read_in_folder, read_regular)

def refused_notebook(name: str, reason: str):
    """What is graded in place of a notebook file that was refused: nothing but a note saying why."""
    from nbformat.v4 import new_markdown_cell, new_notebook
    return new_notebook(cells=[new_markdown_cell(
        f"**Your notebook `{name}` was not graded**: the file handed in was refused ({reason}). Nothing of it "
        f"was read; hand in the notebook itself (a regular file of at most {_mib(MAX_NOTEBOOK_BYTES)}).")])


def _note_cell(text: str):
    from nbformat.v4 import new_markdown_cell
    cell = new_markdown_cell(text)
    cell.metadata["attnkit_note"] = True
    return cell


# The key in nbconvert's resources, on the autograde pass of a notebook refused for its shape, holding the sentence:
# the judge step scores it 0 with that sentence, the kernel step runs nothing (steps.py).
OVER_CAPS = "attnkit_over_caps"


def over_caps_notebook(name: str, reason: str):
    """What is graded in place of a notebook refused for its shape (``notebook_shape``): a note saying why."""
    from nbformat.v4 import new_markdown_cell, new_notebook
    return new_notebook(cells=[new_markdown_cell(
        f"**Your notebook `{name}` was not graded**: {reason}. Nothing of it was read beyond counting, so every "
        f"automatic check scores 0.")])


def read_submission(path, log=None):
    """(the notebook node, stat, why it was refused for its shape or None) of ``path``, read safely: a refused file
    gives ``refused_notebook``; a notebook over ``notebook_shape``'s caps, checked on its bytes before nbformat
    reads them, gives ``over_caps_notebook`` and the sentence.

    Parse errors are raised as nbformat raises them (nbgrader reports the submission as failed, as before).
    """
    import nbformat
    name = os.path.basename(os.fspath(path))
    try:
        data, st = read_in_folder(path, MAX_NOTEBOOK_BYTES)
    except Refused as e:
        if log:
            log(f"notebook {path} refused: {e.reason}")
        return refused_notebook(name, e.reason), None, None
    try:
        notebook_shape.check(data)
    except notebook_shape.Refused as e:
        if log:
            log(f"notebook {path} refused: {e}")
        return over_caps_notebook(name, str(e)), None, str(e)
    return nbformat.reads(data.decode("utf-8"), as_version=4), st, None


def read_notebook(path, log=None):
    """(the notebook node, stat) of ``path`` read safely (``read_submission``)."""
    nb, st, _ = read_submission(path, log)
    return nb, st


def install() -> None:
    """Make nbgrader's ``autograde`` and ``generate_feedback`` copy and read submissions safely.

    Both copy the student's folder with ``BaseConverter.init_assignment`` (find_all_files +
    shutil.copy, which follow links) and read each notebook with ``open``. Here, for the converters
    whose input is a student's folder (Autograde: submitted/; GenerateFeedback: autograded/), the copy
    is ``copy_tree`` of passive types only (a TA's browser opens both folders: formgrader serves autograded/
    from the Jupyter server's origin unsandboxed, so an ``.html`` there runs with the TA's session) and the
    notebook is read with ``read_notebook``; a note listing what was refused is
    put at the top of the notebook (so the autograded notebook and the feedback show it). Other
    converters (generate_assignment copying the instructor's source) are left as nbgrader has them.
    ``CourseDirectory.get_existing_timestamp`` reads ``timestamp.txt`` capped, without following a link.
    Autograde's own copy of the source's helper files is nbgrader's: its source is the instructor's, and
    its destination is the tree of regular files and folders made here. Idempotent.
    """
    from nbconvert.exporters.exporter import ResourcesDict
    from nbgrader.converters import Autograde, GenerateFeedback
    from nbgrader.converters.base import BaseConverter
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.utils import parse_utc

    if getattr(BaseConverter, "_attnkit_safe_copy", False):
        return
    original_init, original_convert = BaseConverter.init_assignment, BaseConverter.convert_single_notebook
    guarded = (Autograde, GenerateFeedback)

    def init_assignment(self, assignment_id: str, student_id: str) -> None:
        if not isinstance(self, guarded):
            return original_init(self, assignment_id, student_id)
        source = self._format_source(assignment_id, student_id)
        dest = self._format_dest(assignment_id, student_id)
        # passive_only: formgrader serves autograded/ from the Jupyter origin unsandboxed, and TAs open feedback/
        self._attnkit_copy_report = copy_tree(source, dest, skip=list(self.coursedir.ignore) + ["*.ipynb"],
                                              log=self.log.warning, passive_only=True)
        self._attnkit_over_caps = {}          # notebook name -> why it was refused for its shape, this student

    def convert_single_notebook(self, notebook_filename: str) -> None:
        if not isinstance(self, guarded):
            return original_convert(self, notebook_filename)
        self.log.info("Converting notebook %s", notebook_filename)
        resources = self.init_single_notebook_resources(notebook_filename)
        nb, st, over_caps = read_submission(notebook_filename, log=self.log.warning)
        reading_submission = not isinstance(self, Autograde) or getattr(self, "_sanitizing", True)
        # Autograde reads the student's file (sanitizing), then its own copy in autograded/ (the refusal note, which
        # passes the caps): the second pass is told, through the resources, that the submission was refused.
        refusals = self.__dict__.setdefault("_attnkit_over_caps", {})
        name = os.path.basename(notebook_filename)
        if over_caps and reading_submission:
            refusals[name] = over_caps
        elif isinstance(self, Autograde) and not reading_submission and name in refusals:
            resources[OVER_CAPS] = refusals[name]
        report = getattr(self, "_attnkit_copy_report", None)
        if reading_submission and report is not None and report.refused:
            nb.cells.insert(0, _note_cell(report.note()))
        # what nbconvert's Exporter.from_filename puts in the resources before reading the file
        path, basename = os.path.split(notebook_filename)
        resources["metadata"] = ResourcesDict(name=os.path.splitext(basename)[0], path=path)
        if st is not None:
            import datetime
            modified = datetime.datetime.fromtimestamp(st.st_mtime, tz=datetime.timezone.utc)
            resources["metadata"]["modified_date"] = modified.strftime("%B %-d, %Y")
        output, resources = self.exporter.from_notebook_node(nb, resources=resources)
        self.write_single_notebook(output, resources)

    def get_existing_timestamp(self, dest_path: str):
        path = os.path.join(dest_path, "timestamp.txt")
        try:
            data, _ = read_regular(path, MAX_TIMESTAMP_BYTES)
        except FileNotFoundError:
            return None
        except OSError as e:
            self.log.warning("Ignoring timestamp file %s: %s", path, _refusal(e))
            return None
        timestamp = data.decode("utf-8", "replace").strip()
        if not timestamp:
            self.log.warning("Empty timestamp file: {}".format(path))
            return None
        try:
            return parse_utc(timestamp)
        except ValueError:
            self.fail("Invalid timestamp string: {}".format(path))

    BaseConverter.init_assignment = init_assignment
    BaseConverter.convert_single_notebook = convert_single_notebook
    CourseDirectory.get_existing_timestamp = get_existing_timestamp
    BaseConverter._attnkit_safe_copy = True
