"""A wheel of every distribution this venv has installed, so a fresh venv can install the kit offline.

The install journey (tests/test_install_journey.py) installs the kit's wheel into a new venv as an instructor
would, with pip resolving attnkit's declared requirements; pip is pointed at this wheelhouse alone
(`--no-index --find-links`) instead of PyPI, so the test is hermetic and needs no download: every wheel holds
exactly the files of a distribution `make venv` installed at the lock's pins, repacked as pip's installer
wrote them (RECORD). What a venv's bin/ holds is left out: pip writes the console scripts again from each
wheel's entry_points.txt. Files installed outside site-packages (share/jupyter/...) go in the wheel's .data/.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import re
import sysconfig
import zipfile
from pathlib import Path

# what pip writes when it installs, and writes again from the wheel: never part of one
INSTALLER_FILES = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel_tag(dist) -> str:
    """The file name's compressed tag set ("py2.py3-none-any") of the WHEEL file's Tag lines."""
    tags = [line.split(":", 1)[1].strip().split("-") for line in dist.read_text("WHEEL").splitlines()
            if line.startswith("Tag:")]
    return "-".join(".".join(dict.fromkeys(t[i] for t in tags)) for i in range(3))


def repack(dist, dest: Path) -> Path:
    """One installed distribution as a wheel in ``dest``."""
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    version = dist.version.replace("-", "_")
    info = f"{name}-{version}.dist-info"
    data = f"{name}-{version}.data"
    site = Path(dist.locate_file(""))
    path = dest / f"{name}-{version}-{_wheel_tag(dist)}.whl"
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:        # stored: half the time, for a test
        for f in dist.files or []:
            parts = f.parts
            if "__pycache__" in parts or (parts[0].endswith(".dist-info") and parts[-1] in INSTALLER_FILES):
                continue
            if parts[0] == "..":                                          # outside site-packages
                rel = Path(*[p for p in parts if p != ".."])
                if rel.parts[0] == "bin":
                    continue
                arc = f"{data}/data/{rel.as_posix()}"
            elif parts[0].endswith(".dist-info"):
                arc = f"{info}/{'/'.join(parts[1:])}"
            else:
                arc = f.as_posix()
            src = (site / f).resolve()
            if not src.is_file():
                continue
            blob = src.read_bytes()
            zf.writestr(arc, blob)
            record.append(f"{arc},{_digest(blob)},{len(blob)}")
        record.append(f"{info}/RECORD,,")
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def build(dest: Path, skip=("attnkit", "pip")) -> list[Path]:
    """Every distribution of this venv's site-packages but ``skip``, as wheels in ``dest``."""
    paths = sysconfig.get_paths()
    dists = md.distributions(path=sorted({paths["purelib"], paths["platlib"]}))
    dest.mkdir(parents=True, exist_ok=True)
    return [repack(d, dest) for d in dists if d.metadata["Name"].lower() not in skip]
