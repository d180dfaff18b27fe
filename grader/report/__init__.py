"""Renderings of a `Result`: each module reads the result model and nothing else (tests/test_report_boundary.py)."""
