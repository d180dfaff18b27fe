"""The floor a grader can't beat, beside the grader's own time, and their ratio (issue 13, goal c).

    python benchmarks/floor.py [--assignment gpt2-m1] [--submission PATH] [--repeat N] [--json OUT]

- floor compile: every kernel of the submission compiled at once, one compiler process per kernel,
  with exactly the command the grader's build runs (the target's flags, the generated kg_call shim,
  the assignment's libraries), no sandbox, no cache; wall time from the first start to the last end.
- floor run: one plain Python process, launched and timed from outside (interpreter, NumPy, the
  CUDA context included), that loads each kernel's library and calls it once on its smallest
  case: buffers allocated and filled on the host, copied over in one transfer each; no sandbox,
  no margins or poison, no compare. The inputs are made beforehand (they are files, as in the
  grader; the course's own test draws random ones in its process). On a GPU it runs twice: with
  CuPy's buffers (what a plain script would use) and with the driver's (the grader's harness's
  way, grader.boundary.cuda_device); the floor is the faster of the two, and both are reported.
- grader: `grader grade` (the CLI in a subprocess, every case, sanitizer on as `grade` has it), the
  same with `--no-sanitizer`, and `grader check` (public cases); each after one untimed run that
  warms the caches (builds, inputs, gold), then the median wall time of N runs, with the median of
  each stage the result reports (`stages`).
The ratios are each grader figure over the floor's total (compile + run): absolute times move
between machines, the ratio less. Without a GPU (a CUDA assignment), only the compile floor is measured.
A python assignment's floor: its "compile" is the build's byte-compile, and its run one plain process that
imports each kernel's module from the submission's root and calls it once, on NumPy arrays of the spec's shapes.

Default submission: the assignment's reference as `grader.samples.compose` lays it out.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
SECRET = "floor-benchmark"  # a fixed secret seed: `grade` mixes one in as an instructor's would


def call_once(plan_file: Path) -> None:
    """The floor's run (this process, started by `floor_run`): load each library, call its kernel once."""
    import ctypes

    import numpy as np

    plan = json.loads(plan_file.read_text())
    if plan["device"] == "driver":
        sys.path.insert(0, str(REPOSITORY_ROOT))
        from grader.boundary.cuda_device import CudaDevice

        device = CudaDevice()

        def upload(host):
            allocation = device.allocate(host.size, host.dtype)
            device.write(allocation, 0, host)
            return allocation, allocation.address
    elif plan["device"] == "cupy":
        import cupy

        cupy.cuda.Device(0).use()
        cupy.cuda.runtime.free(cupy.cuda.runtime.malloc(1))  # the CUDA context, made now

        def upload(host):
            buffer = cupy.empty(host.shape, dtype=host.dtype)
            buffer.set(host)  # one memcpy: no CuPy kernel to JIT-compile
            return buffer, buffer.data.ptr
    else:
        def upload(host):
            return host, host.ctypes.data
    ready = time.perf_counter()
    calls = []
    if plan.get("python_root"):  # the python target: one plain import of each kernel's module, one call
        return _call_python_once(plan, ready)
    for kernel in plan["kernels"]:
        library = ctypes.CDLL(kernel["library"])
        create = getattr(library, "cublasCreate_v2", None)  # as the course's main does, for a kernel using cuBLAS
        if create is not None:
            try:
                handle = ctypes.c_void_p.in_dll(library, "cublas_handle")
            except ValueError:
                handle = None
            if handle is not None and not handle.value:
                create.argtypes, create.restype = [ctypes.POINTER(ctypes.c_void_p)], ctypes.c_int
                create(ctypes.byref(handle))
        values, types, held = [], [], []
        for argument in kernel["arguments"]:
            if "ctype" in argument:
                ctype = getattr(ctypes, f"c_{argument['ctype']}")
                types.append(ctype)
                values.append(ctype(argument["value"]))
            elif argument["null"]:
                types.append(ctypes.c_void_p)
                values.append(None)
            else:
                host = np.zeros(argument["elements"], dtype=argument["dtype"])
                if argument["input"]:
                    data = np.load(argument["input"]).ravel()
                    host[:data.size] = data
                buffer, address = upload(host)
                held.append(buffer)
                types.append(ctypes.c_void_p)
                values.append(ctypes.c_void_p(address))
        function = library.kg_call
        function.restype = ctypes.c_int
        function.argtypes = [*types, ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double), ctypes.c_char_p,
                             ctypes.c_int]
        wall_ms, device_ms, error = ctypes.c_double(-1), ctypes.c_double(-1), ctypes.create_string_buffer(1024)
        status = function(*values, ctypes.byref(wall_ms), ctypes.byref(device_ms), error, 1024)
        calls.append({"kernel": kernel["name"], "case": kernel["case"], "status": status,
                      "error": error.value.decode(errors="replace"), "kernel_ms": round(wall_ms.value, 3)})
        del held
    print(json.dumps({"buffers": plan["device"], "calls_s": round(time.perf_counter() - ready, 3), "calls": calls}))


