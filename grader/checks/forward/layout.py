"""The forward pass's memory and its steps, as the course's program has them.

Activations: one allocation, the course's llm.c-style ActivationTensors in order (float32, per-layer
tensors stacked over L). Parameters: another, its ParameterTensors in order. Each step is one
kernel call given slices of them; a slice's element count is what the kernel's spec allocates for
that buffer (attention's packed QKV may be used as scratch, hence `output`'s width).
"""

from __future__ import annotations

from dataclasses import dataclass

from grader.boundary import protocol
from grader.boundary.protocol import Region, ScalarArgument, SliceArgument
from grader.checks.forward.spec import Forward, output_file
from grader.errors import SpecError
from grader.assignment.model import Kernel
from grader.assignment.shapes import allocation_of, shape_of


@dataclass(frozen=True)
class Tensor:
    """One tensor of an allocation: its shape per layer, how many layers are stacked (0: not per layer), where."""

    name: str
    shape: tuple[int, ...]
    layers: int
    offset: int

    @property
    def size(self) -> int:
        """Elements of one layer's slice (of the whole tensor if not per layer)."""
        size = 1
        for extent in self.shape:
            size *= extent
        return size

    @property
    def total(self) -> int:
        return self.size * max(1, self.layers)

    def at(self, layer: int | None) -> int:
        """The offset of a layer's slice."""
        return self.offset + (layer or 0) * self.size


def _stacked(specs: list[tuple[str, tuple[int, ...], int]]) -> tuple[Tensor, ...]:
    tensors, offset = [], 0
    for name, shape, layers in specs:
        tensors.append(Tensor(name, shape, layers, offset))
        offset += tensors[-1].total
    return tuple(tensors)


def activation_tensors(f: Forward) -> tuple[Tensor, ...]:
    B, T, C, NH, L = f.B, f.T, f.C, f.NH, f.L
    return _stacked([
        ("encoded", (B, T, C), 0), ("ln1", (B, T, C), L), ("ln1_mean", (B, T), L), ("ln1_rstd", (B, T), L),
        ("atty", (B, T, C), L), ("att", (B, NH, T, T), L), ("attproj", (B, T, C), L), ("residual2", (B, T, C), L),
        ("ln2", (B, T, C), L), ("ln2_mean", (B, T), L), ("ln2_rstd", (B, T), L), ("fch", (B, T, 4 * C), L),
        ("fch_gelu", (B, T, 4 * C), L), ("fcproj", (B, T, C), L), ("residual3", (B, T, C), L), ("lnf", (B, T, C), 0),
        ("lnf_mean", (B, T), 0), ("lnf_rstd", (B, T), 0), ("losses", (B, T), 0), ("qkvr", (B, T, 3 * C), L),
        # The qkv matmul's output and attention's input (which it may use as scratch), and finally the logits.
        ("output", (B, T, max(3 * C, NH * T, f.Vp)), 0),
    ])


def parameter_tensors(f: Forward) -> tuple[Tensor, ...]:
    C, L = f.C, f.L
    return _stacked([
        ("wte", (f.Vp, C), 0), ("wpe", (f.maxT, C), 0), ("ln1w", (C,), L), ("ln1b", (C,), L),
        ("qkvw", (3 * C, C), L), ("qkvb", (3 * C,), L), ("attprojw", (C, C), L), ("attprojb", (C,), L),
        ("ln2w", (C,), L), ("ln2b", (C,), L), ("fcw", (4 * C, C), L), ("fcb", (4 * C,), L),
        ("fcprojw", (C, 4 * C), L), ("fcprojb", (C,), L), ("lnfw", (C,), 0), ("lnfb", (C,), 0),
    ])


def total(tensors: tuple[Tensor, ...]) -> int:
    return sum(t.total for t in tensors)


# Activations that a step writes as its graded output (its gold is swapped in); the rest are scratch.
GRADED = ("encoded", "ln1", "atty", "attproj", "residual2", "ln2", "fch", "fch_gelu", "fcproj", "residual3", "lnf")

# Each kernel's parameters as the composition passes them (the course's signatures).
PARAMETERS = {
    "encoder": ("out", "inp", "wte", "wpe", "B", "T", "C"),
    "layernorm": ("out", "mean", "rstd", "inp", "weight", "bias", "B", "T", "C"),
    "matmul": ("out", "inp", "weight", "bias", "B", "T", "C", "OC"),
    "attention": ("out", "qkvr", "att", "inp", "B", "T", "C", "NH"),
    "residual": ("out", "inp1", "inp2", "N"),
    "gelu": ("out", "inp", "N"),
}

