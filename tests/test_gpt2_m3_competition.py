"""The competition (gpt2-m3's [competition]): its run set read and validated, the gate and the geometric mean on
synthetic runs, Gradescope's leaderboard entries, the dashboard's ranked table, and the whole competition on the
CPU (the tiny GPT-2 pack of tests/forward_pack.py: its serial C++ kernels gated in with a speed, a mutant gated out
with the words, the competition folder laid over kernels/)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from grader.boundary.protocol import Sealed, seal_of
from grader.checks.forward.spec import Forward
from grader.cli import main
from grader.competition.judge import gate, judge_run
from grader.competition.results import CompetitionResult, RunResult, read_competition
from grader.competition.run import compete, draw_prompts
from grader.competition.spec import Run, load_competition, parse_competition
from grader.errors import SpecError
from grader.options import Options
from grader.pipeline import not_graded
from grader.report import dashboard, gradescope
from grader.results import Submission, SubmissionStatus
from grader.runner import CallOutcome
from grader.assignment import load_assignment
from grader.status import CallStatus, TimingStatus

from forward_pack import make_forward_pack, mutant, submission

SMALL = Forward(weight=0.0, B=1, T=8, C=8, NH=2, L=1, V=10, Vp=16, maxT=32, tie_margin=0.05)
RUNS = [{"name": "b1", "B": 1, "prompt": 4, "generate": 3}, {"name": "b2", "B": 2, "prompt": 2, "generate": 2}]


# ---------------------------------------------------------------- the spec


def test_gpt2_m3_documents_its_run_set_at_gpt2_124m_shapes() -> None:
    competition = load_competition(load_assignment("gpt2-m3"))
    assert [(r.name, r.B, r.prompt, r.generate) for r in competition.runs] == [
        ("b1-p16-g16", 1, 16, 16), ("b1-p16-g64", 1, 16, 64), ("b4-p16-g32", 4, 16, 32)]
    f = competition.forward  # the [forward] check's, inherited from gpt2-m1: GPT-2 124M, its weights' seed
    assert (f.C, f.NH, f.L, f.V, f.Vp, f.maxT) == (768, 12, 12, 50257, 50304, 1024)
    assert (f.logits_max_abs, f.logits_rmse) == (0.1, 4e-3)
    assert competition.folder == "kernels_competition"
    assert competition.rule.min_calls <= competition.rule.max_calls and competition.warmup >= 1
    shaped = competition.forward_of(competition.runs[2])
    assert (shaped.B, shaped.T, shaped.prompt_length, shaped.generate) == (4, 48, 16, 32)
    assert shaped.seed == f.seed and shaped.init_std == f.init_std  # the same weights at every run's shape


def test_gpt2_m3s_readme_and_template_say_the_competition_rule() -> None:
    from grader.assignment import PROJECT_ROOT

    readme = (PROJECT_ROOT / "README.md").read_text()
    assert "kernels_competition/" in readme and "--competition" in readme
    template = load_assignment("gpt2-m3").template_dir
    assert "every file of this folder replaces the file of the same name in kernels/" in \
        (template / "kernels_competition" / "README.md").read_text()


def test_an_assignment_without_a_competition_says_so() -> None:
    with pytest.raises(SpecError, match=r"gpt2-m1 has no \[competition\] table .*: it holds no competition"):
        load_competition(load_assignment("gpt2-m1"))


@pytest.mark.parametrize("table, words", [
    ({"runs": RUNS, "speed": 1}, "unknown key(s) ['speed']"),
    ({"runs": []}, "key 'runs' must list at least one run"),
    ({"runs": [{"name": "x", "B": 1, "prompt": 4}]},
     "runs[0]: expected a table with exactly name, B, prompt, generate"),
    ({"runs": [{"name": "x", "B": 1, "prompt": 30, "generate": 3}]}, "prompt + generate (33) must not exceed"),
    ({"runs": [{"name": "x", "B": 0, "prompt": 3, "generate": 3}]}, "B, prompt and generate must be at least 1"),
    ({"runs": [RUNS[0], RUNS[0]]}, "run names repeat"),
    ({"runs": RUNS, "folder": "kernels"}, "key 'folder' must be a folder of the submission beside kernels/"),
    ({"runs": RUNS, "min_repeats": 5, "max_repeats": 2}, "1 <= min_repeats <= max_repeats"),
    ({"runs": RUNS, "rse": 0}, "rse, cap_s and time_limit_s must be above 0"),
])
def test_a_bad_competition_table_is_named_with_its_key(table: dict, words: str) -> None:
    with pytest.raises(SpecError) as raised:
        parse_competition(table, "a.toml [competition]", SMALL)
    assert str(raised.value).startswith("a.toml [competition]") and words in str(raised.value)


def test_prompts_are_deterministic_and_leave_the_generated_columns_empty() -> None:
    run = Run("b2", 2, 3, 4)
    first, again = draw_prompts(SMALL, run, 1), draw_prompts(SMALL, run, 1)
    assert first.shape == (2, 7) and np.array_equal(first, again)
    assert not first[:, 3:].any() and (first[:, :3] < SMALL.V).all()
    assert not np.array_equal(first, draw_prompts(SMALL, run, 2))  # each run its own prompts


# ---------------------------------------------------------------- the gate and the geometric mean


def timed_run(run: Run, samples: tuple[float, ...] = (0.5, 0.4, 0.6)) -> RunResult:
    return RunResult(run.name, run.B, run.prompt, run.generate, TimingStatus.TIMED, samples_s=samples,
                     median_s=float(np.median(samples)))


def synthetic(generate: int = 3, B: int = 2, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gold logits (generate, B, V) with clear winners, the float32 logits a correct submission saves, its tokens."""
    gold = np.random.default_rng(seed).normal(size=(generate, B, SMALL.V))
    logits = np.zeros((generate, B, SMALL.Vp), np.float32)
    logits[..., :SMALL.V] = gold
    return gold, logits, np.argmax(gold, axis=-1).T.astype(np.int32)  # tokens (B, generate)


