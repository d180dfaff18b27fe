"""The python target on its CPU pack (array-kernels-python): real builds in the build sandbox, real harnesses in the
local sandbox, real verdicts; and its two halves' rules on their own (the build step's scan, the import guard)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.options import Options
from grader.pipeline import grade
from grader.report.hints import forbidden_notes
from grader.samples import Sample, compose
from grader.assignment import Assignment, load_assignment
from grader.targets import python_build, target_named, target_of, target_with
from grader.targets.python import module_name, named_imports

from conftest import variant_params, with_time_limit
from pack_samples import Graded, assert_expected_verdicts, graded_once, kernel_of, sample_named

PACK = "array-kernels-python"


@pytest.fixture(scope="module")
def pack() -> Assignment:
    return with_time_limit(load_assignment(PACK), 1.0)


@pytest.fixture(scope="module")
def graded(pack: Assignment, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Graded:
    return graded_once(pack, tmp_path_factory, cache_dir)


def test_reference_scores_full_marks_and_names_the_interpreter(graded: Graded, pack: Assignment) -> None:
    result = graded(None)
    assert result.score == result.max_score == 3
    assert all(c.max_abs_err is not None and c.max_abs_err < 1e-6 for k in result.kernels for c in k.cases)
    assert result.environment.compiler.startswith("Python ")


def test_template_builds_and_scores_zero_as_never_written(pack: Assignment, cache_dir: Path) -> None:
    result = grade(pack.template_dir, pack, Options(cache_dir=cache_dir, public_only=True))
    assert result.score == 0
    for kernel in result.kernels:
        assert kernel.status == "failed" and all("never written" in c.message for c in kernel.cases), kernel.message


@pytest.mark.parametrize("sample", variant_params(PACK))
def test_each_sample_gets_its_expected_status(sample: Sample, graded: Graded) -> None:
    assert_expected_verdicts(graded(sample), sample)


def test_a_syntax_error_is_a_compile_error_with_file_line_and_column(graded: Graded, pack: Assignment) -> None:
    kernel = kernel_of(graded(sample_named(pack, "hostile-axpy-syntax-error")), "axpy")
    assert kernel.message.startswith("kernels/axpy.py:3:18: error: SyntaxError: '(' was never closed")
    assert kernel.cases == [] or all(c.status == "not_run" for c in kernel.cases)


def test_an_exception_shows_only_the_students_frames(graded: Graded, pack: Assignment) -> None:
    kernel = kernel_of(graded(sample_named(pack, "hostile-axpy-index-error")), "axpy")
    # Every case crashes on its own (a fresh harness each), at its last element.
    assert [c.status for c in kernel.cases] == ["crashed"] * 3
    first = kernel.cases[0].message
    assert first.startswith("raised IndexError: index 1 is out of bounds for axis 0 with size 1\n"), first
    assert 'File "kernels/axpy.py", line 6, in axpy' in first and 'File "kernels/elementwise.py", line 2, in fused' in first
    assert "return a * x[i] + y[i + 1]" in first
    assert "grader" not in first and "lib.so" not in first  # neither the harness's frames nor the archive's path


def test_a_forbidden_import_that_runs_is_named_with_file_and_line_and_costs_the_penalty(graded: Graded,
                                                                                        pack: Assignment) -> None:
    kernel = kernel_of(graded(sample_named(pack, "hostile-axpy-scipy-blas")), "axpy")
    assert kernel.forbidden_symbols == ["scipy.linalg.blas (at kernels/axpy.py:1)"]
    assert kernel.score == 0 and kernel.status == "forbidden"
    # Let through and recorded: the outputs are judged (SciPy's saxpy is right), the penalty takes the points.
    assert kernel.message == ("imports scipy.linalg.blas (at kernels/axpy.py:1, during axpy's call), which this "
                              "assignment forbids (its outputs were correct)"), kernel.message
    # The module-level import runs once per harness, in its first case; the later cases find SciPy loaded.
    assert [u.line for u in kernel.cases[0].forbidden_used] == [1]


def test_an_import_through_importlib_with_a_computed_name_is_recorded_where_it_runs(graded: Graded,
                                                                                 pack: Assignment) -> None:
    kernel = kernel_of(graded(sample_named(pack, "hostile-matvec-importlib-scipy")), "matvec")
    # No parse sees "sci" + "py": nothing is named, and the run records it.
    assert kernel.forbidden_named == [] and kernel.status == "forbidden" and kernel.score == 0
    # importlib loads the packages first: the first name its line imports is "scipy".
    assert kernel.forbidden_symbols == ["scipy (at kernels/matvec.py:5)"], kernel.message
    assert "imports scipy (at kernels/matvec.py:5, during matvec's call)" in kernel.message


def test_a_lazy_import_in_a_function_the_grading_never_calls_costs_nothing(pack: Assignment, tmp_path: Path,
                                                                           cache_dir: Path) -> None:
    """nanoGPT's model.py imports transformers inside `from_pretrained`, which generation never calls."""
    submission = compose(pack, None, tmp_path / "submission")
    axpy = submission / "kernels" / "axpy.py"
    axpy.write_text(axpy.read_text() + "\n\ndef from_pretrained(name):\n    from scipy.linalg import blas\n"
                    "    return blas.saxpy\n")
    line = axpy.read_text().splitlines().index("    from scipy.linalg import blas") + 1
    result = grade(submission, pack, Options(cache_dir=cache_dir, public_only=True, kernels=("axpy",)))
    kernel = kernel_of(result, "axpy")
    assert kernel.status == "passed" and kernel.score == kernel.max_score, kernel.message
    assert kernel.forbidden_symbols == [] and all(c.forbidden_used == [] for c in kernel.cases)
    assert [(u.name, u.file, u.line) for u in kernel.forbidden_named] == [("scipy.linalg", "kernels/axpy.py", line)]
    assert forbidden_notes(kernel) == [f"kernels/axpy.py:{line} imports scipy.linalg, which this assignment "
                                       "forbids; it never ran during grading, so it costs nothing"]


