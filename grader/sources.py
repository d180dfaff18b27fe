"""Which files each kernel's build gets from a checkout: the sources stage.

A kernel's build gets every file of the spec's `source_dirs` (the course compiles `kernels/` as
one program, so kernel files include each other) and the kernel's own `sources`, which must exist: each
entry a path, a glob (every file it matches, at least one) or a list of alternatives (the first the
checkout has: a fork keeps the course's own file names). A variant's overlay replaces base files by name,
the course's rule for `kernels_req_x/`. Beyond its folders, a build also gets the submission's files that
its C files `#include` by a literal name (a variant's `../kernels_op_9/softmax.cuh`, `../cpu_kernels/x.h`:
the course builds a variant inside the whole repository), and the modules its target can import by name
from anywhere (Python's `*.py`: a fork's sibling `inference.py`), which the target packs where imported;
both bounded like a source folder. An upload
(Gradescope) may arrive flat: a file missing at its path is taken from elsewhere in the upload by
name, and a missing interface header from the student template. The grader's provided files
(`utils/` of the student template) always replace the submission's. Each file records where it
came from, so that the result can say so.
"""

from __future__ import annotations

import enum
import fnmatch
import functools
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.includes import included_from
from grader.assignment import Assignment, Kernel, Variant
from grader.assignment.kernels import is_glob
from grader.targets import target_of

# A source folder is copied into every kernel's build: bounded, so a submission can't make it huge.
SOURCE_DIR_FILES = 256
SOURCE_DIR_BYTES = 8 << 20
HEADER_SUFFIXES = (".h", ".hpp", ".cuh")  # what may be an interface header among a kernel's sources
# The files a C build may #include: where one of its files includes by other means than a literal name (a macro),
# every such file of the checkout is shipped (bounded as above), since any may be read.
C_SUFFIXES = (".h", ".hpp", ".hh", ".cuh", ".inl", ".c", ".cc", ".cpp", ".cxx", ".cu")
BEYOND_FILE_BYTES = 1 << 20  # a file beyond the folders larger than this is never shipped (no source is)
LISTING_LIMIT = 20_000  # entries of a checkout looked at for files beyond the folders and for globs


class Origin(str, enum.Enum):
    """Where a file of a build came from."""

    SUBMISSION = "submission"  # the checkout's file at its own path
    PROVIDED = "provided"  # the grader's (the student template's provided files)
    OVERLAY = "overlay"  # a variant folder's file, replacing the base's of the same name
    FOUND_IN_UPLOAD = "found_in_upload"  # a flat upload's file, found elsewhere in it by name
    TEMPLATE = "template"  # an interface header the upload lacks: the student template's
    INCLUDED = "included"  # the submission's file outside the build's folders that one of its files #includes
    # The submission's module outside the build's folders (a fork's `inference.py`): shipped because the target's
    # code may import it by name; the build packs it only where the kernel's modules import it.
    IMPORTABLE = "importable"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SourceFile:
    path: str  # where the build sees it, relative to the checkout's root
    content: bytes
    origin: Origin
    taken_from: str = ""  # an overlay's or a flat upload's file: its own path in the checkout

    @property
    def described(self) -> str:
        """The file as the result's `built_from` lists it: its path, and whence where it is not its own."""
        if self.origin is Origin.OVERLAY:
            return f"{self.path} (from {self.taken_from})"
        if self.origin is Origin.FOUND_IN_UPLOAD:
            return f"{self.path} (not at its path in the upload: {self.taken_from} is used)"
        if self.origin is Origin.TEMPLATE:
            return f"{self.path} (not in the upload: the student template's is used)"
        return self.path