def test_a_correct_run_is_gated_in_with_its_figures() -> None:
    gold, logits, tokens = synthetic()
    judged = gate(timed_run(Run("r", 2, 2, 3)), SMALL, logits, tokens, gold)
    assert judged.status is TimingStatus.TIMED and judged.message.startswith("gated in: ")
    assert judged.max_abs_err is not None and judged.max_abs_err < 1e-6
    assert judged.tokens_per_s == pytest.approx(2 * 3 / 0.5)


def test_a_step_whose_logits_drift_is_gated_out_naming_the_step() -> None:
    gold, logits, tokens = synthetic()
    logits[1, 1, 7] += 0.2  # past the largest error allowed (0.1), the second generated token's
    judged = gate(timed_run(Run("r", 2, 2, 3)), SMALL, logits, tokens, gold)
    assert judged.status is TimingStatus.WRONG and judged.tokens_per_s is None
    assert judged.message.startswith("gated out: the logits of generated token 2 of 3: largest error 0.2 (row 1, "
                                     "vocabulary entry 7; the limit is 0.1)")


def test_small_errors_everywhere_fail_by_their_rmse() -> None:
    gold, logits, tokens = synthetic()
    logits[..., :SMALL.V] += 0.01  # every logit 0.01 off: under 0.1, but the RMSE is 0.01 > 4e-3
    judged = gate(timed_run(Run("r", 2, 2, 3)), SMALL, logits, tokens, gold)
    assert judged.status is TimingStatus.WRONG and "RMSE 0.01 (the limit is 0.004)" in judged.message


def test_a_nan_logit_is_gated_out_and_counted() -> None:
    gold, logits, tokens = synthetic()
    logits[2, 0, 3] = np.nan
    judged = gate(timed_run(Run("r", 2, 2, 3)), SMALL, logits, tokens, gold)
    assert judged.status is TimingStatus.WRONG and "1 logits are NaN or Inf" in judged.message


def test_a_token_is_the_golds_greedy_choice_or_within_the_tie_margin() -> None:
    gold, logits, tokens = synthetic()
    row = gold[0, 1]
    second = int(np.argsort(row)[-2])
    wrong = tokens.copy()
    wrong[1, 0] = second  # a token the gold ranks second: gated out unless the top two are within the tie margin
    judged = gate(timed_run(Run("r", 2, 2, 3)), SMALL, logits, wrong, gold)
    gap = row.max() - row[second]
    assert gap > SMALL.tie_margin  # the draw's top two are clearly apart
    assert judged.status is TimingStatus.WRONG
    assert judged.message == (f"gated out: generated token 1 of 3 (row 1) is {second} where the gold's greedy choice "
                              f"is {int(np.argmax(row))}, whose logit is {gap:.3g} higher (the tie margin is 0.05)")
    tied = gold.copy()
    tied[0, 1, second] = row.max() - SMALL.tie_margin / 2  # a near tie: either token is the greedy choice
    logits[..., :SMALL.V] = tied
    assert gate(timed_run(Run("r", 2, 2, 3)), SMALL, logits, wrong, tied).status is TimingStatus.TIMED