def _call_python_once(plan: dict, ready: float) -> None:
    """The python target's floor: `import kernels.axpy; axpy(...)` from the submission's root, NumPy arrays of
    the spec's shapes, no zip archive, import guard, poison or margins."""
    import importlib

    import numpy as np

    sys.path.insert(0, plan["python_root"])
    calls = []
    for kernel in plan["kernels"]:
        values = []
        for argument in kernel["arguments"]:
            if "ctype" in argument:
                values.append(argument["value"])
            elif argument["null"]:
                values.append(None)
            else:
                host = np.zeros(argument["shape"], dtype=argument["dtype"])
                if argument["input"]:
                    host[...] = np.load(argument["input"]).reshape(argument["shape"])
                values.append(host)
        function = getattr(importlib.import_module(kernel["module"]), kernel["function"])
        function(*values)
        calls.append({"kernel": kernel["name"], "case": kernel["case"], "status": 0, "error": ""})
    print(json.dumps({"buffers": plan["device"], "calls_s": round(time.perf_counter() - ready, 3), "calls": calls}))


def floor_compile(assignment, root: Path, work: Path) -> tuple[float, dict[str, Path], list[str]]:
    """Compile every kernel at once with the grader's own commands; (wall seconds, libraries, failures)."""
    from grader.build import library_flags, toolchain_for
    from grader.sources import gather_sources
    from grader.targets import LIBRARY_FILE, target_of

    target = target_of(assignment)
    toolchain = toolchain_for(assignment.target)  # probed before the clock starts, as a warm grader has it
    flags = library_flags(assignment.libraries, toolchain)
    sources = gather_sources(assignment, root, assignment.kernels)
    commands = {}
    for kernel in assignment.kernels:
        folder = work / kernel.name
        kernel_sources = sources.of(kernel.name)
        if kernel_sources.problem:
            raise SystemExit(f"{root}: {kernel_sources.problem}")
        for relative, content in kernel_sources.contents.items():
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            (folder / relative).write_bytes(content)
        (folder / target.shim_file).write_text(target.shim_source(kernel))
        commands[kernel.name] = (folder, target.compile_command(assignment, kernel, toolchain, flags))
    started = time.perf_counter()
    processes = {name: subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
                 for name, (folder, command) in commands.items()}
    outputs = {name: process.communicate()[0] for name, process in processes.items()}
    seconds = time.perf_counter() - started
    failures = [f"{name}: {outputs[name].decode(errors='replace')[-600:]}" for name, process in processes.items()
                if process.returncode != 0 or not (commands[name][0] / LIBRARY_FILE).is_file()]
    return seconds, {name: folder / LIBRARY_FILE for name, (folder, _) in commands.items()}, failures


