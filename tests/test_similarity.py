"""Similarity across a class (issue 44, item 4): real git repositories, read at the graded commit, fingerprinted by
copydetect; a copied pair (identifiers renamed) is reported, a pair that shares only the template is not, an earlier
term's store is a corpus, and the page is linked from the dashboard, never from a student's report."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from grader import similarity
from grader.assignment import Assignment, load_assignment
from grader.cli import main
from grader.results import Submission
from grader.store import Store

from test_batch import at, commit
from test_store import result

PACK = "flash-attention-cpu"

# Two students' own standard attention, written apart: the same algorithm in two styles.
CAROL = '''#include "standard_attention.h"
#include <cmath>
#include <vector>
void standard_attention(const float* Q, const float* K, const float* V, float* O, int N, int d) {
    std::vector<float> scores(N);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    for (int i = 0; i < N; ++i) {
        float best = -INFINITY;
        for (int j = 0; j < N; ++j) {
            float dot = 0.0f;
            for (int k = 0; k < d; ++k) dot += Q[i * d + k] * K[j * d + k];
            scores[j] = dot * scale;
            best = std::fmax(best, scores[j]);
        }
        float total = 0.0f;
        for (int j = 0; j < N; ++j) { scores[j] = std::exp(scores[j] - best); total += scores[j]; }
        for (int k = 0; k < d; ++k) {
            float acc = 0.0f;
            for (int j = 0; j < N; ++j) acc += scores[j] * V[j * d + k];
            O[i * d + k] = acc / total;
        }
    }
}
'''
DAVE = '''#include "standard_attention.h"
#include <math.h>
#include <stdlib.h>
/* Algorithm 0, one matrix at a time, the way the slides draw it. */
void standard_attention(const float *q, const float *kk, const float *v, float *o, int n, int dim) {
    float *S = (float *)malloc(sizeof(float) * n * n);
    float *P = (float *)malloc(sizeof(float) * n * n);
    int a, b, c;
    for (a = 0; a < n * n; a++) { S[a] = 0; }
    for (a = 0; a < n; a++)
        for (c = 0; c < dim; c++)
            for (b = 0; b < n; b++)
                S[a * n + b] += q[a * dim + c] * kk[b * dim + c] / sqrtf((float)dim);
    for (a = 0; a < n; a++) {
        float m = S[a * n], z = 0;
        for (b = 1; b < n; b++) if (S[a * n + b] > m) m = S[a * n + b];
        for (b = 0; b < n; b++) { P[a * n + b] = expf(S[a * n + b] - m); z = z + P[a * n + b]; }
        for (b = 0; b < n; b++) P[a * n + b] = P[a * n + b] / z;
    }
    for (a = 0; a < n; a++)
        for (c = 0; c < dim; c++) {
            o[a * dim + c] = 0;
            for (b = 0; b < n; b++) o[a * dim + c] += P[a * n + b] * v[b * dim + c];
        }
    free(S);
    free(P);
}
'''


@pytest.fixture(scope="module")
def flash() -> Assignment:
    return load_assignment(PACK)


def renamed(text: str) -> str:
    """bob's copy of alice's code: every identifier of more than two letters renamed, a comment added."""
    keep = {"include", "void", "float", "const", "int", "for", "return", "static_cast", "std", "sqrt", "exp", "max",
            "min", "fmax", "vector", "cmath", "algorithm", "INFINITY", "double", "auto", "size_t", "if", "else"}
    return "// my own work\n" + re.sub(r"\b([A-Za-z_][A-Za-z_0-9]{2,})\b",
                                       lambda m: m.group(1) if m.group(1) in keep or "." in m.group(1)
                                       or m.group(1).endswith("_h") else f"my_{m.group(1)}", text)


def student(root: Path, flash: Assignment, name: str, files: dict[str, str]) -> tuple[Path, str]:
    """A fork of the template with `files` written over it, committed; its repository and commit."""
    work = root / "files" / name
    shutil.copytree(flash.template_dir, work)
    for relative, text in files.items():
        (work / relative).write_text(text)
    repo = root / "repos" / name
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    return repo, commit(repo, work, at(-1), "submit")


def stored(path: Path, students: dict[str, tuple[Path, str]]) -> Path:
    store = Store(path)
    for name, (repo, sha) in students.items():
        store.save(dataclasses.replace(result(name), assignment=PACK, submission=Submission(str(repo), sha),
                                       seed={"mode": "public", "fingerprint": "0"}))
    store.close()
    return path


@pytest.fixture(scope="module")
def term(flash: Assignment, tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("similarity")
    reference = {f"src/{name}": (flash.reference_dir / "src" / name).read_text()
                 for name in ("flash_attention.cpp", "standard_attention.cpp")}
    students = {"alice": student(root, flash, "alice", reference),
                "bob": student(root, flash, "bob", {path: renamed(text) for path, text in reference.items()}),
                "carol": student(root, flash, "carol", {"src/standard_attention.cpp": CAROL}),
                "dave": student(root, flash, "dave", {"src/standard_attention.cpp": DAVE})}
    # After the commit graded, alice's work tree changes: the graded commit is what is compared.
    (students["alice"][0] / "src" / "flash_attention.cpp").write_text("// rewritten after the deadline\n")
    earlier = {"old-erin": student(root, flash, "old-erin", {"src/standard_attention.cpp": CAROL}),
               "old-finn": student(root, flash, "old-finn", {"src/standard_attention.cpp": CAROL})}
    return {"root": root, "store": stored(root / "spring.sqlite", students),
            "corpus": stored(root / "fall-2025.sqlite", earlier)}


def page_pairs(page: str) -> list[tuple[str, str]]:
    return re.findall(r"<tr><td><a href=\"#pair-\d+\">\d+</a></td><td>([^<]+)</td><td class=\"n\">\d+%</td>"
                      r"<td>([^<]+)</td>", page)


def test_the_copied_pair_is_reported_and_the_pair_sharing_only_the_template_is_not(term: dict,
                                                                                  tmp_path: Path) -> None:
    out = tmp_path / "similarity.html"
    assert main(["similarity", "--store", str(term["store"]), "-a", PACK, "--out", str(out)]) == 0
    page = out.read_text()
    assert page_pairs(page) == [("alice", "bob")]
    share = int(re.search(r"alice and bob \((\d+)%\)", page).group(1))
    assert share >= 90, share  # renaming every identifier hides nothing from the tokenizer
    assert "<mark>" in page and "my_" in page  # bob's side, marked where it matches
    assert "rewritten after the deadline" not in page  # read at the graded commit, not the work tree
    # carol and dave share the template's headers and flash stub: left out, what is left of their pair is a few
    # tokens where their own code meets the template's (and well under the bar)
    low = tmp_path / "low.html"
    assert main(["similarity", "--store", str(term["store"]), "-a", PACK, "--out", str(low),
                 "--threshold", "0.01"]) == 0
    carol_dave = re.search(r"carol and dave \((\d+)%\)", low.read_text())
    assert carol_dave is not None and int(carol_dave.group(1)) < 15


def test_the_template_is_boilerplate(term: dict, flash: Assignment) -> None:
    """Without the template left out, carol and dave (who kept its headers and its flash stub) look far more alike."""
    store = Store(term["store"], read_only=True)
    results = {r.student: r for r in store.latest(PACK)}
    store.close()
    pair = [similarity.Submitted(name, results[name].submission.commit, similarity.code_at_commit(results[name]))
            for name in ("carol", "dave")]
    (kept,) = similarity.similar_pairs(pair, [], {}, threshold=0.0)
    (left_out,) = similarity.similar_pairs(pair, [], similarity.template_code(flash), threshold=0.0)
    assert kept.share > 2 * left_out.share and kept.tokens > left_out.tokens


def test_an_earlier_terms_store_is_a_corpus_compared_with_this_term_only(term: dict, tmp_path: Path) -> None:
    out = tmp_path / "similarity.html"
    assert main(["similarity", "--store", str(term["store"]), "-a", PACK, "--out", str(out),
                 "--corpus", str(term["corpus"])]) == 0
    pairs = page_pairs(out.read_text())
    assert ("alice", "bob") in pairs
    assert ("carol", "old-erin (fall-2025)") in pairs and ("carol", "old-finn (fall-2025)") in pairs
    assert not [p for p in pairs if "(fall-2025)" in p[0]]  # the corpus is not compared with itself


def test_the_dashboard_links_the_page_beside_it_and_no_student_page_does(term: dict, tmp_path: Path) -> None:
    out = tmp_path / "dashboard"
    assert main(["report", "dashboard", "--store", str(term["store"]), "-a", PACK, "--out", str(out)]) == 0
    assert "code similarity" not in (out / "index.html").read_text()  # nothing written beside it yet
    assert main(["similarity", "--store", str(term["store"]), "-a", PACK, "--out", str(out / "similarity.html")]) == 0
    assert main(["report", "dashboard", "--store", str(term["store"]), "-a", PACK, "--out", str(out)]) == 0
    assert '<a href="similarity.html">code similarity</a>' in (out / "index.html").read_text()
    assert not [p for p in (out / "students").rglob("*.html") if "similarity.html" in p.read_text()
                or "code similarity" in p.read_text()]
