"""A small graded class for the report and export tests: the docs' examples, graded for real.

docs/make_examples.py grades the bundled flash-attention-cpu samples (reference, template, mutants,
a crash, a compile error) as students of one class; these fixtures reuse it, so the examples in
docs/ and the tests come from the same code.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from grader.results import Result
from grader.assignment import PROJECT_ROOT
from grader.store import Store


def _make_examples():
    spec = importlib.util.spec_from_file_location("make_examples", PROJECT_ROOT / "docs" / "make_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


make_examples = _make_examples()


@pytest.fixture(scope="session")
def class_results(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> dict[str, Result]:
    """Each student's latest result, by student id (see make_examples.CLASS)."""
    results = make_examples.grade_class(tmp_path_factory.mktemp("class"), cache_dir)
    return {r.student: r for r in results}


@pytest.fixture(scope="session")
def class_store(class_results: dict[str, Result], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("store") / "class.sqlite"
    store = Store(path)
    for result in class_results.values():
        store.save(result)
    store.close()
    return path
