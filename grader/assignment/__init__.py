"""Load and validate an assignment (`assignments/<name>/assignment.toml`) into typed objects.

The spec is the single source of truth for a kernel: its C signature, which arguments are inputs,
outputs or scratch (with dtype and shape), its weight, tolerance, cases and limits. Every error
names the file, the key and what was expected.

The package, one module per job: `model` (the typed objects), `shapes` (shape expressions),
`signature` (C signatures), `loader` (TOML into the model: [assignment], composing `document` (the TOML
read, `based_on` resolved, `Reader`), `kernels`, `variants` and `late`), `assignments` (where assignments
are: one folder each, under assignments/).
"""

from grader.assignment.model import (EVIDENCE, INITS, LIBRARIES, SCALAR_DTYPES, Assignment, Buffer, Case, CreditGroup,
                               Evidence, GoldSource, Init, Kernel, LatePolicy, MemoryBound, Parameter, PartialCredit, Role, Signature,
                               Tolerance, Untouched, Variant)
from grader.assignment.assignments import (ASSIGNMENTS_DIR, PROJECT_ROOT, BrokenAssignment, find_assignment,
                                     list_assignments, survey_assignments)
from grader.assignment.shapes import allocation_of, evaluate, shape_of
from grader.assignment.signature import parse_signature
from grader.assignment.kernels import SANITIZER_TOOLS
from grader.assignment.loader import load_assignment

__all__ = ["EVIDENCE", "Evidence", "Variant", "INITS", "LIBRARIES", "PROJECT_ROOT", "SANITIZER_TOOLS", "SCALAR_DTYPES", "Assignment", "Buffer", "Case",
           "CreditGroup",
           "GoldSource", "Init", "Kernel", "LatePolicy", "MemoryBound", "Parameter", "PartialCredit", "Role", "Signature",
           "Tolerance", "Untouched", "allocation_of", "evaluate", "ASSIGNMENTS_DIR", "find_assignment", "list_assignments", "survey_assignments", "BrokenAssignment", "load_assignment",
           "parse_signature", "shape_of"]
