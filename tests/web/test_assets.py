"""The page works offline: it names only assets the server serves, which the package ships (the
package-data patterns cover every file of testbed/web/static), and uPlot is the release its README
names, unchanged."""

from __future__ import annotations

import fnmatch
import hashlib
import re
from pathlib import Path

from testbed.web.server import ASSETS, STATIC

ROOT = Path(__file__).resolve().parents[2]
STATIC_DIR = ROOT / "testbed" / "web" / "static"


def test_the_page_asks_for_no_address_elsewhere_and_only_for_assets_it_is_served():
    page = (STATIC_DIR / "index.html").read_text()
    asked = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert not [a for a in asked if "//" in a], asked  # no CDN, no other host
    assert {a.removeprefix("/static/") for a in asked if a.startswith("/static/")} == set(ASSETS)
    script = (STATIC_DIR / "live.js").read_text()
    assert not re.findall(r"https?://", script)
    for name in ASSETS:
        where = STATIC / "uplot" / name if name.startswith("uPlot") else STATIC / name
        assert where.is_file(), name


def test_the_package_data_ships_every_file_of_the_page():
    # the table's one list, read without tomllib (Python 3.11+; the package runs on 3.10)
    table = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.package-data]")[1]
    patterns = re.findall(r'"([^"]+)"', table.split("]")[0])
    for path in STATIC_DIR.rglob("*"):
        if path.is_file():
            rel = str(path.relative_to(ROOT / "testbed"))
            assert any(fnmatch.fnmatch(rel, p) for p in patterns), rel


def test_uplot_is_the_release_its_readme_names():
    readme = (STATIC_DIR / "uplot" / "README.md").read_text()
    sums = dict(re.findall(r"^\| (\S+) \| ([0-9a-f]{64}) \|$", readme, re.M))
    assert set(sums) == {"uPlot.iife.min.js", "uPlot.min.css", "LICENSE"}
    for name, digest in sums.items():
        assert hashlib.sha256((STATIC_DIR / "uplot" / name).read_bytes()).hexdigest() == digest, name
    assert "MIT" in (STATIC_DIR / "uplot" / "LICENSE").read_text()
    version = re.search(r"\*\*(\d+\.\d+\.\d+)\*\*", readme)
    assert version, "the README names the version in bold"
    assert f"(v{version.group(1)})" in (STATIC_DIR / "uplot" / "uPlot.iife.min.js").read_text()[:100]
