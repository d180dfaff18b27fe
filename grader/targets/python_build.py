"""The `python` target's build step: byte-compile a kernel's modules and pack them into its library, a zip archive.

Run inside the build sandbox, from the work folder, as the target's compile command:

    python -I -S -c <this file's source> ENTRY RECORD OUTPUT

No student code runs here: each module is compiled (`compile`), never imported. The modules checked are the kernel's
own (ENTRY, the target's generated JSON, names it) and those it imports from the submission, followed through
`import` statements and `importlib.import_module("...")` / `__import__("...")` calls with a literal name: a file it
never imports (a student's scratch file) costs it nothing, as a C file the kernel does not call. A syntax error in
one of them is printed as `file:line:column: error: ...` (the compile_error status, file and line, as g++'s) and
the exit status is 1. Otherwise every import found, and every attribute named (`A.toarray()`: "toarray"), each with
its file and line, goes to RECORD (JSON, for the forbidden imports and methods), and OUTPUT gets the modules reached
(and their packages' `__init__.py`), the work folder's other files that are no module (data), ENTRY and RECORD; no
bytecode or extension modules, which the scan did not read. The work folder holds every module of the submission
(a fork's sibling `inference.py` too, `grader.sources`): one never imported stays out of the archive.

Standard library only, and self-contained: it runs with `-I -S`, outside the grader's package.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import zipfile

LEFT_OUT = (".pyc", ".pyo", ".so", ".pyd")  # what the archive never carries: code the scan could not read
DYNAMIC_IMPORTERS = ("import_module", "__import__")  # importlib.import_module("x"), __import__("x")


def module_file(name: str, files: set[str]) -> str | None:
    """The submission's file that module `name` is ("kernels.axpy": kernels/axpy.py or kernels/axpy/__init__.py)."""
    base = name.replace(".", "/")
    return next((f for f in (f"{base}.py", f"{base}/__init__.py") if f in files), None)


def package_of(path: str) -> list[str]:
    """The package a module file belongs to, as parts ("kernels/axpy.py": ["kernels"])."""
    parts = path[:-len(".py")].split("/")
    return parts[:-1]


def package_inits(files: set[str]) -> list[str]:
    """The `__init__.py` a folder of modules lacks, for each such folder and the folders above it: on disk it is a
    namespace package (PEP 420), which zipimport does not know (a flat upload's `kernels/scipy_sparse.py` comes
    without `kernels/__init__.py`), so the archive gets an empty one to import alike."""
    folders = {"/".join(parts[:depth]) for parts in (package_of(f) for f in files if f.endswith(".py"))
               for depth in range(1, len(parts) + 1)}
    return sorted(f"{folder}/__init__.py" for folder in folders if f"{folder}/__init__.py" not in files)


def imports_of(tree: ast.AST, path: str) -> list[tuple[str, int]]:
    """Every module name `tree` may import, absolute, with its line (`from a import b`: "a" and "a.b", a submodule
    or not)."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = package_of(path)
                if node.level - 1 > len(package):
                    continue  # beyond the top: fails when imported, and names nothing of ours
                parts = package[:len(package) - (node.level - 1)] + ([node.module] if node.module else [])
                base = ".".join(parts)
            else:
                base = node.module or ""
            if base:
                found.append((base, node.lineno))
            found += [(f"{base}.{alias.name}" if base else alias.name, node.lineno)
                      for alias in node.names if alias.name != "*"]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in DYNAMIC_IMPORTERS:
                found.append((node.args[0].value, node.lineno))
    return found


def attributes_of(tree: ast.AST) -> list[tuple[str, int]]:
    """Every attribute name `tree` reads, calls or writes (`A.toarray()`, `f = A.todense`: "toarray", "todense"),
    with its line, once per line: what a forbidden method pattern (".toarray") is matched against."""
    return sorted({(node.attr, node.lineno) for node in ast.walk(tree) if isinstance(node, ast.Attribute)},
                  key=lambda found: (found[1], found[0]))


def syntax_error_words(path: str, error: Exception) -> str:
    """g++'s shape: `file:line:column: error: what`, then the line and a caret under the column."""
    if not isinstance(error, SyntaxError):  # ValueError: null bytes in the source
        return f"{path}:1: error: {error}"
    where = f"{path}:{error.lineno or 1}:{error.offset or 1}"
    words = f"{where}: error: {type(error).__name__}: {error.msg}"
    if error.text:
        text = error.text.rstrip("\n")
        words += f"\n    {text.strip()}\n    {' ' * max((error.offset or 1) - 1 - (len(text) - len(text.lstrip())), 0)}^"
    return words


def check(entry: dict[str, object], files: set[str], root: str = ".",
          reached: set[str] | None = None) -> tuple[list[str], list[list[object]], list[list[object]]]:
    """The syntax errors of the kernel's modules, every import they make and every attribute they name (each
    [name, file, line]); `files`: the build's, relative to `root`; `reached`, where given, gets the module files
    the walk read."""
    first = str(entry["file"])
    if first not in files:
        return [f"{first}: error: no such file (the module that defines {entry['function']})"], [], []
    errors: list[str] = []
    imports: list[list[object]] = []
    attributes: list[list[object]] = []
    queue, seen = [first], {first}
    while queue:
        path = queue.pop(0)
        with open(os.path.join(root, path), "rb") as source:
            text = source.read()
        try:
            tree = compile(text, path, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
            compile(tree, path, "exec", dont_inherit=True)  # what the parser alone lets through ('return' outside def)
        except (SyntaxError, ValueError) as error:
            errors.append(syntax_error_words(path, error))
            continue
        attributes += [[name, path, line] for name, line in attributes_of(tree)]
        for name, line in imports_of(tree, path):
            imports.append([name, path, line])
            parts = name.split(".")
            # Importing a.b.c runs a/__init__.py and a/b/__init__.py first.
            for depth in range(1, len(parts) + 1):
                found = module_file(".".join(parts[:depth]), files)
                if found and found not in seen:
                    seen.add(found)
                    queue.append(found)
    if reached is not None:
        reached.update(seen)
    return errors, imports, attributes


def packed_files(files: set[str], modules: set[str]) -> set[str]:
    """What the archive carries of the work folder: the modules reached and their packages' `__init__.py` (imported
    before them), and every file that is no module."""
    inits = {f"{'/'.join(parts[:depth])}/__init__.py" for parts in (package_of(m) for m in modules)
             for depth in range(1, len(parts) + 1)}
    return {f for f in files if not f.endswith(".py") or f in modules or f in inits}


def main(argv: list[str]) -> int:
    entry_file, record_file, output = argv[1:4]
    with open(entry_file) as opened:
        entry = json.load(opened)
    files = {os.path.relpath(os.path.join(folder, name)).replace(os.sep, "/")
             for folder, _, names in os.walk(".") for name in names}
    modules: set[str] = set()
    errors, imports, attributes = check(entry, files, reached=modules)
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 1
    with open(record_file, "w") as record:
        json.dump({"imports": imports, "attributes": attributes}, record)
    packed = packed_files(files, modules)
    with zipfile.ZipFile(output + ".part", "w", zipfile.ZIP_STORED) as archive:
        for path in sorted(packed | {record_file}):
            if not path.endswith(LEFT_OUT) and path not in (output, output + ".part"):
                archive.write(path, path)
        for init in package_inits(packed):
            archive.writestr(init, "")
    os.replace(output + ".part", output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
