"""matplotlib's figures as SVG text for the HTML pages to inline (the report's curves, the sweep pages); a page
whose figure cannot be drawn (matplotlib not installed) says so and keeps its tables."""

from __future__ import annotations

import io
from typing import Any


def pyplot_or_none() -> Any:
    """matplotlib's pyplot, drawing without a display (figures are written, not shown); None where matplotlib is
    not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return None
    return pyplot


def svg_text(figure: Any, pyplot: Any) -> str:
    """A figure as SVG text to inline in HTML (no XML declaration or doctype), the figure closed."""
    try:
        figure.tight_layout()
        svg = io.StringIO()
        figure.savefig(svg, format="svg")
        text = svg.getvalue()
    finally:
        pyplot.close(figure)
    return text[text.index("<svg"):]
