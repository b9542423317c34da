"""Real LibreOffice Calc (Debian's libreoffice-calc-nogui) for the tests: open CSV files as a spreadsheet user
would, with formulas evaluated, and read back what each cell became.

``evaluate(*paths)`` converts the CSV files in one headless run to flat OpenDocument (.fods, XML) and returns,
per file, its rows of ``Cell``: the value type LibreOffice gave the cell (``float``, ``string``...), its value
(a float for a number, the shown text otherwise) and the formula it evaluated, if any.
"""
import os
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import NamedTuple

import pytest

# Calc's CSV import options (its "Text CSV" filter's tokens): comma, double quote, UTF-8, from line 1, standard
# cell format, English (US), quoted fields NOT forced to text, special numbers detected, ..., token 13 "evaluate
# formulas" on: the most trusting settings, the ones a formula needs to run.
CSV_FILTER = "CSV:44,34,76,1,,1033,false,true,false,false,false,-1,true"
NS = {"table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
      "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
      "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0"}


class Cell(NamedTuple):
    type: str | None          # office:value-type: "float", "string", ...
    value: float | str        # the number for a float cell, else the text shown
    formula: str | None       # table:formula when Calc read the field as a formula


def soffice() -> str:
    found = shutil.which("soffice") or shutil.which("libreoffice")
    if not found:
        if os.environ.get("CI"):
            pytest.fail("LibreOffice (soffice) is required in CI: make test installs libreoffice-calc-nogui")
        pytest.skip("LibreOffice is not installed (make test installs libreoffice-calc-nogui with apt where it "
                    "can): the CSV files cannot be opened in a real spreadsheet here")
    return found


def _rows(fods: Path) -> list[list[Cell]]:
    t, o = "{%s}" % NS["table"], "{%s}" % NS["office"]
    rows = []
    for row in ET.parse(fods).getroot().iter(t + "table-row"):
        cells = []
        for c in row.iter(t + "table-cell"):
            kind = c.get(o + "value-type")
            text = "\n".join("".join(p.itertext()) for p in c.findall("text:p", NS))
            value = float(c.get(o + "value")) if kind == "float" else text
            cells.extend([Cell(kind, value, c.get(t + "formula"))] * int(c.get(t + "number-columns-repeated", 1)))
        while cells and cells[-1].type is None:                     # the sheet's empty tail
            cells.pop()
        if cells:
            rows.append(cells)
    return rows


def evaluate(*paths: Path) -> list[list[list[Cell]]]:
    """Each CSV file as Calc reads it (formulas evaluated): its non-empty rows of cells."""
    exe = soffice()
    with tempfile.TemporaryDirectory() as tmp:
        profile, out = Path(tmp) / "profile", Path(tmp) / "out"
        # copies with distinct names: two inputs called x.csv would write the same x.fods
        sources = []
        for i, p in enumerate(paths):
            sources.append(Path(tmp) / f"{i}.csv")
            shutil.copyfile(p, sources[-1])
        p = subprocess.run([exe, "--headless", f"-env:UserInstallation={profile.as_uri()}", "--infilter=" + CSV_FILTER,
                            "--convert-to", "fods", "--outdir", str(out), *map(str, sources)],
                           capture_output=True, text=True, timeout=600)
        missing = [s.name for s in sources if not (out / f"{s.stem}.fods").is_file()]
        assert not missing, f"LibreOffice did not convert {missing}: {p.stdout[-1000:]} {p.stderr[-2000:]}"
        return [_rows(out / f"{s.stem}.fods") for s in sources]