def floor_run(assignment, libraries: dict[str, Path], work: Path, buffers: str,
              submission: Path | None = None) -> tuple[float, dict]:
    """One plain process calling each kernel once on its smallest case, its buffers `buffers`' ("cupy",
    "driver" or "numpy"); (seconds from launch to exit, its report)."""
    from grader.boundary.protocol import ScalarArgument
    from grader.cases import Seed, prepare_inputs
    from grader.runner.plan import Call, planned
    from grader.assignment import allocation_of
    from grader.targets.python import module_name

    python = assignment.target == "python"
    kernels = []
    for kernel in assignment.kernels:
        case = min(kernel.cases, key=lambda c: sum(allocation_of(b, c.params) for b in kernel.buffers))
        inputs = prepare_inputs(assignment, kernel, case, Seed(assignment.public_seed), work / "cache")
        call = planned(Call(kernel, case, libraries[kernel.name], inputs, work / "out"), work / "out")
        arguments = []
        for argument in call.arguments:
            if isinstance(argument, ScalarArgument):
                arguments.append({"ctype": argument.ctype, "value": argument.value})
            else:
                arguments.append({"dtype": argument.dtype, "elements": argument.allocate, "null": argument.null,
                                  "shape": list(argument.shape),
                                  "input": str(inputs / f"{argument.name}.npy") if argument.role == "input" else None})
        kernels.append({"name": kernel.name, "case": case.name, "library": str(libraries[kernel.name]),
                        "module": module_name(kernel.header) if python else None,
                        "function": kernel.signature.function if python else None, "arguments": arguments})
    plan = work / "floor-plan.json"
    plan.write_text(json.dumps({"device": buffers, "kernels": kernels,
                                "python_root": str(submission) if python else None}))
    started = time.perf_counter()
    completed = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--call", str(plan)],
                               capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if completed.returncode != 0:
        raise SystemExit(f"the floor's run failed:\n{completed.stderr[-2000:]}")
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    bad = [c for c in report["calls"] if c["status"] != 0]
    if bad:
        raise SystemExit(f"the floor's run: kernels failed: {bad}")
    return seconds, report