@pytest.mark.parametrize("name, words, signal", [
    ("hostile-axpy-os-exit", "the process exited with status 0 during this case", None),
    ("hostile-matvec-ctypes-segfault", "the process was killed by signal SIGSEGV during this case", "SIGSEGV"),
])
def test_a_crash_costs_only_its_case_in_the_c_kernels_words(name: str, words: str, signal: str | None, graded: Graded,
                                                           pack: Assignment) -> None:
    sample = sample_named(pack, name)
    kernel = kernel_of(graded(sample), sample.kernel)
    assert [c.status for c in kernel.cases] == ["crashed"] * 3
    assert all(c.message.startswith(words) and c.signal == signal for c in kernel.cases), kernel.message


def test_an_infinite_loop_times_out_at_the_call_limit(graded: Graded, pack: Assignment) -> None:
    kernel = kernel_of(graded(sample_named(pack, "hostile-matvec-infinite-loop")), "matvec")
    assert kernel.status == "timeout" and "case 'one-by-one': did not finish within 1 s" in kernel.message


def test_a_returned_result_is_never_written_and_the_log_says_why(graded: Graded, pack: Assignment) -> None:
    kernel = kernel_of(graded(sample_named(pack, "mutant-axpy-returns-result")), "axpy")
    assert all("never written" in c.message for c in kernel.cases)
    assert "axpy returned a ndarray, which is ignored: outputs are written in place" in kernel.log


def build_check(tmp_path: Path, files: dict[str, str], entry: str) -> tuple[list[str], list[list[object]]]:
    """The build step's scan on a folder holding `files`, from the module `entry`."""
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    errors, imports, _ = python_build.check({"file": entry, "function": "f"}, set(files), str(tmp_path))
    return errors, imports


def test_the_build_checks_the_modules_the_kernel_imports_and_no_other(tmp_path: Path) -> None:
    errors, imports = build_check(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/k.py": "from . import helper\nimport importlib\ndef f():\n    importlib.import_module('numba')\n",
        "pkg/helper.py": "from .deep.inner import g\n",
        "pkg/deep/__init__.py": "",
        "pkg/deep/inner.py": "def g(:\n",
        "pkg/scratch.py": "this is not python\n",  # never imported: costs nothing
    }, "pkg/k.py")
    assert errors == ["pkg/deep/inner.py:1:7: error: SyntaxError: invalid syntax\n    def g(:\n          ^"], errors
    assert ["numba", "pkg/k.py", 4] in imports and ["pkg.helper", "pkg/k.py", 1] in imports


def test_a_statement_outside_its_place_is_a_compile_error_the_parser_alone_misses(tmp_path: Path) -> None:
    errors, _ = build_check(tmp_path, {"k.py": "x = 1\nreturn x\n"}, "k.py")
    assert len(errors) == 1 and errors[0].startswith("k.py:2:1: error: SyntaxError: 'return' outside function")


def test_forbidden_patterns_match_a_module_and_its_packages_once_per_line() -> None:
    imports = [("scipy.linalg", "k.py", 1), ("scipy.linalg.blas", "k.py", 1), ("numpy", "k.py", 2),
               ("scipyx", "k.py", 3), ("torch.nn", "h.py", 9)]
    assert named_imports(imports, ("scipy", "torch*")) == [("torch.nn", "h.py", 9), ("scipy.linalg", "k.py", 1)]
    assert module_name("kernels/axpy.py") == "kernels.axpy" and module_name("pkg/__init__.py") == "pkg"


