"""attnkit: the one command an instructor needs beside nbgrader."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from attnkit.engine import registry

# Each command imports what it runs inside its own function: importing every command's modules at the top (torch,
# nbgrader, nbconvert, matplotlib) takes 2.6-3.0 s here against 0.1-0.2 s for this module alone (`python -c
# "import attnkit.cli"`, 2026-12-02, a loaded 2-core machine), paid by `attnkit --help` and `attnkit grade` alike.
# The same reason keeps the judge's imports inside nbgrader_ext/steps.py and the fork-time imports in
# autograde/prepare.py; the child-side modules (isolation/*_runtime.py, notebook_runner.py) import late because
# they start as `python -I -S` and forget the kit before a submission runs.


def cmd_grade(args) -> int:
    from attnkit.engine import config, judge
    from attnkit.engine.results import KitFault
    from attnkit.table import result_table
    if not Path(args.submission).is_file():
        print(f"attnkit grade: no such notebook: {args.submission}", file=sys.stderr)
        return 2
    try:
        config.load(args.assignment)
    except KeyError as e:
        print(f"attnkit grade: {e.args[0]}", file=sys.stderr)
        return 2
    try:
        result = judge.grade(args.submission, args.assignment, student=args.student)
    except KitFault as e:
        print(f"attnkit grade: fault of the kit, not of the submission: {e}", file=sys.stderr)
        return 3
    if args.report:
        from attnkit.nbgrader_ext.feedback_report import page
        Path(args.report).write_text(page(result, Path(args.submission).stem))
    print(json.dumps(result) if args.json else result_table(result))
    return 0


def cmd_release(args) -> int:
    from attnkit.engine.datasets import CorpusProblem
    from attnkit.course import assignments
    from attnkit.release import ReleaseProblem, release
    chosen = args.assignment or assignments()
    try:
        # The release ends by teaching the course's gradebook what was released, or `nbgrader autograde` has
        # nothing to grade against ("No assignment with ID ... exists in the database") in a fresh clone.
        release(chosen, solutions=not args.no_solutions, data_dir=args.data_dir)
    except (CorpusProblem, ReleaseProblem) as e:    # the course is as it was: say why, in one sentence
        print(f"attnkit release: {e}", file=sys.stderr)
        return 2
    return 0


def cmd_demo(args) -> int:
    from attnkit.engine.datasets import CorpusProblem
    from attnkit.demo import run_demo
    try:
        into = Path(args.into).resolve() if args.into else registry.course() / "demo_course"
        return run_demo(into, log=print, data_dir=args.data_dir)
    except CorpusProblem as e:              # checked before grading: no class is graded without its corpora
        print(f"attnkit demo: {e}", file=sys.stderr)
        return 2


def cmd_data_fetch(args) -> int:
    from attnkit.engine import config
    from attnkit.engine.datasets import CorpusProblem, data_dir
    from attnkit.datafetch import fetch
    try:
        for a in args.assignment:
            config.load(a)
        fetch(data_dir(args.data_dir), args.assignment or None)
    except KeyError as e:
        print(f"attnkit data fetch: {e.args[0]}", file=sys.stderr)
        return 2
    except CorpusProblem as e:
        for problem in getattr(e, "problems", [str(e)]):      # every corpus that failed, one sentence each
            print(f"attnkit data fetch: {problem}", file=sys.stderr)
        return 2
    return 0


def cmd_doctor(args) -> int:
    from attnkit.doctor import run_doctor
    return run_doctor(data_dir=args.data_dir, course=registry.course(), log=print)


def cmd_autograde(args) -> int:
    from attnkit.autograde import main as autograde_main
    return autograde_main(args)


def cmd_report(args) -> int:
    from attnkit.engine import config
    from attnkit.class_report import write_report
    course = registry.course()
    try:
        config.load(args.assignment)
    except KeyError as e:
        print(f"attnkit report: {e.args[0]}", file=sys.stderr)
        return 2
    from attnkit import gradebook
    try:
        where = gradebook.locate(course)          # where the course's nbgrader configuration keeps it
    except gradebook.CourseConfigError as e:
        print(f"attnkit report: {e}", file=sys.stderr)
        return 2
    if not where.exists():
        print(f"attnkit report: no gradebook at {where}: grade the class first", file=sys.stderr)
        return 2
    print(write_report(course, args.assignment))
    return 0


def cmd_export(args) -> int:
    from attnkit.engine import config
    try:
        config.load(args.assignment)
    except KeyError as e:
        print(f"attnkit export: {e.args[0]}", file=sys.stderr)
        return 2
    if args.canvas_assignment_id is not None and args.format != "canvas":
        print("attnkit export: --canvas-assignment-id goes with --format canvas", file=sys.stderr)
        return 2
    if args.format == "gradescope":
        from attnkit.gradescope_zip import build_zip, default_path
        print(build_zip(args.assignment, Path(args.output) if args.output else default_path(args.assignment)))
        return 0
    from attnkit.export import ExportError, canvas_table, grade_table, to_csv
    try:
        if args.format == "canvas":
            header, rows, pending = canvas_table(registry.course(), args.assignment, args.canvas_assignment_id)
        else:
            header, rows, pending = grade_table(registry.course(), args.assignment)
    except ExportError as e:
        print(f"attnkit export: {e}", file=sys.stderr)
        return 2
    text = to_csv(header, rows)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    if pending:
        print(f"attnkit export: {pending} written answer(s) still await a TA: "
              f"{'' if args.format == 'canvas' else 'blank, and '}counted as 0 in the total", file=sys.stderr)
    return 0


def cmd_selfcheck(args) -> int:
    from attnkit.engine import config
    from attnkit.selfcheck import run_selfcheck
    return run_selfcheck(args.assignment or config.assignments(), jobs=args.jobs)


def cmd_check(args) -> int:
    from attnkit.engine import config
    from attnkit.check import run_check
    return run_check(args.assignment or config.assignments(), keys=args.keys, key_seed=args.key_seed, jobs=args.jobs)


def cmd_new(args) -> int:
    from attnkit.scaffold import ScaffoldError, create, next_steps
    try:
        if args.source:
            from attnkit.assignment_copy import copy_assignment
            made = copy_assignment(args.name, args.source)
        else:
            made = create(args.name)
    except ScaffoldError as e:
        print(f"attnkit new: {e}", file=sys.stderr)
        return 2
    print(f"{'copied' if args.source else 'made'} assignment {args.name}:")
    print("\n".join(f"  {p}" for p in made))
    print(next_steps(args.name))
    return 0


def cmd_quickstart(args) -> int:
    from attnkit.quickstart import QuickstartError, create, next_steps
    folder = Path(args.course_dir if args.course_dir else args.course_id).absolute()
    try:
        made = create(args.course_id, folder)
    except QuickstartError as e:
        print(f"attnkit quickstart: {e}", file=sys.stderr)
        return 2
    print(f"made course {args.course_id} in {folder}:")
    print("\n".join(f"  {p}" for p in made))
    print(next_steps(args.course_id, folder))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnkit", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    g = sub.add_parser("grade", help="grade one submission notebook with the hidden checks",
                       description="Grade one submission notebook. Exit 0 whenever grading completed, "
                                   "whatever the score; 2 for bad usage.")
    g.add_argument("submission", help="the student's notebook (.ipynb)")
    g.add_argument("--assignment", required=True, help="assignment id (a folder of autograder/)")
    g.add_argument("--student", default="", help="whose hidden inputs to draw (each student has their own; "
                                                 "default: the course's own draw)")
    g.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    g.add_argument("--report", metavar="HTML", help="also write the teaching report (diagnoses, attention pictures)")
    g.set_defaults(func=cmd_grade)

    r = sub.add_parser("release", help="regenerate source notebooks, release/ and solutions/ from source/*.pct.py",
                       description="Sync source/A/A.ipynb from its jupytext twin, run nbgrader "
                                   "generate_assignment into release/, and execute the solution into solutions/.")
    r.add_argument("assignment", nargs="*", help="assignments (default: all in source/)")
    r.add_argument("--no-solutions", action="store_true", help="skip executing the solution notebooks")
    r.add_argument("--data-dir", help=DATA_DIR_HELP)
    r.set_defaults(func=cmd_release)

    d = sub.add_parser("demo", help="grade a sample class end to end with nbgrader",
                       description="Build a scratch course with a small sample class, run nbgrader autograde "
                                   "and generate_feedback, and print the scores and where the feedback is.")
    d.add_argument("--into", default="demo_course", help="the scratch course to make (recreated; default: demo_course/ in this course)")
    d.add_argument("--data-dir", help=DATA_DIR_HELP)
    d.set_defaults(func=cmd_demo)

    from attnkit.autograde import add_arguments as autograde_arguments
    ag = sub.add_parser("autograde", help="grade a whole class in parallel into the nbgrader gradebook",
                        description="Grade every submission of ASSIGNMENT under submitted/ with N workers, into "
                                    "the nbgrader gradebook and autograded/ as nbgrader autograde would, with a "
                                    "per-check CSV; resumable after an interruption.")
    autograde_arguments(ag)
    ag.set_defaults(func=cmd_autograde)

    rp = sub.add_parser("report", help="write the class report (one offline HTML page for the TAs)",
                        description="Write reports/ASSIGNMENT-class-report.html from the gradebook and autograded/: "
                                    "score histogram, pass rate per check, named mistakes, students, errors.")
    rp.add_argument("assignment", help="assignment id (a folder of autograder/)")
    rp.set_defaults(func=cmd_report)

    ex = sub.add_parser("export", help="grades as CSV for an LMS (per check, or Canvas's import), or the "
                                       "Gradescope zip",
                        description="--format csv (default): one row per student of the gradebook with the points "
                                    "of every check and written answer, late penalty, total (equal to nbgrader "
                                    "export's score) and max; blank means no grade (no submission, or not yet "
                                    "graded by a TA). --format canvas: the total per student in Canvas's "
                                    "Gradebook import format (Student, ID, SIS User ID, SIS Login ID, Section, "
                                    "then the assignment; a Points Possible row), nbgrader's student id as SIS "
                                    "Login ID and its lms_user_id as ID. --format gradescope: the autograder zip "
                                    "to upload to Gradescope.")
    ex.add_argument("assignment", help="assignment id (a folder of autograder/)")
    ex.add_argument("--format", choices=("csv", "canvas", "gradescope"), default="csv",
                    help="what to export (default: csv)")
    ex.add_argument("--canvas-assignment-id", metavar="NUMBER",
                    help="canvas: the Canvas assignment to fill (the number in its address, .../assignments/"
                         "NUMBER): the column is named 'ASSIGNMENT (NUMBER)'; without it the column is named "
                         "ASSIGNMENT, which Canvas matches to an assignment of that title or creates")
    ex.add_argument("--output", metavar="FILE", help="where to write (csv and canvas default: stdout; gradescope "
                                                     "default: .attnkit/attnkit-ASSIGNMENT-gradescope.zip in the "
                                                     "kit, gitignored: the zip holds the grading key)")
    ex.set_defaults(func=cmd_export)

    sc = sub.add_parser("selfcheck", help="grade each assignment's catalogue of right and wrong versions (mutants.py)",
                        description="Run each assignment's catalogue of buggy and correct versions (its mutants.py) "
                                    "against the current checks; "
                                    "print the mutation score and false fails; exit 1 if any bug goes uncaught "
                                    "or undiagnosed, or any correct variant loses a point.")
    sc.add_argument("assignment", nargs="*", help="assignments (default: all)")
    sc.add_argument("--jobs", type=int, help="parallel gradings (default: number of cores)")
    sc.set_defaults(func=cmd_selfcheck)

    ck = sub.add_parser("check", help="every invariant of an assignment: plug-in, ids, release, the corpus under N keys",
                        description="Check every invariant the kit relies on for each assignment, each printed ok or "
                                    "FAIL with its cause: the plug-in's shape, mistake ids, every check lost alone by "
                                    "some mistake, no solution line in the release, a fresh release identical to "
                                    "release/A, and the corpus exact under N grading keys drawn at random. Exit 1 if "
                                    "any fails. Takes about one `attnkit selfcheck` per key plus one release: minutes "
                                    "for a corpus of 70 entries on 2 cores (each step prints its time; --keys 0 "
                                    "leaves the corpus out).")
    ck.add_argument("assignment", nargs="*", help="assignments (default: all)")
    ck.add_argument("--keys", type=int, default=3, help="grading keys to grade the corpus under (default: 3; 0 leaves the corpus out)")
    ck.add_argument("--key-seed", type=int, help="draw the keys from this seed, to repeat a run (default: random)")
    ck.add_argument("--jobs", type=int, help="parallel gradings (default: number of cores)")
    ck.set_defaults(func=cmd_check)

    nw = sub.add_parser("new", help="scaffold a new assignment folder: a small worked example to make your own",
                        description="Create autograder/NAME/ (manifest, notebook source, judge, catalogue of mistakes) and the "
                                    "link source/NAME, as a small worked example (a row-wise softmax) that releases, "
                                    "grades and selfchecks as it is. See docs/writing-an-assignment.md.")
    nw.add_argument("name", help="the assignment's id: lower-case letters, digits and _ (nbgrader's id too)")
    nw.add_argument("--from", dest="source", metavar="SOURCE",
                    help="copy an existing assignment instead: a folder autograder/NAME of another course, or NAME "
                         "of the kit's demonstration course (run from its checkout); links become copies")
    nw.set_defaults(func=cmd_new)

    qs = sub.add_parser("quickstart", help="make a new, empty course, ready for `attnkit new NAME`",
                        description="Make a course as nbgrader quickstart does: a new folder COURSE_ID here (or "
                                    "--course-dir DIR, an empty or new folder) with nbgrader's configuration for "
                                    "that course id, grading_config/, autograder/, source/, a README, a .gitignore "
                                    "and the course's grading key in .attnkit/. Never writes over a course.")
    qs.add_argument("course_id", help="nbgrader's course id (letters, digits, _ . -)")
    qs.add_argument("--course-dir", help="where to make the course (default: a new folder COURSE_ID here)")
    qs.set_defaults(func=cmd_quickstart, makes_course=True)

    doc = sub.add_parser("doctor", help="check the environment, pinned versions, nbgrader config and data",
                         description="Check the environment and say in plain words what is missing and how to fix it.")
    doc.add_argument("--data-dir", help=DATA_DIR_HELP)
    doc.set_defaults(func=cmd_doctor)

    da = sub.add_parser("data", help="the corpora the assignments need: `attnkit data fetch`",
                        description="The corpora (text data sets) the assignments' manifests name.")
    dsub = da.add_subparsers(dest="data_command", required=True)
    df = dsub.add_parser("fetch", help="download each corpus missing from the data directory, and verify every one",
                         description="Download each corpus the manifests' [data] name that the data directory lacks "
                                     "from its public origin (data/SOURCES.md), check it against the pinned SHA-256 "
                                     "and write it there; verify those already there. Nothing unverified is ever "
                                     "written. ATTNKIT_DATA_MIRROR=BASE fetches each origin's path from BASE instead "
                                     "of its host; ATTNKIT_DATA_DEADLINE=SECONDS bounds each file's download "
                                     "(default 300). Exit 0 when every corpus is there and verified, 2 otherwise.")
    df.add_argument("assignment", nargs="*", help="assignments (default: all)")
    df.add_argument("--data-dir", help=DATA_DIR_HELP)
    df.set_defaults(func=cmd_data_fetch)

    from attnkit.serve.commands import add_parsers as check_service_parsers
    check_service_parsers(sub)             # attnkit serve, attnkit tokens ..., attnkit checks report
    for name, parser in [*sub.choices.items(), ("data fetch", df)]:
        if name != "data" and "--course-dir" not in parser._option_string_actions:   # autograde has its own
            parser.add_argument("--course-dir", default=".", help=COURSE_DIR_HELP)
    return p


COURSE_DIR_HELP = ("the course: the folder with nbgrader_config.py and autograder/<assignment>/ (default: here), as "
                   "nbgrader's CourseDirectory.root")


DATA_DIR_HELP = ("directory holding the corpora (default: $ATTNKIT_DATA_DIR, else ../shared/data beside the "
                 "checkout when it exists, else data/)")


def main(argv=None) -> int:
    # Student text (exception messages, ids, file names) reaches what every command prints: through Inert, a
    # control or format character in it is shown as its escape, never obeyed by the terminal
    # (attnkit/engine/terminal.py).
    from attnkit.engine.terminal import Inert
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Inert(sys.stdout), Inert(sys.stderr)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = saved


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    try:
        if not getattr(args, "makes_course", False):      # quickstart's folder is no course yet
            registry.use_course(args.course_dir)
    except registry.NotACourse as e:
        print(f"attnkit: {e}, or make a new course with `attnkit quickstart COURSE_ID`", file=sys.stderr)
        return 2
    try:
        code = args.func(args)
        sys.stdout.flush()                # here, so a reader that left is seen in this try, not at exit
        return code
    except BrokenPipeError:
        # The reader of stdout left (`attnkit grade ... | head`): end quietly as a Unix filter does, with the
        # status of a process SIGPIPE ended. stdout now goes to /dev/null, so the interpreter's last flush of
        # what is still buffered cannot raise it again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13


if __name__ == "__main__":
    sys.exit(main())
