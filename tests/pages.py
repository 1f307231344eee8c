"""Reading the report's pages as a reader would: the figures of their ``table.grid`` tables,
and the page as headless Chromium loads it."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest


class Grids(HTMLParser):
    """The ``table.grid`` tables of a page:
    (section, curve) -> {(batch, devices): (status, text)}."""

    def __init__(self):
        super().__init__()
        self.grids, self.curve, self.counts, self.batch, self.cell = {}, None, [], None, None
        self.header, self.column = None, 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and "grid" in (attrs.get("class") or "").split():
            self.curve, self.counts = (attrs["data-section"], attrs["data-curve"]), []
            self.grids[self.curve] = {}
        elif self.curve and tag == "th":
            self.header = ""
        elif self.curve and tag == "td":
            self.cell = [attrs["data-status"], ""]
        elif self.cell is not None:
            self.cell[1] += " "

    def handle_data(self, data):
        if self.header is not None:
            self.header += data
        elif self.cell is not None:
            self.cell[1] += data

    def handle_endtag(self, tag):
        if tag == "table":
            self.curve = None
        elif tag == "th" and self.header is not None:
            text, self.header = self.header.strip(), None
            if text.endswith(("device", "devices")):
                self.counts.append(int(text.split()[0]))
            elif text.isdigit():
                self.batch, self.column = int(text), 0
        elif tag == "td" and self.cell is not None:
            point = (self.batch, self.counts[self.column])
            self.grids[self.curve][point] = (self.cell[0], " ".join(self.cell[1].split()))
            self.cell, self.column = None, self.column + 1


def grids_of(page: str) -> dict:
    parser = Grids()
    parser.feed(page)
    return parser.grids


def chromium() -> str:
    return shutil.which("chromium") or shutil.which("chromium-browser") or ""


browser = pytest.mark.skipif(not chromium(), reason="headless Chromium is not installed "
                                                    "(Debian package chromium; make test "
                                                    "installs it where apt-get works)")


def headless(url: str, *args, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
         "--v=0", f"--user-data-dir={tmp_path / 'profile'}", *args, url],
        capture_output=True, text=True, timeout=120,
    )


def console_messages(stderr: str) -> list:
    return re.findall(r":CONSOLE[^\]]*\] (.*)", stderr)