@dataclass(frozen=True)
class KernelSources:
    """One kernel's build inputs, and what is wrong with the submission's files ("" if nothing)."""

    kernel: str
    # The submission's files, then the provided ones, then those beyond its folders (INCLUDED, IMPORTABLE).
    files: tuple[SourceFile, ...]
    problem: str = ""
    # A kernel that accepts several names (`Kernel.functions`): the one its files define, which the build calls, and
    # where it was found, in words ("kernels_req_5/local_attention.cuh defines <the name it found>").
    function: str = ""
    function_found: str = ""
    # The kernel's `sources` as this checkout has them: each entry's alternative found, a glob's matches ((): as
    # the spec names them), and its `header` where that is one of an entry's alternatives ("": the spec's).
    resolved: tuple[str, ...] = ()
    header: str = ""

    def called(self, kernel: Kernel) -> Kernel:
        """`kernel` as the build calls it: its sources and header as found, under the name its files define."""
        if self.resolved and self.resolved != kernel.sources:
            kernel = replace(kernel, sources=self.resolved, source_entries=tuple((s,) for s in self.resolved))
        if self.header and self.header != kernel.header:
            kernel = replace(kernel, header=self.header)
        if not self.function or self.function == kernel.signature.function:
            return kernel
        return replace(kernel, signature=replace(kernel.signature, function=self.function))

    @property
    def contents(self) -> dict[str, bytes]:
        """Path → bytes, as the build writes them (and hashes them for its cache key)."""
        return {f.path: f.content for f in self.files}

    @property
    def built_from(self) -> tuple[str, ...]:
        """The files as the result lists them; a module shipped only in case it is imported is not one of them."""
        return tuple(f.described for f in self.files if f.origin is not Origin.IMPORTABLE)


@dataclass(frozen=True)
class Overlay:
    """A variant folder laid over a base folder of the checkout (`kernels_req_0` over `kernels`)."""

    folder: str
    onto: str


@dataclass(frozen=True)
class VariantSources:
    """What a variant's folder holds, as the score needs it: whether it is there, and which files it leaves alone."""

    variant: str
    folder: str
    submitted: bool  # the folder is in the submission (its kernels' sources say what else is wrong with it)
    unchanged: tuple[str, ...] = ()  # must_change files it lacks or holds byte-identical to the base's
    required_found: tuple[str, ...] = ()  # its files (from the root) matching the variant's required_files
    # Per source_patterns label: its files whose text matches the pattern (reported only).
    pattern_files: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def lacks_required(self, variant: Variant) -> bool:
        """The folder is there but holds no file matching the variant's required_files."""
        return self.submitted and bool(variant.required_files) and not self.required_found


@dataclass(frozen=True)
class Sources:
    """Every selected kernel's build inputs from one checkout."""

    root: Path
    kernels: tuple[KernelSources, ...]
    variants: tuple[VariantSources, ...] = ()  # the selected kernels' variants

    def of(self, kernel: str) -> KernelSources:
        for sources in self.kernels:
            if sources.kernel == kernel:
                return sources
        raise KeyError(f"no sources were gathered for kernel {kernel!r}")


def gather_sources(assignment: Assignment, root: Path, kernels: tuple[Kernel, ...] | None = None,
                   overlay: Overlay | None = None, upload: bool = False) -> Sources:
    """The files of each kernel's build from the checkout at `root` (the stage between fetch and build).

    A variant's kernel ("req_0/matmul") gets its variant's folder laid over the base folder.
    overlay: a folder to lay over every kernel's base first instead. upload: the checkout is an
    upload (Gradescope), which may be flat or lack the interface headers.
    """
    selected = kernels or assignment.kernels
    provided = [SourceFile(relative, assignment.tree_file("template", relative).read_bytes(), Origin.PROVIDED)
                for relative in assignment.provided]
    trees: dict[Overlay | None, tuple[dict[str, SourceFile], str]] = {}
    checkout = CheckoutFiles(root)
    importable = target_of(assignment).importable
    gathered = []
    for kernel in selected:
        laid = overlay or overlay_of(assignment, kernel)
        if laid not in trees:  # one tree per overlay: every kernel of a variant sees the same folder
            tree, problem = _shared_files(assignment, root, laid)
            if upload and not problem:
                tree.update(_placed_in_upload(assignment, root, tree))
            trees[laid] = tree, problem
        tree, problem = trees[laid]
        folders = assignment.source_dirs + ((laid.onto,) if laid else ())
        sources = _kernel_sources(kernel, checkout, tree, problem, provided, folders)
        if not sources.problem:
            sources = replace(sources, files=sources.files + _beyond_folders(sources.files, checkout, folders,
                                                                             importable))
        gathered.append(sources)
    chosen = {k.variant for k in selected}
    variants = () if overlay else tuple(variant_sources(v, root) for v in assignment.variants if v.name in chosen)
    return Sources(root, tuple(gathered), variants)


