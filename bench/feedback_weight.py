"""What a student's feedback page weighs, and what weighs: the demo class's pages (`attnkit demo` into a scratch
folder, or an existing course's feedback/), each with its bytes split into inline scripts, embedded pictures
(data: URLs), style, and the rest (the notebook's text and the report).

    python bench/feedback_weight.py [--course DIR]

The page weights in docs/tas.md and docs/performance.md are what this script prints.
"""
import argparse
import datetime
import re
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent
SCRIPT = re.compile(rb"<script\b[^>]*>.*?</script>", re.S | re.I)
STYLE = re.compile(rb"<style\b[^>]*>.*?</style>", re.S | re.I)
PICTURE = re.compile(rb"data:image/[a-z+]+;base64,[A-Za-z0-9+/=]+")


def parts(page: bytes) -> dict[str, int]:
    """Bytes of the page by kind: scripts, pictures, style, the rest."""
    scripts = sum(len(m) for m in SCRIPT.findall(page))
    pictures = sum(len(m) for m in PICTURE.findall(SCRIPT.sub(b"", page)))
    style = sum(len(m) for m in STYLE.findall(page))
    return {"total": len(page), "scripts": scripts, "pictures": pictures, "style": style,
            "rest": len(page) - scripts - pictures - style}


def report(course: Path) -> None:
    pages = sorted(course.glob("feedback/*/*/*.html"))
    if not pages:
        raise SystemExit(f"no feedback page under {course}/feedback")
    print(f"{datetime.date.today()}: {len(pages)} feedback pages of {course}")
    print(f"{'page':<36}{'total':>10}{'scripts':>10}{'pictures':>10}{'style':>10}{'rest':>10}  (kB)")
    for page in pages:
        p = parts(page.read_bytes())
        name = "/".join(page.parts[-3:-1])
        print(f"{name:<36}" + "".join(f"{p[k] / 1000:>10.0f}" for k in ("total", "scripts", "pictures", "style", "rest")))
    heaviest = max(len(p.read_bytes()) for p in pages)
    print(f"heaviest page: {heaviest / 1e6:.2f} MB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--course", type=Path, help="a course whose feedback/ is built (default: run attnkit demo)")
    args = ap.parse_args()
    if args.course:
        report(args.course)
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        course = Path(scratch) / "demo_course"
        subprocess.run([str(BIN / "attnkit"), "demo", "--into", str(course)], check=True, capture_output=True)
        report(course)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