def saved_outcome(folder: Path, arrays: dict[str, np.ndarray]) -> CallOutcome:
    """A finished competition call's outcome, its outputs saved and sealed as the harness seals them."""
    folder.mkdir(parents=True, exist_ok=True)
    seals = []
    for name, array in arrays.items():
        array = np.ascontiguousarray(array)
        np.save(folder / f"{name}.npy", array)
        seals.append(Sealed(name, seal_of(array.tobytes()), (), ()))
    return CallOutcome("competition", "r", CallStatus.OK, output_dir=folder, seals=tuple(seals))


def test_a_run_judged_from_its_sealed_outputs(tmp_path: Path) -> None:
    run = Run("r", 2, 2, 3)
    f = dataclasses.replace(SMALL, B=2, T=5, prompt=2, generate=3)
    gold, logits, tokens = synthetic()
    prompt = np.array([[1, 2, 0, 0, 0], [3, 4, 0, 0, 0]], np.int32)
    seen = []

    def gold_of(sequence: np.ndarray) -> np.ndarray:
        seen.append(sequence)
        return gold

    times = np.array([[0.2, 0.25], [0.1, 0.15], [0.3, 0.35]])
    outcome = saved_outcome(tmp_path / "ok", {"tokens": np.stack([tokens] * 3), "logits": logits, "times": times})
    judged = judge_run(run, f, outcome, prompt, gold_of)
    assert judged.status is TimingStatus.TIMED, judged.message
    assert judged.median_s == pytest.approx(0.2) and judged.wall_samples_s == (0.25, 0.15, 0.35)
    assert judged.tokens_per_s == pytest.approx(6 / 0.2)
    # The gold follows the sequence the submission generated: its prompt, then its own tokens.
    assert np.array_equal(seen[0], np.concatenate([prompt[:, :2], tokens], axis=1))
    # A repeat that generates other tokens keeps state between generations: gated out, whatever its logits.
    other = np.stack([tokens, tokens, (tokens + 1) % SMALL.V])
    outcome = saved_outcome(tmp_path / "drift", {"tokens": other, "logits": logits, "times": times})
    judged = judge_run(run, f, outcome, prompt, gold_of)
    assert judged.status is TimingStatus.WRONG and "timed generation 3 gave other tokens than the first" in \
        judged.message
    # An output changed after its seal is no output.
    outcome = saved_outcome(tmp_path / "tampered", {"tokens": np.stack([tokens] * 3), "logits": logits,
                                                   "times": times})
    np.save(tmp_path / "tampered" / "times.npy", times / 10)
    judged = judge_run(run, f, outcome, prompt, gold_of)
    assert judged.status is TimingStatus.CRASHED and "changed after the step returned" in judged.message


def test_a_run_that_crashed_or_timed_out_has_no_speed() -> None:
    run = Run("r", 1, 2, 3)
    crashed = judge_run(run, SMALL, CallOutcome("competition", "r", CallStatus.CRASHED, "the process was killed by "
                                                "signal SIGSEGV"), np.zeros((1, 5), np.int32), lambda s: None)
    assert crashed.status is TimingStatus.CRASHED and "SIGSEGV" in crashed.message and crashed.tokens_per_s is None
    late = judge_run(run, SMALL, CallOutcome("competition", "r", CallStatus.TIMEOUT, "took longer than 300 s"),
                     np.zeros((1, 5), np.int32), lambda s: None)
    assert late.status is TimingStatus.TIMEOUT