def overlay_of(assignment: Assignment, kernel: Kernel) -> Overlay | None:
    """The folder laid over the base for `kernel`'s build: its variant's; None for a base kernel."""
    if kernel.variant is None:
        return None
    variant = assignment.variant(kernel.variant)
    return Overlay(variant.folder, variant.onto)


def variant_sources(variant: Variant, root: Path) -> VariantSources:
    """A variant's folder as submitted: there or not, and the files it must change that it leaves as they are."""
    folder = root / variant.folder
    if not folder.is_dir() and not folder.is_symlink():
        return VariantSources(variant.name, variant.folder, False, variant.must_change)
    if folder.is_symlink():  # never followed (it could lead to the grader's files); its kernels say why
        return VariantSources(variant.name, variant.folder, True)
    files = [path.relative_to(root).as_posix() for path in _regular_files(folder, root)]
    found = tuple(f for f in files if any(fnmatch.fnmatchcase(f, p) for p in variant.required_files))
    patterns = {label: tuple(f for f in files if _mentions(root / f, pattern))
                for label, pattern in variant.source_patterns.items()}
    unchanged = []
    for base_file in variant.must_change:
        replacement, base = root / variant.overlay_path(base_file), root / base_file
        readable = not _symbolic_link_in(root, base_file) and base.is_file()
        if _symbolic_link_in(root, variant.overlay_path(base_file)) or not replacement.is_file() or (
                readable and replacement.read_bytes() == base.read_bytes()):
            unchanged.append(base_file)
    return VariantSources(variant.name, variant.folder, True, tuple(unchanged), found, patterns)


MENTION_LIMIT = 1 << 20  # bytes of a file that a source pattern reads: a reported fact, never worth a huge read


def _mentions(path: Path, pattern: str) -> bool:
    try:
        with path.open("rb") as file:
            text = file.read(MENTION_LIMIT).decode("utf-8", "replace")
    except OSError:
        return False
    return re.search(pattern, text, re.MULTILINE) is not None


def overlay_files(folder: Path, onto: str = "", leave_out: Collection[str] = ()) -> dict[str, Path]:
    """The course's overlay rule: each file of `folder` replaces the file of the same name under `onto`.

    Returns each one's path relative to the base's root (`onto/...`) → the overlay's file. Regular
    files only, hidden ones left out, as for a source folder; `leave_out`: file names that are not
    part of it (a sample's VARIANT.toml).
    """
    if not folder.is_dir() or folder.is_symlink():
        return {}
    base = Path(onto)
    return {(base / path.relative_to(folder)).as_posix(): path for path in _regular_files(folder, folder)
            if path.name not in leave_out}


def interface_headers(assignment: Assignment) -> list[str]:
    """The headers among the kernels' sources that the student gets finished: the template's equals the reference's.

    They declare the interface the grader calls, so an upload without them (only the .cpp files) is
    given the template's; a header the template leaves with TODOs is the student's work, and is not.
    """
    sources = sorted({s for k in assignment.kernels for s in k.sources if s.endswith(HEADER_SUFFIXES)})
    given = []
    for source in sources:
        template, reference = assignment.tree_file("template", source), assignment.tree_file("reference", source)
        if template.is_file() and reference.is_file() and template.read_bytes() == reference.read_bytes():
            given.append(source)
    return given