def time_grader(command: list[str], label: str, repeat: int, work: Path) -> dict:
    """One untimed warm-up, then `repeat` timed runs of a grader CLI command; the medians."""
    env = {**os.environ, "KERNEL_GRADER_SECRET": SECRET, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPOSITORY_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    walls: list[float] = []
    stages: list[dict[str, float]] = []
    for attempt in range(repeat + 1):
        result_file = work / f"{label.replace(' ', '_')}-{attempt}.json"
        started = time.perf_counter()
        completed = subprocess.run([sys.executable, "-m", "grader", *command, "--json", str(result_file)], env=env,
                                   capture_output=True, text=True)
        wall = time.perf_counter() - started
        if not result_file.is_file():  # `check` exits 1 on a failed case: only a missing result is trouble
            raise SystemExit(f"{label} wrote no result (exit {completed.returncode}):\n{completed.stdout[-1500:]}"
                             f"{completed.stderr[-1500:]}")
        result = json.loads(result_file.read_text())
        print(f"  {label} {'warm-up' if attempt == 0 else f'run {attempt}'}: {wall:.2f} s, score "
              f"{result['score']:g}/{result['max_score']:g} ({_stages_text(result['stages'])})", flush=True)
        if attempt:
            walls.append(wall)
            stages.append(result["stages"])
    names = list(dict.fromkeys(name for s in stages for name in s))
    return {"label": label, "command": ["grader", *command], "runs_s": [round(w, 3) for w in walls],
            "median_s": round(statistics.median(walls), 3),
            "stages_median": {name: round(statistics.median(s.get(name, 0.0) for s in stages), 3) for name in names}}


def _stages_text(stages: dict[str, float]) -> str:
    return ", ".join(f"{name} {seconds:.2f}" for name, seconds in stages.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assignment", default="gpt2-m1")
    parser.add_argument("--submission", type=Path, default=None,
                        help="a submission folder (default: the assignment's reference, composed)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each grader command (default 3)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    arguments = parser.parse_args()
    sys.path.insert(0, str(REPOSITORY_ROOT))
    from grader.device import unavailable_reason
    from grader.samples import compose
    from grader.assignment import load_assignment
    from grader.targets import target_of

    assignment = load_assignment(arguments.assignment)
    with tempfile.TemporaryDirectory(prefix="kg-floor-") as scratch:
        work = Path(scratch)
        submission = arguments.submission or compose(assignment, None, work / "submission")
        no_device = unavailable_reason(assignment.target, assignment.python_packages)
        compile_s, libraries, failures = floor_compile(assignment, submission, work / "floor")
        if failures:
            raise SystemExit("the floor's compile failed:\n" + "\n".join(failures))
        figures: dict = {"assignment": assignment.name, "submission": str(arguments.submission or "reference"),
                         "kernels": len(assignment.kernels), "cores": os.cpu_count(), "target": assignment.target,
                         "floor_compile_s": round(compile_s, 3)}
        print(f"floor compile: {compile_s:.2f} s ({len(libraries)} kernels at once)", flush=True)
        from grader.runner.bytecode import lacks_bytecode
        # Where NumPy keeps no bytecode beside its sources, harnesses read it from the grader's cache instead.
        figures["harness_bytecode_folder"] = lacks_bytecode()
        print("harness imports' bytecode: " + ("from the grader's cache (NumPy keeps none beside its sources)"
                                               if figures["harness_bytecode_folder"] else "beside the sources"))
        if no_device:
            figures["no_device"] = no_device
            print(f"no GPU: compile only ({no_device})")
            _print_table(figures, [])
        else:
            # A python pack's buffers are NumPy arrays wherever its kernels run (a CuPy pack's adapter copies them).
            ways = ("driver", "cupy") if target_of(assignment).needs_gpu and assignment.target != "python" \
                else ("numpy",)
            runs = {}
            for way in ways:
                if way == "cupy" and importlib.util.find_spec("cupy") is None:
                    continue
                runs[way] = floor_run(assignment, libraries, work / "floor", way, submission)
                print(f"floor run ({way} buffers): {runs[way][0]:.2f} s (of which the calls "
                      f"{runs[way][1]['calls_s']:.3f} s)", flush=True)
            way = min(runs, key=lambda w: runs[w][0])
            run_s, report = runs[way]
            figures.update(floor_run_s=round(run_s, 3), floor_calls_s=report["calls_s"], floor_calls=report["calls"],
                           floor_buffers=way, floor_total_s=round(compile_s + run_s, 3),
                           floor_run_by_buffers_s={w: round(r[0], 3) for w, r in runs.items()})
            cache = ["--cache-dir", str(work / "cache")]
            target = [str(submission), "-a", assignment.name, *cache]
            rows = [time_grader(["grade", *target], "grade", arguments.repeat, work),
                    time_grader(["grade", *target, "--no-sanitizer"], "grade --no-sanitizer", arguments.repeat, work),
                    time_grader(["check", *target], "check", arguments.repeat, work)]
            for row in rows:
                row["over_floor"] = round(row["median_s"] / figures["floor_total_s"], 2)
            figures["grader"] = rows
            _print_table(figures, rows)
        if arguments.json:
            arguments.json.write_text(json.dumps(figures, indent=1) + "\n")


def _print_table(figures: dict, rows: list[dict]) -> None:
    total = figures.get("floor_total_s")
    print(f"\n{figures['assignment']}, {figures['kernels']} kernels, {figures['cores']} cores")
    print("| what | seconds | over the floor's total | stages (median) |")
    print("|---|---|---|---|")
    print(f"| floor compile ({figures['kernels']} kernels at once) | {figures['floor_compile_s']:.2f} | | |")
    if total is None:
        print(f"| floor run | not measured: {figures.get('no_device', '')} | | |")
        return
    where = {"cupy": "CuPy and a CUDA context", "driver": "the driver's buffers and a CUDA context",
             "numpy": "NumPy buffers" if figures["target"] != "python" else "`import` and a call, NumPy arrays"
             }[figures["floor_buffers"]]
    others = ", ".join(f"{w}: {s:.2f} s" for w, s in figures["floor_run_by_buffers_s"].items()
                       if w != figures["floor_buffers"])
    print(f"| floor run (one process: {where}, one call each) | {figures['floor_run_s']:.2f} | "
          f"| {('the others: ' + others) if others else ''} |")
    print(f"| floor total | {total:.2f} | 1.00 | |")
    for row in rows:
        print(f"| `grader {row['label']}` (median of {len(row['runs_s'])}) | {row['median_s']:.2f} | "
              f"{row['over_floor']:.2f} | {_stages_text(row['stages_median'])} |")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--call":
        call_once(Path(sys.argv[2]))
    else:
        main()
