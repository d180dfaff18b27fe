"""A study's claims against measurement (issue 44, item 3): the figures a student's results.csv states, beside
what the runner measures of the same code (`grader time`'s protocol), a claim far off flagged. On the CPU pack
flash-attention-cpu, timed for real: the memory claims are the course's own arithmetic (Algorithm 0 holds the
N x N scores, 4 MiB at N = 1024), the time claims are set from this run's measurement, near it and far from it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grader.assignment import Assignment, load_assignment
from grader.assignment.claims import load_claims
from grader.claims import read_claims
from grader.cli import main
from grader.errors import SpecError
from grader.options import Options
from grader.timing.run import time_submission
from grader.timing.spec import load_timing

PACK = "flash-attention-cpu"
N_X_N_MIB = 1024 * 1024 * 4 / 2**20  # Algorithm 0's scores at N = 1024, float32


@pytest.fixture(scope="module")
def flash() -> Assignment:
    return load_assignment(PACK)


@pytest.fixture(scope="module")
def sweep_1024(flash: Assignment, cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both kernels of the reference timed at N = 1024, as `grader time --sweep --json` writes it."""
    cases = {"standard_attention": ("sweep-1024",), "flash_attention": ("sweep-1024",)}
    timing = time_submission(flash.reference_dir, flash, Options(cache_dir=cache_dir, kernels=tuple(cases)),
                             load_timing(flash), sweep=True, cases=cases)
    path = tmp_path_factory.mktemp("timing") / "sweep.json"
    path.write_text(json.dumps({"student": timing.to_dict(), "sweep": True}))
    return path


def submission(flash: Assignment, folder: Path, results: str) -> Path:
    shutil.copytree(flash.reference_dir, folder)
    (folder / "results.csv").write_text(results)
    return folder


def test_a_claim_near_the_measurement_agrees_and_one_far_from_it_is_flagged(flash: Assignment, sweep_1024: Path,
                                                                            tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]
                                                                            ) -> None:
    measured = {k["kernel"]: k for k in json.loads(sweep_1024.read_text())["student"]["kernels"]}
    standard_ms = measured["standard_attention"]["summary"]["median_us"] / 1000
    flash_ms = measured["flash_attention"]["summary"]["median_us"] / 1000
    results = (f"figure,case,value\nstandard_ms,sweep-1024,{1.5 * standard_ms}\nflash_ms,sweep-1024,{flash_ms / 50}\n"
               f"standard_mib,sweep-1024,{N_X_N_MIB}\nflash_mib,sweep-1024,{N_X_N_MIB}\nstandard_ms,sweep-2048,100\n")
    folder = submission(flash, tmp_path / "student", results)
    out, page = tmp_path / "claims.json", tmp_path / "claims.html"

    assert main(["claims", str(folder), "-a", PACK, "--timing", str(sweep_1024), "--json", str(out),
                 "--html", str(page)]) == 0

    checks = {(c["figure"], c["case"]): c for c in json.loads(out.read_text())["checks"]}
    assert checks["standard_ms", "sweep-1024"]["status"] == "agrees"
    assert checks["standard_mib", "sweep-1024"]["status"] == "agrees"  # the N x N matrix, as the course says
    assert checks["flash_ms", "sweep-1024"]["status"] == "flagged"
    assert "your figure is 50.0x less, more than 2x off" in checks["flash_ms", "sweep-1024"]["words"]
    assert checks["flash_mib", "sweep-1024"]["status"] == "flagged"  # Algorithm 1 holds O(N d), not N x N
    assert checks["flash_mib", "sweep-1024"]["measured"] < N_X_N_MIB / 20
    assert checks["standard_ms", "sweep-2048"]["status"] == "not_measured"  # the sweep timed N = 1024 only
    assert "the runner did not time standard_attention at sweep-2048" in checks["standard_ms", "sweep-2048"]["words"]
    assert checks["flash_ms", "sweep-4096"]["status"] == "not_claimed"
    html = page.read_text()
    assert "<svg" in html and "claim, flagged" in html and "your figure is 50.0x less" in html
    assert "2 of 12 claims within 2x of the measurement, 2 flagged" in capsys.readouterr().out


