"""A generated section of a Markdown page between two marker lines: replaced in place, or appended; read back.

The extender and gang reports each keep their section of docs/conformance.md this way, under their own markers.
"""

from __future__ import annotations

from pathlib import Path


def put_section(text: str, path: Path, start_marker: str, end_marker: str) -> None:
    """Replace the page's section (markers included) with ``text``, or append it."""
    page = path.read_text() if path.is_file() else ""
    start, end = page.find(start_marker), page.find(end_marker)
    if start >= 0 and end > start:
        page = page[:start] + text + page[end + len(end_marker) :]
    else:
        page = page.rstrip("\n") + "\n\n" + text + "\n"
    path.write_text(page)


def current_section(path: Path, start_marker: str, end_marker: str) -> str | None:
    """The section as the page has it now (markers included), or None."""
    if not path.is_file():
        return None
    page = path.read_text()
    start, end = page.find(start_marker), page.find(end_marker)
    return page[start : end + len(end_marker)] if start >= 0 and end > start else None
