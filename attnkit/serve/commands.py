"""The check service's commands: `attnkit serve`, `attnkit tokens ...`, `attnkit checks report`."""
from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path

STATE_HELP = "the folder of the service's database (default: .attnkit/ in the course; owner-only, never committed)"


def _store(args):
    from attnkit.engine import registry
    from attnkit.serve.store import Store, default_dir
    return Store(Path(args.state_dir) if args.state_dir else default_dir(registry.course()))


def _known(assignment: str, command: str):
    """The assignment's config, or None after one sentence on stderr."""
    from attnkit.engine import config
    try:
        return config.load(assignment)
    except KeyError as e:
        print(f"attnkit {command}: {e.args[0]}", file=sys.stderr)
        return None


def cmd_serve(args) -> int:
    from attnkit.serve.app import serve
    if args.port is None and not args.hub:
        print("attnkit serve: give --port (or --hub, as a JupyterHub service)", file=sys.stderr)
        return 2
    if args.workers < 1 or args.queue < 1:
        print("attnkit serve: --workers and --queue are at least 1", file=sys.stderr)
        return 2
    for a in args.assignment or ():
        if _known(a, "serve") is None:
            return 2
    return serve(_store(args), args.port, args.bind, args.workers, args.queue, args.assignment, hub=args.hub)


def cmd_tokens(args) -> int:
    from attnkit.serve import limits, tokens
    store = _store(args)
    try:
        if args.tokens_command == "add":
            token = tokens.add(store, args.student)
            print(f"token for {args.student} (shown once; the course keeps only its hash):")
            print(token)
        elif args.tokens_command == "revoke":
            tokens.revoke(store, args.student)
            print(f"revoked the token of {args.student}")
        elif args.tokens_command == "list":
            for student, created, revoked in tokens.listing(store):
                when = lambda t: datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")  # noqa: E731
                print(f"{student:24} made {when(created)}" + (f", revoked {when(revoked)}" if revoked else ""))
        else:                                   # grant
            cfg = _known(args.assignment, "tokens grant")
            if cfg is None:
                return 2
            if args.n < 1:
                print("attnkit tokens grant: N is a number of checks >= 1", file=sys.stderr)
                return 2
            level = limits.grant(store, tokens.check_student(args.student), args.assignment, args.n,
                                 cfg.check_service)
            print(f"{args.student} has {int(level)} check(s) of {args.assignment} now")
    except tokens.TokenProblem as e:
        print(f"attnkit tokens {args.tokens_command}: {e}", file=sys.stderr)
        return 2
    return 0


def cmd_checks_report(args) -> int:
    from attnkit.serve import limits
    if _known(args.assignment, "checks report") is None:
        return 2
    rows = limits.attempts(_store(args), args.assignment)
    when = lambda t: datetime.fromtimestamp(t, timezone.utc).strftime("%m-%d %H:%M")  # noqa: E731
    print(f"{'student':24} {'checks':>6} {'notebooks':>9} {'best':>7} {'last':>7} {'of':>5}  first - last (UTC)")
    for student, n, distinct, best, last, top, first, latest in rows:
        print(f"{student:24} {n:6d} {distinct:9d} {best:7g} {last:7g} {top:5g}  {when(first)} - {when(latest)}")
    print(f"{len(rows)} student(s), {sum(r[1] for r in rows)} check(s) of {args.assignment}")
    return 0


def add_parsers(sub) -> None:
    """The subcommands, added to attnkit's parser (attnkit/cli.py)."""
    sv = sub.add_parser("serve", help="the check service: students check a notebook from Jupyter, rate-limited",
                        description="Serve this course's assignments to students' notebooks (attnkit_check.py): "
                                    "POST /api/v1/check/ASSIGNMENT with a student's token, judged as `attnkit "
                                    "grade --student` would, what is shown and how often set by each manifest's "
                                    "[check_service]. Runs until interrupted.")
    sv.add_argument("--port", type=int, help="the TCP port to listen on (required without --hub)")
    sv.add_argument("--hub", action="store_true",
                    help="JupyterHub mode: run as the hub's service (its address and prefix from the hub; each "
                         "student is who the hub says their server's token is; no tokens of ours). See "
                         "attnkit.serve.hub.configure and docs/instructors.md")
    sv.add_argument("--bind", default="127.0.0.1",
                    help="the address to listen on (default: 127.0.0.1, this machine only; put a TLS proxy in "
                         "front for any other)")
    sv.add_argument("--workers", type=int, default=2, help="checks judged at once (default: 2)")
    sv.add_argument("--queue", type=int, default=16,
                    help="checks admitted at once, judged or waiting; past it, 503 with Retry-After (default: 16)")
    sv.add_argument("--assignment", action="append", metavar="A",
                    help="serve only this assignment (repeatable; default: every assignment of the course)")
    sv.add_argument("--state-dir", help=STATE_HELP)
    sv.set_defaults(func=cmd_serve)

    tk = sub.add_parser("tokens", help="the check service's student tokens: add, revoke, list, grant",
                        description="Each student reaches `attnkit serve` with a token of their own.")
    tsub = tk.add_subparsers(dest="tokens_command", required=True)
    leaves = [
        tsub.add_parser("add", help="make a token for STUDENT (printed as the last line; replaces an earlier one)"),
        tsub.add_parser("revoke", help="stop STUDENT's token"),
        tsub.add_parser("list", help="who has a token, since when, revoked or not"),
        tsub.add_parser("grant", help="give STUDENT N more checks of ASSIGNMENT, now"),
    ]
    for leaf in leaves[:2] + leaves[3:]:
        leaf.add_argument("student", help="the student's id (nbgrader's)")
    leaves[3].add_argument("assignment", help="assignment id (a folder of autograder/)")
    leaves[3].add_argument("n", type=int, metavar="N", help="how many checks")

    ck = sub.add_parser("checks", help="the check service's record: `attnkit checks report ASSIGNMENT`",
                        description="Every check the service judged is recorded (student, time, score, the "
                                    "notebook's SHA-256, what was shown).")
    csub = ck.add_subparsers(dest="checks_command", required=True)
    rp = csub.add_parser("report", help="checks per student of ASSIGNMENT")
    rp.add_argument("assignment", help="assignment id (a folder of autograder/)")
    rp.set_defaults(func=cmd_checks_report)

    for leaf in [*leaves, rp]:
        leaf.add_argument("--state-dir", help=STATE_HELP)
        # the parent's --course-dir (cli.py adds it) is kept unless given here too
        leaf.add_argument("--course-dir", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    for leaf in leaves:
        leaf.set_defaults(func=cmd_tokens)