def test_a_results_file_is_read_whole_and_every_bad_row_named_by_its_line(flash: Assignment, tmp_path: Path) -> None:
    part = flash.claims
    assert part is not None
    (tmp_path / "results.csv").write_text(
        "Figure, Case ,value\nflash_ms,sweep-1024,2.5\nbogus,sweep-1024,1\nflash_ms,sweep-9,1\nflash_ms,sweep-2048,"
        "fast\nflash_ms,sweep-4096,-3\n\nflash_ms,sweep-1024,7\nstandard_mib,sweep-1024,inf\n")
    file, why, claims, problems = read_claims(part, tmp_path)
    assert (file, why, claims) == ("results.csv", "", {("flash_ms", "sweep-1024"): 2.5})
    assert problems == [
        "results.csv line 3: no figure 'bogus'; the assignment asks for flash_mib, flash_ms, standard_mib, standard_ms",
        "results.csv line 4: flash_ms is stated at the cases sweep-1024, sweep-2048, sweep-4096; found 'sweep-9'",
        "results.csv line 5: flash_ms's value is a positive number (ms), found 'fast'",
        "results.csv line 6: flash_ms's value is a positive number (ms), found '-3'",
        "results.csv line 8: flash_ms at sweep-1024 is stated twice; the first is kept",
        "results.csv line 9: standard_mib's value is a positive number (MiB), found 'inf'"]
    (tmp_path / "results.csv").write_text("kernel,ms\nflash,3\n")
    assert read_claims(part, tmp_path)[1] == ("results.csv: the first line must name the columns figure, case, "
                                             "value, found ['kernel', 'ms']")
    (tmp_path / "results.csv").unlink()
    (tmp_path / "results.csv").symlink_to("/etc/passwd")
    assert "is a symbolic link: the results file must be a file of the repository itself" in read_claims(
        part, tmp_path)[1]
    (tmp_path / "results.csv").unlink()
    assert read_claims(part, tmp_path)[:3] == (None, "no results file: the assignment asks for results.csv in the "
                                                     "repository, and this commit has none", {})


