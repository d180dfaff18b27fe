"""The late policy: read from the spec's [assignment.late] or the command line, applied in scoring."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

import pytest

from grader.errors import SpecError
from grader.batch.late import apply_late_policy, late_days
from grader.assignment import LatePolicy, load_assignment
from grader.store import Store

from conftest import copy_assignment
from test_batch import DEADLINE, DEADLINE_AT, at, make_repo, run_batch
from test_store import result


def with_late_table(tmp_path: Path, table: str) -> Path:
    pack = copy_assignment("flash-attention-cpu", tmp_path / "packs")
    spec = pack / "assignment.toml"
    text = spec.read_text()
    # The table goes after every [assignment] key, just before the first kernel.
    spec.write_text(text.replace("\n[[kernels]]", "\n[assignment.late]\n" + table + "\n[[kernels]]", 1))
    return pack


def test_spec_late_table_is_read_and_checked(tmp_path: Path) -> None:
    pack = with_late_table(tmp_path, "grace_days = 1\npenalty_per_day = 0.25\ncap = 0.5\n")
    policy = load_assignment(pack).late
    assert policy == LatePolicy(grace_days=1, penalty_per_day=0.25, cap=0.5)
    assert policy.accepted_days == 3  # commits count until the penalty reaches its cap
    assert load_assignment("flash-attention-cpu").late is None
    bad = with_late_table(tmp_path / "bad", "penalty_per_day = 0.1\ncap = 2\n")
    with pytest.raises(SpecError, match=r"\[assignment.late\]: key 'cap' is a fraction"):
        load_assignment(bad)
    typo = with_late_table(tmp_path / "typo", "grace_day = 1\n")
    with pytest.raises(SpecError, match=r"\[assignment.late\]: unknown key\(s\) \['grace_day'\]"):
        load_assignment(typo)


def test_a_started_day_counts_as_a_late_day() -> None:
    assert late_days(DEADLINE_AT, at(0)) == 0
    assert late_days(DEADLINE_AT, at(-3)) == 0
    assert late_days(DEADLINE_AT, DEADLINE_AT + datetime.timedelta(minutes=1)) == 1
    assert late_days(DEADLINE_AT, at(1)) == 1
    assert late_days(DEADLINE_AT, at(1.01)) == 2


def test_penalty_is_capped_and_never_below_zero() -> None:
    full = dataclasses.replace(result("s"), score=10.0, max_score=10.0)
    policy = LatePolicy(grace_days=0, penalty_per_day=0.3, cap=0.5)
    late = apply_late_policy(full, policy, DEADLINE_AT, at(4))
    assert late.raw_score == 10 and late.score == 5 and late.late.points_deducted == 5 and late.late.days_late == 4
    weak = dataclasses.replace(full, score=1.0)
    assert apply_late_policy(weak, policy, DEADLINE_AT, at(4)).score == 0
    on_time = apply_late_policy(full, policy, DEADLINE_AT, at(-1))
    assert on_time.score == 10 and on_time.late.days_late == 0
    assert apply_late_policy(full, policy, None, None).late is None


def test_spec_policy_applies_and_command_line_overrides_it(tmp_path: Path) -> None:
    pack = with_late_table(tmp_path, "penalty_per_day = 0.25\ncap = 0.5\n")
    flash = load_assignment(pack)
    repo, shas = make_repo(tmp_path, flash, [(None, 1.5)])
    roster = tmp_path / "roster.csv"
    roster.write_text(f"student,repository\nlate,{repo}\n")
    store = tmp_path / "grades.sqlite"
    common = [str(roster), "-a", str(pack), "--deadline", DEADLINE, "--store", str(store),
              "--cache-dir", str(tmp_path / "cache")]
    assert run_batch(*common) == 0
    graded = Store(store).latest("flash-attention-cpu")[0]
    assert graded.late.days_late == 2 and graded.late.penalty_per_day == 0.25 and graded.score == pytest.approx(1.5)
    assert run_batch(*common, "--regrade", "--grace-days", "2") == 0
    regraded = Store(store).latest("flash-attention-cpu")[0]
    assert regraded.late.grace_days == 2 and regraded.score == 3 and regraded.submission.commit == shas[0]
    # Without a late policy nothing after the deadline counts.
    strict = tmp_path / "strict.sqlite"
    assert run_batch(str(roster), "-a", "flash-attention-cpu", "--deadline", DEADLINE, "--store", str(strict),
                     "--cache-dir", str(tmp_path / "cache")) == 0
    assert Store(strict).latest("flash-attention-cpu")[0].status == "not_submitted"