def entry(student: str, *speeds: float | None) -> CompetitionResult:
    """A competition result whose runs have these tokens/s (None: gated out)."""
    runs = []
    for index, speed in enumerate(speeds):
        run = Run(f"run{index}", 1, 4, 10)
        runs.append(timed_run(run, (10 / speed,)) if speed is not None else dataclasses.replace(
            timed_run(run), status=TimingStatus.WRONG, median_s=None,
            message="gated out: the logits of generated token 1 of 10: largest error 0.3"))
    return CompetitionResult(f"/subs/{student}", "gpt2-m3", student, "kernels/", tuple(runs), "NVIDIA H200")


def test_the_score_is_the_geometric_mean_of_every_runs_tokens_per_second() -> None:
    entered = entry("ada", 100.0, 400.0, 250.0)
    assert entered.entered and entered.geomean_tokens_per_s == pytest.approx((100 * 400 * 250) ** (1 / 3))
    assert entered.words.startswith(f"{entered.geomean_tokens_per_s:,.1f} tokens/s (geometric mean over 3 runs")
    out = entry("bo", 100.0, None, 250.0)  # one run gated out: no entry at all, not a mean of the others
    assert not out.entered and out.geomean_tokens_per_s is None
    assert out.words == ("not entered: run run1 (B=1, 10 tokens) gated out: the logits of generated token 1 of 10: "
                         "largest error 0.3")


def test_a_competition_result_survives_its_json(tmp_path: Path) -> None:
    result = entry("ada", 100.0, None)
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"competition": result.to_dict()}))
    assert read_competition(path) == result
    document = json.loads(path.read_text())["competition"]
    assert document["entered"] is False and document["tokens_per_s_geomean"] is None
    assert document["runs"][0]["tokens_per_s"] == pytest.approx(100.0)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(Exception, match="not a competition file written by `grader time --competition`"):
        read_competition(tmp_path / "bad.json")


# ---------------------------------------------------------------- Gradescope and the dashboard


def graded(tmp_path: Path, student: str = "ada", status: SubmissionStatus = SubmissionStatus.GRADED):
    return not_graded(load_assignment("flash-attention-cpu"), Options(cache_dir=tmp_path), status, "",
                      Submission(student))


