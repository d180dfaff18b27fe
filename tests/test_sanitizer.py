"""compute-sanitizer's reports: read in the tool's own words, scored as the spec says.

The tool itself needs a GPU (tests/test_gpu_sandbox.py); here its output format and the scoring.
"""

from __future__ import annotations

import pytest

from grader.build import Artifact
from grader.errors import SpecError
from grader.results import CaseResult
from grader.sanitizer import findings_of, has_errors, parse_report, smallest_case
from grader.scoring import score_kernel
from grader.assignment import load_assignment

from conftest import copy_assignment

MEMCHECK = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at gelu_forward_kernel(float *, const float *, int)+0x1b0 in /tmp/kg-build-gelu/kernels/gelu.cuh:18
=========     by thread (1,0,0) in block (0,0,0)
=========     Address 0x7f2a4c000204 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f2a4c000200 of size 4 bytes
=========
========= Invalid __global__ write of size 4 bytes
=========     at gelu_forward_kernel(float *, const float *, int)+0x1b0 in /tmp/kg-build-gelu/kernels/gelu.cuh:18
=========     by thread (2,0,0) in block (0,0,0)
=========
========= ERROR SUMMARY: 32 errors
"""
RACECHECK = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at layernorm_forward_kernel(float *, ...)+0x2c0 in kernels/layernorm.cuh:41
=========     and Read access at layernorm_forward_kernel(float *, ...)+0x300 in kernels/layernorm.cuh:47 [248 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
CLEAN = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"


def test_memcheck_findings_keep_the_tools_words_and_count() -> None:
    report = parse_report(MEMCHECK + "harness noise on stdout\n", "gelu", "memcheck")
    assert report.errors == 32
    assert report.findings[0] == ("Invalid __global__ write of size 4 bytes at gelu_forward_kernel(float *, const float *, "
                                  "int)+0x1b0 in /tmp/kg-build-gelu/kernels/gelu.cuh:18")
    assert len(report.findings) == 2
    assert findings_of([report])[-1] == "memcheck: 32 error(s) in all"


def test_racecheck_hazard_is_a_finding() -> None:
    report = parse_report(RACECHECK, "layernorm", "racecheck")
    assert report.errors == 1 and has_errors([report])
    assert report.findings[0].startswith("Error: Race reported between Write access at layernorm_forward_kernel")


def test_clean_report_has_no_findings() -> None:
    report = parse_report(CLEAN, "gelu", "memcheck")
    assert report.errors == 0 and report.findings == () and not has_errors([report])


def test_a_finding_deducts_the_specs_share_and_fails_the_kernel() -> None:
    kernel = load_assignment("gpt2-m1").kernel("gelu")
    assert kernel.sanitizer == ("memcheck",) and kernel.sanitizer_penalty == 0.5
    artifact = Artifact("gelu", "built", None, "", (), False, 0.1)
    cases = [CaseResult(c.name, c.public, "passed", True, "") for c in kernel.cases]
    clean = score_kernel(kernel, artifact, cases, [parse_report(CLEAN, "gelu", "memcheck")])
    assert clean.status == "passed" and clean.score == kernel.weight and clean.sanitizer == []
    flagged = score_kernel(kernel, artifact, cases, [parse_report(MEMCHECK, "gelu", "memcheck")])
    assert flagged.status == "failed" and flagged.score == kernel.weight * 0.5
    assert "compute-sanitizer (memcheck) reported errors: memcheck: Invalid __global__ write" in flagged.message
    assert flagged.sanitizer[0].startswith("memcheck: Invalid __global__ write of size 4 bytes at gelu_forward_kernel")


def test_sanitizer_runs_on_the_smallest_case() -> None:
    assert smallest_case(load_assignment("gpt2-m1").kernel("gelu")).name == "one-element"
    assert smallest_case(load_assignment("gpt2-m1").kernel("attention")).public


def test_unknown_sanitizer_tool_is_named(tmp_path) -> None:
    pack = copy_assignment("flash-attention-cpu", tmp_path)
    spec = pack / "assignment.toml"
    spec.write_text(spec.read_text().replace('name = "flash_attention"\n', 'name = "flash_attention"\nsanitizer = ["memchek"]\n'))
    with pytest.raises(SpecError, match=r"kernel 'flash_attention' key 'sanitizer': unknown compute-sanitizer tool\(s\) \['memchek'\]"):
        load_assignment(pack)
