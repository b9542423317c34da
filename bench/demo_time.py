"""How long `make demo` takes a user: `attnkit data fetch` (corpora already there: verified only) then `attnkit demo`,
each as a command of its own, timed end to end, with the date and the machine's core count.

    python bench/demo_time.py [--repeat 1]

The demo's time in the README is what this script prints (the venv already built: `make` builds it once).
"""
import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--show", action="store_true", help="also print what attnkit demo printed")
    args = ap.parse_args()
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as scratch:
            start = time.monotonic()
            subprocess.run([str(BIN / "attnkit"), "data", "fetch"], check=True, capture_output=True)
            fetched = time.monotonic()
            demo = subprocess.run([str(BIN / "attnkit"), "demo", "--into", str(Path(scratch) / "demo_course")],
                                  check=True, capture_output=True, text=True)
            done = time.monotonic()
        print(f"{datetime.date.today()} on {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}: "
              f"make demo {done - start:.0f} s (data fetch {fetched - start:.1f} s, attnkit demo {done - fetched:.0f} s)")
        if args.show:
            print(demo.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
