"""Every HTML report, rendered by a real browser (headless Chromium) and screenshotted.

Skips, saying so, where Debian's chromium is not installed (ci/setup/chromium.sh installs it).
"""

from __future__ import annotations

import functools
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from grader.cli import main
from grader.report import html
from grader.results import Result

from report_fixtures import class_results, class_store  # noqa: F401  (fixtures)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH: run ci/setup/chromium.sh "
                                "(apt-get install chromium) to render the reports in a browser")
WIDTH, HEIGHT = 1280, 2000


def screenshot(page: Path, png: Path, profile: Path) -> None:
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={WIDTH},{HEIGHT}",
               page.resolve().as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and png.is_file(), done.stderr[-2000:]


@functools.cache
def decode_png(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and unfiltered rows of an 8-bit RGB/RGBA PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, chunks, header = 8, [], b""
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        body = data[position + 8:position + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks.append(body)
        position += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6)
    pixel = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(chunks))
    stride = width * pixel
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - pixel] if x >= pixel else 0
            up = previous[x]
            corner = previous[x - pixel] if x >= pixel else 0
            if kind == 1:
                line[x] = (line[x] + left) & 255
            elif kind == 2:
                line[x] = (line[x] + up) & 255
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(bytes(line))
        previous = line
    return width, height, rows


def ink(rows: list[bytes], top: int, bottom: int) -> float:
    """Share of sampled pixels in rows [top, bottom) that are not white: is anything drawn there?"""
    drawn = total = 0
    for row in rows[top:bottom:8]:
        for x in range(0, len(row) - 3, 4 * 7):
            total += 1
            drawn += min(row[x:x + 3]) < 200
    return drawn / total if total else 0.0


@pytest.fixture(scope="module")
def rendered(class_results: dict[str, Result], class_store: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("browser")
    assert main(["report", "dashboard", "--store", str(class_store), "--assignment", "flash-attention-cpu",
                 "--out", str(out / "dashboard")]) == 0
    pages = {"dashboard": out / "dashboard" / "index.html"}
    for student in ("ada", "chen", "emil", "dana"):
        pages[student] = out / f"{student}.html"
        html.write(class_results[student], pages[student])
    shots = {}
    for name, page in pages.items():
        shots[name] = out / f"{name}.png"
        screenshot(page, shots[name], out / f"profile-{name}")
    return shots


@pytest.mark.parametrize("name", ["dashboard", "ada", "chen", "emil", "dana"])
def test_the_browser_draws_the_report(rendered: dict, name: str) -> None:
    width, height, rows = decode_png(rendered[name])
    assert (width, height) == (WIDTH, HEIGHT)
    assert ink(rows, 0, 300) > 0.02, "nothing drawn at the top of the page"
    assert ink(rows, 0, HEIGHT) < 0.6, "the page is mostly dark: styles did not apply"


def test_the_dashboard_charts_are_drawn(rendered: dict) -> None:
    _, _, rows = decode_png(rendered["dashboard"])
    blue = sum(1 for row in rows[200:560] for x in range(0, len(row) - 3, 4)
               if row[x] < 40 and 90 < row[x + 1] < 130 and row[x + 2] > 190)  # the histogram's #0969da bars
    assert blue > 2000