def test_the_import_guard_records_what_runs_with_the_submissions_line_and_nothing_else(tmp_path: Path) -> None:
    # A fresh interpreter: an audit hook cannot be removed from the process that installs it. Stdlib modules stand
    # in for the forbidden libraries; `fractions` is loaded before the guard (the harness's own import).
    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("pkg/__init__.py", "")
        zipped.writestr("pkg/k.py", "import importlib\n"
                                    "def statement():\n    import fractions\n"
                                    "def dunder():\n    __import__('fractions')\n"
                                    "def computed():\n    importlib.import_module('deci' + 'mal')\n"
                                    "def allowed():\n    import numbers\n"
                                    "def from_pretrained():\n    import fractions\n"
                                    "def method():\n    return 'ab'.upper()\n"
                                    "class Own:\n    def upper(self):\n        return 1\n"
                                    "def own_method():\n    return Own().upper()\n"
                                    "def missing():\n    try:\n        import kg_not_installed\n"
                                    "    except ImportError:\n        pass\n")
    code = """
import fractions, json, sys
from grader.boundary.python_device import ImportGuard
guard = ImportGuard()
guard.forbid(["fractions", "decimal", "kg_not_*"], ["upper"], sys.argv[1])
sys.path.insert(0, sys.argv[1])
import pkg.k
seen = {}
for how in ["statement", "dunder", "computed", "allowed", "method", "own_method", "missing"]:
    with guard.watching() as found:
        getattr(pkg.k, how)()
    seen[how] = [[u.name, u.file, u.line] for u in found]
    sys.modules.pop("fractions", None)  # each first import anew
    sys.modules.pop("decimal", None)
print(json.dumps(seen))
"""
    ran = subprocess.run([sys.executable, "-c", code, str(archive)], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parent.parent)
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout)
    assert seen["statement"] == [["fractions", "pkg/k.py", 3]] and seen["dunder"] == [["fractions", "pkg/k.py", 5]]
    assert seen["computed"] == [["decimal", "pkg/k.py", 7]]
    assert seen["allowed"] == [] and seen["own_method"] == []  # the submission's own upper() is its code
    assert seen["method"] == [[".upper", "pkg/k.py", 13]]
    assert seen["missing"] == []  # an import that failed loaded nothing


def test_a_pack_adds_the_packages_its_harnesses_see(pack: Assignment) -> None:
    widened = target_of(dataclasses.replace(pack, python_packages=("scipy", "numpy")))
    assert widened.python_packages == ("numpy", "scipy")
    assert target_named("python").python_packages == ("numpy",) and target_of(pack) is target_named("python")


def test_a_package_the_pack_names_but_this_machine_lacks_is_said_before_any_case_runs() -> None:
    assert target_with("python", ("numpy",)).unavailable_reason() is None
    reason = target_with("python", ("kg_no_such_package",)).unavailable_reason()
    assert reason == "this machine has no kg_no_such_package installed: pip install kg_no_such_package", reason


def test_a_folder_of_modules_without_init_imports_from_the_archive_as_from_disk(tmp_path: Path) -> None:
    """On disk kernels/ is a namespace package; zipimport knows none, so the build adds the missing __init__.py."""
    files = {"grading/__init__.py", "grading/adapter.py", "kernels/scipy_sparse.py", "a/b/c.py", "top.py"}
    assert python_build.package_inits(files) == ["a/__init__.py", "a/b/__init__.py", "kernels/__init__.py"]
    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("a/b/c.py", "X = 3\n")
        for init in python_build.package_inits({"a/b/c.py"}):
            zipped.writestr(init, "")
    imported = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                               "import a.b.c; print(a.b.c.X)", str(archive)], capture_output=True, text=True)
    assert imported.stdout.strip() == "3", imported.stderr


def test_a_harness_run_as_a_uid_of_its_own_still_has_a_user_name(pack: Assignment, tmp_path: Path,
                                                                  cache_dir: Path) -> None:
    """The sandbox's uid has no passwd entry; getpass.getuser() (torch asks it for its compile caches on CUDA) reads
    USER first. Without it, torch stayed half imported and every case lost its device memory figure."""
    submission = compose(pack, None, tmp_path / "submission")
    axpy = submission / "kernels" / "axpy.py"
    axpy.write_text(axpy.read_text().replace('    out[:] = np.float32(a) * x + y',
                                             '    import getpass\n    getpass.getuser()\n'
                                             '    out[:] = np.float32(a) * x + y'))
    result = grade(submission, pack, Options(cache_dir=cache_dir, kernels=("axpy",)))
    kernel = kernel_of(result, "axpy")
    assert kernel.status == "passed", kernel.message + kernel.log
    assert "runs as uid" in " ".join(result.environment.sandbox_enforced)  # the uid of its own, where this passed