def _regular_files(base: Path, root: Path) -> Iterator[Path]:
    """The regular files under `base`, sorted, none hidden (relative to `root`) and no symlinks.

    A symlink could point at the grader's own files (gold, secret): only regular files count.
    """
    for path in sorted(base.rglob("*")):
        if path.is_symlink() or not path.is_file() or any(p.startswith(".") for p in path.relative_to(root).parts):
            continue
        yield path


def _shared_files(assignment: Assignment, root: Path, overlay: Overlay | None) -> tuple[dict[str, SourceFile], str]:
    """The source folders' files with the overlay's laid over them, and what is wrong with them ("" if nothing)."""
    if overlay is not None and (root / overlay.folder).is_symlink():
        return {}, f"{overlay.folder}/ is a symbolic link; submit the folder itself"
    if overlay is not None and not (root / overlay.folder).is_dir():
        return {}, f"{overlay.folder}/ is not in the submission"
    found: list[tuple[str, str, Path, Origin]] = []  # (folder, where the build sees it, the file, origin)
    for folder in assignment.source_dirs:
        base = root / folder
        if base.is_dir() and not base.is_symlink():  # else the kernel's own missing files say what is wrong
            found += [(folder, path.relative_to(root).as_posix(), path, Origin.SUBMISSION)
                      for path in _regular_files(base, root)]
    if overlay is not None:
        found += [(overlay.folder, relative, path, Origin.OVERLAY)
                  for relative, path in overlay_files(root / overlay.folder, overlay.onto).items()]
    tree: dict[str, SourceFile] = {}
    total = 0
    for folder, relative, path, origin in found:
        total += path.stat().st_size
        if len(tree) >= SOURCE_DIR_FILES or total > SOURCE_DIR_BYTES:
            return tree, (f"{folder}/ holds more than {SOURCE_DIR_FILES} files or {SOURCE_DIR_BYTES >> 20} MiB; "
                          "every kernel's build copies it whole, so keep only your sources there")
        taken_from = path.relative_to(root).as_posix() if origin is Origin.OVERLAY else ""
        tree[relative] = SourceFile(relative, path.read_bytes(), origin, taken_from)
    return tree, ""


def _placed_in_upload(assignment: Assignment, root: Path, tree: dict[str, SourceFile]) -> dict[str, SourceFile]:
    """What a flat upload lacks at its paths: each wanted file found elsewhere in it by name, else an
    interface header from the student template."""
    def present(relative: str) -> bool:
        return relative in tree or (root / relative).is_file() or _symbolic_link_in(root, relative) is not None

    # Each entry none of whose alternatives is at its path: its named alternatives, in order (a glob is not a name).
    entries = {e for k in assignment.kernels for e in k.source_entries}
    absent = sorted(tuple(a for a in e if not is_glob(a)) for e in entries
                    if not any(is_glob(a) or present(a) for a in e))
    if not absent:
        return {}
    by_name: dict[str, list[Path]] = {}
    for path in sorted(root.rglob("*"), key=lambda p: (len(p.parts), p)):  # the shallowest first
        if path.is_file() and not path.is_symlink():
            by_name.setdefault(path.name, []).append(path)
    headers = set(interface_headers(assignment))
    placed = {}
    for alternatives in absent:
        for relative in alternatives:
            if candidates := by_name.get(Path(relative).name):
                placed[relative] = SourceFile(relative, candidates[0].read_bytes(), Origin.FOUND_IN_UPLOAD,
                                              candidates[0].relative_to(root).as_posix())
                break
        else:
            if alternatives and alternatives[0] in headers:
                placed[alternatives[0]] = SourceFile(alternatives[0],
                                                     assignment.tree_file("template", alternatives[0]).read_bytes(),
                                                     Origin.TEMPLATE)
    return placed


