"""The C signatures a spec declares: `void name(const float* a, int n)`, flat types only."""

from __future__ import annotations

import re

from grader.errors import SpecError
from grader.assignment.model import SCALAR_DTYPES, Parameter, Signature

_SIGNATURE = re.compile(r"^\s*void\s+([A-Za-z_]\w*)\s*\((.*)\)\s*;?\s*$", re.S)


def parse_signature(text: str, where: str) -> Signature:
    """Parse `void name(const float* a, int n)`; only the flat types kernels need are accepted."""
    match = _SIGNATURE.match(text)
    if not match:
        raise SpecError(f"{where}: expected a signature like 'void name(float* out, int N)', found {text!r}")
    parameters = []
    for raw in (p.strip() for p in match.group(2).split(",") if p.strip()):
        normalised = re.sub(r"\s+", " ", raw.replace("*", " * ")).strip()
        tokens = normalised.split()
        const = tokens[0] == "const"
        if const:
            tokens = tokens[1:]
        pointer = "*" in tokens
        tokens = [t for t in tokens if t != "*"]
        if len(tokens) != 2 or tokens[0] not in SCALAR_DTYPES or not tokens[1].isidentifier():
            raise SpecError(
                f"{where}: parameter {raw!r} must be one of {', '.join(SCALAR_DTYPES)} or a pointer to one, with a name"
            )
        parameters.append(Parameter(name=tokens[1], ctype=tokens[0], pointer=pointer, const=const))
    names = [p.name for p in parameters]
    if len(set(names)) != len(names):
        raise SpecError(f"{where}: parameter names repeat in {text!r}")
    return Signature(function=match.group(1), parameters=tuple(parameters))