# What a step is, in a student's words.
LABELS = {
    "ln1": "first layernorm (ln1)", "qkv": "QKV matmul", "attention": "attention",
    "attproj": "attention-projection matmul", "residual2": "first residual", "ln2": "second layernorm (ln2)",
    "fch": "MLP-up matmul (fc)", "gelu": "GELU", "fcproj": "MLP-down matmul (fcproj)",
    "residual3": "second residual", "encoder": "the encoder", "lnf": "the final layernorm (lnf)",
    "logits": "the vocabulary head's matmul (logits)",
}


@dataclass(frozen=True)
class Step:
    """One kernel call of the forward pass, numbered from 1, with its layer (0-based) if it has one."""

    number: int
    kernel: str
    label: str
    layer: int | None
    plan: protocol.Step  # the call as the harness makes it

    def words(self, steps: int) -> str:
        """"layer 3's attention (step 24 of 123)"."""
        what = LABELS[self.label] if self.layer is None else f"layer {self.layer + 1}'s {LABELS[self.label]}"
        return f"{what} (step {self.number} of {steps})"


# A slice: (allocation, tensor, layer).
_Where = tuple[str, str, "int | None"]


def composition(f: Forward) -> list[tuple[str, str, int | None, dict[str, _Where | None], dict[str, int]]]:
    """The course's order: (kernel, label, layer, pointer parameter -> slice or None for NULL, scalars)."""
    B, T, C, NH, L = f.B, f.T, f.C, f.NH, f.L
    A, P = "activations", "parameters"
    rows: list[tuple[str, str, int | None, dict[str, _Where | None], dict[str, int]]] = [
        ("encoder", "encoder", None, {"out": (A, "encoded", None), "inp": ("tokens", "tokens", None),
                                      "wte": (P, "wte", None), "wpe": (P, "wpe", None)}, {"B": B, "T": T, "C": C})]
    for l in range(L):
        residual = (A, "encoded", None) if l == 0 else (A, "residual3", l - 1)
        rows += [
            ("layernorm", "ln1", l, {"out": (A, "ln1", l), "mean": (A, "ln1_mean", l), "rstd": (A, "ln1_rstd", l),
                                     "inp": residual, "weight": (P, "ln1w", l), "bias": (P, "ln1b", l)},
             {"B": B, "T": T, "C": C}),
            ("matmul", "qkv", l, {"out": (A, "output", None), "inp": (A, "ln1", l), "weight": (P, "qkvw", l),
                                  "bias": (P, "qkvb", l)}, {"B": B, "T": T, "C": C, "OC": 3 * C}),
            ("attention", "attention", l, {"out": (A, "atty", l), "qkvr": (A, "qkvr", l), "att": (A, "att", l),
                                           "inp": (A, "output", None)}, {"B": B, "T": T, "C": C, "NH": NH}),
            ("matmul", "attproj", l, {"out": (A, "attproj", l), "inp": (A, "atty", l), "weight": (P, "attprojw", l),
                                      "bias": (P, "attprojb", l)}, {"B": B, "T": T, "C": C, "OC": C}),
            ("residual", "residual2", l, {"out": (A, "residual2", l), "inp1": residual, "inp2": (A, "attproj", l)},
             {"N": B * T * C}),
            ("layernorm", "ln2", l, {"out": (A, "ln2", l), "mean": (A, "ln2_mean", l), "rstd": (A, "ln2_rstd", l),
                                     "inp": (A, "residual2", l), "weight": (P, "ln2w", l), "bias": (P, "ln2b", l)},
             {"B": B, "T": T, "C": C}),
            ("matmul", "fch", l, {"out": (A, "fch", l), "inp": (A, "ln2", l), "weight": (P, "fcw", l),
                                  "bias": (P, "fcb", l)}, {"B": B, "T": T, "C": C, "OC": 4 * C}),
            ("gelu", "gelu", l, {"out": (A, "fch_gelu", l), "inp": (A, "fch", l)}, {"N": B * T * 4 * C}),
            ("matmul", "fcproj", l, {"out": (A, "fcproj", l), "inp": (A, "fch_gelu", l), "weight": (P, "fcprojw", l),
                                     "bias": (P, "fcprojb", l)}, {"B": B, "T": T, "C": 4 * C, "OC": C}),
            ("residual", "residual3", l, {"out": (A, "residual3", l), "inp1": (A, "residual2", l),
                                          "inp2": (A, "fcproj", l)}, {"N": B * T * C}),
        ]
    rows += [
        ("layernorm", "lnf", None, {"out": (A, "lnf", None), "mean": (A, "lnf_mean", None),
                                    "rstd": (A, "lnf_rstd", None), "inp": (A, "residual3", L - 1),
                                    "weight": (P, "lnfw", None), "bias": (P, "lnfb", None)}, {"B": B, "T": T, "C": C}),
        ("matmul", "logits", None, {"out": (A, "output", None), "inp": (A, "lnf", None), "weight": (P, "wte", None),
                                    "bias": None}, {"B": B, "T": T, "C": C, "OC": f.Vp}),
    ]
    return rows