def _symbolic_link_in(root: Path, relative: str) -> str | None:
    """The first part of `relative` (below `root`) that is a symbolic link, as a path; None if none is."""
    parts = Path(relative).parts
    for depth in range(1, len(parts) + 1):
        if (root.joinpath(*parts[:depth])).is_symlink():
            return Path(*parts[:depth]).as_posix()
    return None


class CheckoutFiles:
    """A checkout's files as the sources stage looks them up: its regular files listed once, on first need
    (shallowest first, hidden ones and symbolic links left out, at most LISTING_LIMIT entries looked at)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @functools.cached_property
    def listing(self) -> list[str]:
        return _listed(self.root)


def _listed(root: Path) -> list[str]:
    found: list[str] = []
    folders, seen = [root], 0
    while folders and seen < LISTING_LIMIT:
        below = []
        for folder in folders:
            try:
                entries = sorted(folder.iterdir())
            except OSError:
                continue
            for path in entries[:max(LISTING_LIMIT - seen, 0)]:
                seen += 1
                if path.name.startswith(".") or path.is_symlink():
                    continue
                if path.is_dir():
                    below.append(path)
                elif path.is_file():
                    found.append(path.relative_to(root).as_posix())
        folders = below
    return found


def glob_matches(pattern: str, path: str) -> bool:
    """Whether a checkout's `path` matches a `sources` glob: `*`, `?` and `[...]` within one part of the path,
    `**` any number of parts (`src/*.cpp`, `**/model.py`)."""
    def match(patterns: list[str], parts: list[str]) -> bool:
        if not patterns:
            return not parts
        if patterns[0] == "**":
            return any(match(patterns[1:], parts[i:]) for i in range(len(parts) + 1))
        return bool(parts) and fnmatch.fnmatchcase(parts[0], patterns[0]) and match(patterns[1:], parts[1:])
    return match(pattern.split("/"), path.split("/"))


def _entry_words(entry: tuple[str, ...]) -> str:
    """A `sources` entry the checkout lacks, in words: "a.py or b.py", "a file matching src/*.cpp"."""
    return " or ".join(f"a file matching {a}" if is_glob(a) else a for a in entry)


def _kernel_sources(kernel: Kernel, checkout: CheckoutFiles, tree: dict[str, SourceFile], problem: str,
                    provided: list[SourceFile], source_dirs: tuple[str, ...]) -> KernelSources:
    """One kernel's files: the source folders' (an overlay's base among them), its own sources (which must
    exist: each entry's first alternative the checkout has, a glob's every match), then the provided ones."""
    root = checkout.root
    files = {relative: f for relative, f in tree.items() if any(relative.startswith(f"{d}/") for d in source_dirs)}
    if problem:
        return KernelSources(kernel.name, tuple(files.values()), problem)
    missing, links, resolved, header, too_many = [], [], [], "", []
    for entry in kernel.source_entries:
        for alternative in entry:
            if is_glob(alternative):
                matched = sorted({p for p in (*tree, *checkout.listing) if glob_matches(alternative, p)})
                if len(matched) > SOURCE_DIR_FILES:  # each is read whole: bounded like a source folder
                    too_many.append(alternative)
                    break
                if matched:
                    resolved += matched
                    break
            elif alternative in tree or _symbolic_link_in(root, alternative) or (root / alternative).is_file():
                resolved.append(alternative)
                if kernel.header in entry:
                    header = alternative  # the header is this entry: the fork's name for it
                break
        else:
            missing.append(_entry_words(entry))
    for relative in dict.fromkeys(resolved):
        if relative in tree:
            files[relative] = tree[relative]
        elif link := _symbolic_link_in(root, relative):
            links.append(link)  # the file itself, or a folder above it: either could lead to the grader's files
        else:
            files[relative] = SourceFile(relative, (root / relative).read_bytes(), Origin.SUBMISSION)
    problems = ([f"missing file(s) {', '.join(missing)}: the assignment needs them"] if missing else []) + \
               ([f"{', '.join(dict.fromkeys(links))} is a symbolic link; submit the file itself"] if links else []) + \
               [f"{pattern} matches more than {SOURCE_DIR_FILES} files" for pattern in too_many]
    for file in provided:
        files[file.path] = file
    sources = KernelSources(kernel.name, tuple(files.values()), "; ".join(problems),
                            resolved=tuple(dict.fromkeys(resolved)), header=header)
    if kernel.functions and not problems:
        called = sources.called(kernel)
        function, found = defined_function(called, [files[s] for s in called.sources if s in files],
                                           [f for f in files.values() if f.origin is not Origin.PROVIDED])
        sources = replace(sources, function=function, function_found=found, problem="" if function else found)
    return sources


def _beyond_folders(files: tuple[SourceFile, ...], checkout: CheckoutFiles, folders: tuple[str, ...],
                    importable: tuple[str, ...]) -> tuple[SourceFile, ...]:
    """The submission's files outside the build's folders that it may read: those its C files #include (literally;
    every C file where one includes by other means), and those matching the target's `importable` patterns (the
    shallowest first). Bounded like a source folder, none larger than BEYOND_FILE_BYTES."""
    have = {f.path for f in files}
    outside = [p for p in checkout.listing if p not in have and not any(p.startswith(f"{d}/") for d in folders)]
    contents: dict[str, bytes | None] = {}

    def read(relative: str) -> bytes | None:
        if relative not in contents:
            path = checkout.root / relative
            try:
                contents[relative] = path.read_bytes() if path.stat().st_size <= BEYOND_FILE_BYTES else None
            except OSError:
                contents[relative] = None
        return contents[relative]

    c_files = [f.path for f in files if f.path.endswith(C_SUFFIXES)]
    included = included_from({f.path: f.content for f in files}, c_files, outside, read) if c_files else []
    if included is None:
        included = [p for p in outside if p.endswith(C_SUFFIXES)]
    chosen = [(p, Origin.INCLUDED) for p in included]
    taken = set(included)
    chosen += [(p, Origin.IMPORTABLE) for p in outside
               if p not in taken and any(fnmatch.fnmatchcase(p, pattern) for pattern in importable)]
    beyond, total = [], 0
    for relative, origin in chosen:
        content = read(relative)
        if content is None:
            continue
        total += len(content)
        if len(beyond) >= SOURCE_DIR_FILES or total > SOURCE_DIR_BYTES:
            break
        beyond.append(SourceFile(relative, content, origin))
    return tuple(beyond)


_COMMENTS = re.compile(rb"/\*.*?\*/|//[^\n]*", re.S)


def defined_function(kernel: Kernel, own: list[SourceFile], others: list[SourceFile]) -> tuple[str, str]:
    """Which of the kernel's accepted names (`Kernel.functions`, in their order) its files define, and the words
    that say so; ("", why) where none is. The kernel's own sources are read first (its header), then the rest of its
    build's files (a folder's other file that the header includes). A definition is the name, its parameter list and
    a body, outside comments and not a `__global__` kernel: a call, a prototype or a device kernel of that name
    is not the host function."""
    header = next((f for f in own if f.path == kernel.header), own[0] if own else None)
    for file in dict.fromkeys([*own, *others]):
        text = _COMMENTS.sub(b" ", file.content)
        for name in kernel.functions:
            for match in re.finditer(rb"\b" + name.encode() + rb"\s*\([^;{}]*\)\s*\{", text):
                before = text[:match.start()]
                start = max(before.rfind(b";"), before.rfind(b"}"), before.rfind(b"{"), before.rfind(b"\n#"))
                if b"__global__" not in before[start + 1:]:
                    return name, f"{_checkout_path(file)} defines {name}"
    where = _checkout_path(header) if header else kernel.header
    return "", (f"{where} defines none of {', '.join(kernel.functions)} (the names the assignment accepts for its "
                "host function), so there is nothing to call")


def _checkout_path(file: SourceFile) -> str:
    """The file's own path in the checkout: a variant folder's file by its folder's name (kernels_req_5/...)."""
    return file.taken_from or file.path