def test_a_sweet_spot_claimed_at_the_slow_case_is_flagged_timed_by_grader_claims_itself(
        flash: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    folder = tmp_path / "packs" / PACK
    shutil.copytree(flash.root, folder)
    toml = folder / "assignment.toml"
    spots = "".join(f"""[[assignment.claims.figure]]
name = "{name}"
kind = "fastest"
kernel = "standard_attention"
cases = ["sweep-128", "sweep-512"]
""" for name in ("slow_spot", "fast_spot"))
    toml.write_text(toml.read_text().replace("[[assignment.claims.figure]]", spots + "[[assignment.claims.figure]]", 1))
    pack = load_assignment(folder)
    student = submission(pack, tmp_path / "student", "figure,case,value\nslow_spot,,sweep-512\nfast_spot,,sweep-128\n")
    out = tmp_path / "claims.json"
    assert main(["claims", str(student), "-a", str(folder), "--json", str(out), "--cache-dir", str(cache_dir)]) == 0
    checks = {c["figure"]: c for c in json.loads(out.read_text())["checks"]}
    slow, fast = checks["slow_spot"], checks["fast_spot"]
    assert (slow["status"], slow["measured"]) == ("flagged", "sweep-128"), slow["words"]
    assert "the runner measured sweep-128 fastest" in slow["words"] and "x slower" in slow["words"]
    assert (fast["status"], fast["measured"]) == ("agrees", "sweep-128"), fast["words"]
    # Only the claimed cases were timed: no figure the student did not state has a measurement.
    unstated = [c for c in json.loads(out.read_text())["checks"] if c["figure"] not in ("slow_spot", "fast_spot")]
    assert unstated and all(c["status"] == "not_claimed" and c["measured"] is None for c in unstated)
    empty = submission(pack, tmp_path / "nothing", "figure,case,value\n")
    assert main(["claims", str(empty), "-a", str(folder), "--json", str(out), "--cache-dir", str(cache_dir)]) == 0
    assert {c["status"] for c in json.loads(out.read_text())["checks"]} == {"not_claimed"}


def test_the_spec_names_each_mistake_of_a_claims_table(flash: Assignment) -> None:
    where = "a.toml [assignment.claims]"
    figure = {"name": "t", "kind": "time", "kernel": "flash_attention", "cases": ["sweep-1024"]}
    cases = [({"file": ["r.csv"], "figure": [figure], "tolerance": 2}, "unknown key(s) ['tolerance']"),
             ({"file": ["../r.csv"], "figure": [figure]}, "a path inside the repository"),
             ({"file": ["r.csv"], "figure": []}, "one or more tables"),
             ({"file": ["r.csv"], "figure": [{**figure, "kernel": "nope"}]}, "key 'kernel' must be one of"),
             ({"file": ["r.csv"], "figure": [{**figure, "cases": ["n-3"]}]}, "key 'cases': cases of kernel"),
             ({"file": ["r.csv"], "figure": [{**figure, "kind": "fastest"}]}, "two or more cases"),
             ({"file": ["r.csv"], "figure": [{**figure, "baseline": "standard_attention"}]}, "belongs to a 'speedup'"),
             ({"file": ["r.csv"], "figure": [{**figure, "kind": "speedup"}]}, "belongs to a 'speedup'"),
             ({"file": ["r.csv"], "figure": [figure, figure]}, "figure names repeat"),
             ({"file": ["r.csv"], "figure": [figure], "off_by": 0.5}, "'off_by' must be >= 1")]
    for table, words in cases:
        with pytest.raises(SpecError, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                           .replace("]", r"\]").replace(".", r"\.")):
            load_claims(table, where, flash.kernels)


def test_every_assignment_with_claims_tells_its_students_the_file_and_each_figure() -> None:
    from grader.assignment import ASSIGNMENTS_DIR

    declaring = [a for p in sorted(ASSIGNMENTS_DIR.glob("*/assignment.toml"))
                 if (a := load_assignment(p.parent.name)).claims is not None]
    assert {a.name for a in declaring} >= {"tiled-matmul", "flash-attention-cpu", "nanogpt-kvcache",
                                           "sparse-spmv-spgemm", "sparse-spmv-spgemm-cupy"}
    for assignment in declaring:
        readme = assignment.tree_file("template", "README.md").read_text()
        assert assignment.claims is not None and assignment.claims.file[0] in readme, assignment.name
        assert f"grader claims . -a {assignment.name} " in readme, assignment.name
        for figure in assignment.claims.figures:
            assert f"`{figure.name}`" in readme and all(f"`{c}`" in readme for c in figure.cases), figure.name


@pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
                    reason="no chromium on PATH: run ci/setup/chromium.sh to render the pages in a browser")
def test_the_browser_draws_the_claims_page(flash: Assignment, sweep_1024: Path, tmp_path: Path) -> None:
    """The claims page in headless Chromium: its figure drawn, the flagged claims' red marks on it."""
    from test_report_browser import HEIGHT, decode_png, ink, screenshot

    folder = submission(flash, tmp_path / "student", f"figure,case,value\nstandard_mib,sweep-1024,{N_X_N_MIB}\n"
                                                     f"flash_mib,sweep-1024,{N_X_N_MIB}\nflash_ms,sweep-1024,1e-6\n")
    page, png = tmp_path / "claims.html", tmp_path / "claims.png"
    assert main(["claims", str(folder), "-a", PACK, "--timing", str(sweep_1024), "--html", str(page)]) == 0
    screenshot(page, png, tmp_path / "profile")
    _, _, rows = decode_png(png)
    assert ink(rows, 0, 300) > 0.02 and ink(rows, 0, HEIGHT) < 0.6
    red = sum(1 for row in rows for x in range(0, len(row) - 3, 4)
              if row[x] > 190 and 20 < row[x + 1] < 60 and 20 < row[x + 2] < 60)  # the flagged claims' #d62728
    assert red > 100