def composition_problem(kernel: Kernel) -> str | None:
    """Why the composition cannot call this kernel (its parameters are not the course's), or None."""
    expected = PARAMETERS[kernel.name]
    found = tuple(p.name for p in kernel.signature.parameters)
    if found != expected:
        return f"its signature's parameters are ({', '.join(found)}); the forward pass passes ({', '.join(expected)})"
    outputs = [b.name for b in kernel.buffers_with("output")]
    if outputs != ["out"]:
        return f"its outputs are {outputs}; the forward pass grades one, 'out'"
    return None


def steps_of(f: Forward, kernels: dict[str, Kernel], where: str = "[forward]",
             slots: Forward | None = None) -> tuple[Step, ...]:
    """Every step with its slices; `kernels` by base name (a variant's or the base's: their buffers are the same).

    slots: the forward whose layout places the tensors (default `f`'s own): one of more tokens gives a pass over
    f.T tokens the same offsets, each tensor packed at the start of its slot, as the course's program packs a
    (B, T, C) tensor it allocated for fewer tokens (the decode check runs every length in one layout).
    """
    placed = slots or f
    spaces = {"activations": {t.name: t for t in activation_tensors(placed)},
              "parameters": {t.name: t for t in parameter_tensors(placed)},
              "tokens": {"tokens": Tensor("tokens", (placed.B, placed.T), 0, 0)}}
    steps = []
    for number, (name, label, layer, pointers, scalars) in enumerate(composition(f), start=1):
        kernel = kernels[name]
        values = {**scalars, "V": f.Vp, "maxT": f.maxT}  # encoder's table shapes: the padded vocabulary, maxT rows
        arguments: list[ScalarArgument | SliceArgument] = []
        for parameter in kernel.signature.parameters:
            if not parameter.pointer:
                arguments.append(ScalarArgument(parameter.name, parameter.ctype, scalars[parameter.name]))
                continue
            buffer = kernel.buffer(parameter.name)
            slot = pointers[parameter.name]
            if slot is None:
                arguments.append(SliceArgument(buffer.name, buffer.role, buffer.dtype, "activations", 0, 0,
                                               shape_of(buffer, values), null=True))
                continue
            space, tensor_name, tensor_layer = slot
            tensor = spaces[space][tensor_name]
            count = allocation_of(buffer, values)
            if count > tensor.size:
                raise SpecError(f"{where}: step {number} ({name}) gives '{buffer.name}' the slice {tensor_name}, "
                                f"{tensor.size} elements; the kernel's spec allocates {count}")
            arguments.append(SliceArgument(buffer.name, buffer.role, buffer.dtype, space, tensor.at(tensor_layer),
                                           count, shape_of(buffer, values), mutable=buffer.mutable))
        steps.append(Step(number, name, label, layer, protocol.Step(name, tuple(arguments), output_file(number))))
    return tuple(steps)


def regions(f: Forward) -> tuple[Region, ...]:
    """Every activation slice, named for a student ("layer 3's ln2"), for saying where a stray write landed."""
    named = []
    for t in activation_tensors(f):
        for layer in range(t.layers) if t.layers else (None,):
            named.append(Region(t.name if layer is None else f"layer {layer + 1}'s {t.name}", "activations",
                                t.at(layer), t.size, t.name in GRADED))
    return tuple(named)


def logits_offset(f: Forward) -> int:
    return next(t.offset for t in activation_tensors(f) if t.name == "output")