def test_gradescope_leaderboard_leads_with_the_geometric_mean_then_each_run(tmp_path: Path) -> None:
    from grader.cli.export import competition_entry

    result = entry("ada", 100.0, 400.0)
    document = gradescope.results_json(graded(tmp_path), competition=competition_entry(result))
    assert document["leaderboard"] == [
        {"name": "GPT-2 generation tokens/s (geometric mean of 2 runs)", "value": 200.0, "order": "desc"},
        {"name": "tokens/s run0", "value": 100.0, "order": "desc"},
        {"name": "tokens/s run1", "value": 400.0, "order": "desc"}]
    assert "Competition: 200.0 tokens/s" in document["output"]
    jsonschema = pytest.importorskip("jsonschema", reason="validates results.json (pip install '.[test]')")
    schema = json.loads((Path(__file__).parent / "schemas" / "gradescope-results.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(document)


def test_a_gated_out_submission_has_no_leaderboard_entry_and_says_why(tmp_path: Path) -> None:
    from grader.cli.export import competition_entry

    document = gradescope.results_json(graded(tmp_path), competition=competition_entry(entry("bo", 100.0, None)))
    assert "leaderboard" not in document
    assert "Competition: not entered: run run1 (B=1, 10 tokens) gated out: the logits" in document["output"]


def test_export_gradescope_results_reads_the_competition_file(tmp_path: Path) -> None:
    graded(tmp_path).write(tmp_path / "result.json")
    (tmp_path / "c.json").write_text(json.dumps({"competition": entry("ada", 50.0, 200.0).to_dict()}))
    out = tmp_path / "results.json"
    assert main(["export", "gradescope-results", "--result", str(tmp_path / "result.json"), "--competition",
                 str(tmp_path / "c.json"), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["leaderboard"][0] == {
        "name": "GPT-2 generation tokens/s (geometric mean of 2 runs)", "value": 100.0, "order": "desc"}


class Rows(HTMLParser):
    """The rows of one table (by id) of a page, as lists of cell texts."""

    def __init__(self, table: str) -> None:
        super().__init__()
        self.table, self.inside, self.rows, self.cell = table, False, [], None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "table" and ("id", self.table) in attrs:
            self.inside = True
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.inside = False
        elif self.inside and tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(" ".join(self.cell.split()))
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell += data


def test_the_dashboard_ranks_the_competition_by_its_geometric_mean(tmp_path: Path) -> None:
    # In the store, with nothing graded (a report of their own is not what this test is about).
    results = [graded(tmp_path, name, SubmissionStatus.NOT_SUBMITTED) for name in ("ada", "bo", "cy")]
    competition = (entry("ada", 100.0, 100.0), entry("bo", 100.0, None), entry("cy", 300.0, 300.0),
                   entry("dee", 50.0, 800.0))  # dee: in the competition, not in the store
    dashboard.write(results, "gpt2-m3", tmp_path / "board", competition=competition)
    page = (tmp_path / "board" / "index.html").read_text()
    parser = Rows("competition")
    parser.feed(page)
    header, *rows = parser.rows
    assert header == ["rank", "student", "tokens/s (geometric mean)", "run0", "run1", "status", "kernels"]
    assert [(r[0], r[1], r[2]) for r in rows] == [("1", "cy", "300.0"), ("2", "dee", "200.0"), ("3", "ada", "100.0"),
                                                  ("–", "bo", "–")]
    assert rows[3][5].startswith("not entered not entered: run run1 (B=1, 10 tokens) gated out")
    assert "Competition (3 of 4 entered)" in page
    assert re.search(r'<a href="students/cy-history.html">cy</a>', page)  # a student in the store links to them
    assert "<td>dee</td>" in page  # one who is not, does not


def test_report_dashboard_reads_a_folder_of_competition_files_and_refuses_another_assignments(tmp_path: Path) -> None:
    from grader.store import Store

    result = graded(tmp_path, "ada", SubmissionStatus.NOT_SUBMITTED)
    result = dataclasses.replace(result, assignment="gpt2-m3", student="ada")
    store = Store(tmp_path / "class.sqlite")
    store.save(result)
    store.close()
    folder = tmp_path / "competitions"
    folder.mkdir()
    for student, speed in (("ada", 120.0), ("bo", 480.0)):
        (folder / f"{student}.json").write_text(json.dumps({"competition": entry(student, speed).to_dict()}))
    board = tmp_path / "board"
    command = ["report", "dashboard", "--store", str(tmp_path / "class.sqlite"), "-a", "gpt2-m3", "--out", str(board)]
    assert main([*command, "--competition", str(folder)]) == 0
    parser = Rows("competition")
    parser.feed((board / "index.html").read_text())
    assert [(r[0], r[1], r[2]) for r in parser.rows[1:]] == [("1", "bo", "480.0"), ("2", "ada", "120.0")]
    other = dataclasses.replace(entry("cy", 10.0), assignment="gpt2-m2")
    (folder / "cy.json").write_text(json.dumps({"competition": other.to_dict()}))
    assert main([*command, "--competition", str(folder)]) == 2


def test_a_dashboard_without_competition_files_has_no_competition_table(tmp_path: Path) -> None:
    dashboard.write([graded(tmp_path, "ada", SubmissionStatus.NOT_SUBMITTED)], "gpt2-m3", tmp_path / "board")
    assert 'id="competition"' not in (tmp_path / "board" / "index.html").read_text()


# ---------------------------------------------------------------- the whole competition on the CPU

CPU_COMPETITION = """
[competition]
min_repeats = 2
max_repeats = 3
cap_s = 2.0
time_limit_s = 60
runs = [{ name = "b1", B = 1, prompt = 4, generate = 3 }, { name = "b2", B = 2, prompt = 5, generate = 4 }]
"""


@pytest.fixture(scope="module")
def cpu_pack(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("gpt2-cpu-competition")
    pack = make_forward_pack(root)
    pack.spec_file.write_text(pack.spec_file.read_text() + CPU_COMPETITION)
    return load_assignment(pack.root), root


def test_the_serial_kernels_are_gated_in_with_a_speed(cpu_pack, cache_dir: Path) -> None:
    assignment, _ = cpu_pack
    result = compete(assignment.reference_dir, assignment, Options(cache_dir=cache_dir), load_competition(assignment))
    assert result.entered, result.words
    assert [(r.name, r.status) for r in result.runs] == [("b1", "timed"), ("b2", "timed")]
    for run in result.runs:
        assert 2 <= len(run.samples_s) <= 3 and all(s > 0 for s in run.samples_s)
        assert run.tokens_per_s == pytest.approx(run.B * run.generate / run.median_s) and run.tokens_per_s > 0
        assert len(run.tokens) == run.B and all(len(row) == run.generate for row in run.tokens)
        assert run.message.startswith("gated in: ") and run.max_abs_err < 1e-4
    speeds = [r.tokens_per_s for r in result.runs]
    assert result.geomean_tokens_per_s == pytest.approx(math.sqrt(speeds[0] * speeds[1]))
    assert result.folder == "kernels/ (kernels_competition/ is not in the submission)"


def test_a_mutant_is_gated_out_with_the_words(cpu_pack, cache_dir: Path) -> None:
    assignment, root = cpu_pack
    name = "mutant-matmul-shape-keyed-transpose-cache"  # right on its own cases, wrong from layer 2 on
    folder = submission(root / "mutants", name, mutant(name))
    result = compete(folder, assignment, Options(cache_dir=cache_dir), load_competition(assignment))
    assert not result.entered and result.geomean_tokens_per_s is None
    assert all(r.status is TimingStatus.WRONG for r in result.runs)
    assert result.words.startswith("not entered: run b1 (B=1, 3 tokens) gated out: the logits of generated token 1 "
                                   "of 3: largest error ")


def test_the_competition_folder_is_laid_over_kernels(cpu_pack, cache_dir: Path, tmp_path: Path) -> None:
    assignment, root = cpu_pack
    name = "mutant-matmul-shape-keyed-transpose-cache"
    folder = submission(tmp_path, "team", mutant(name))  # kernels/: the wrong matmul ...
    (folder / "kernels_competition").mkdir()  # ... kernels_competition/: the right one, which replaces it
    (folder / "kernels_competition" / "matmul.h").write_text((assignment.reference_dir / "kernels" / "matmul.h")
                                                             .read_text())
    result = compete(folder, assignment, Options(cache_dir=cache_dir), load_competition(assignment), "team-7")
    assert result.entered, result.words
    assert result.folder == "kernels/ with kernels_competition/ laid over it" and result.student == "team-7"


def test_a_competition_folder_that_does_not_compile_says_so(cpu_pack, cache_dir: Path, tmp_path: Path) -> None:
    assignment, _ = cpu_pack
    folder = submission(tmp_path, "team", {})
    (folder / "kernels_competition").mkdir()
    (folder / "kernels_competition" / "gelu.h").write_text("this is not C++\n")
    result = compete(folder, assignment, Options(cache_dir=cache_dir), load_competition(assignment))
    assert not result.entered
    assert all(r.status is TimingStatus.COMPILE_ERROR for r in result.runs)
    assert "does not compile (gelu)" in result.words


def test_grader_time_competition_writes_the_runs_and_the_geometric_mean(cpu_pack, cache_dir: Path,
                                                                        tmp_path: Path, capsys) -> None:
    assignment, _ = cpu_pack
    out = tmp_path / "c.json"
    assert main(["time", str(assignment.reference_dir), "--assignment", str(assignment.root), "--competition",
                 "--student", "ref", "--cache-dir", str(cache_dir), "--json", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    result = read_competition(out)
    assert result.entered and result.student == "ref"
    assert f"entered: {result.geomean_tokens_per_s:,.1f} tokens/s (geometric mean over 2 runs" in printed
    assert json.loads(out.read_text())["competition_spec"].endswith("assignment.toml [competition]")


def test_the_competition_without_a_gpu_says_so_before_building(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from grader.device import unavailable_reason

    monkeypatch.setenv("KERNEL_GRADER_NO_GPU", "1")
    unavailable_reason.cache_clear()
    try:
        code = main(["time", str(load_assignment("gpt2-m3").reference_dir), "--assignment", "gpt2-m3",
                     "--competition"])
    finally:
        unavailable_reason.cache_clear()
    assert code == 2
    assert "cannot run gpt2-m3's competition on this machine: no GPU is used here (KERNEL_GRADER_NO_GPU is set)" in \
        " ".join(capsys.readouterr().err.split())


def test_an_assignment_without_a_competition_is_refused_by_grader_time(capsys) -> None:
    assert main(["time", str(load_assignment("gpt2-m2").reference_dir), "--assignment", "gpt2-m2",
                 "--competition"]) == 2
    assert "gpt2-m2 has no [competition] table" in " ".join(capsys.readouterr().err.split())
