"""The sandbox backends themselves: what the code inside can see, reach and leave behind."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from grader.errors import GraderError
from grader.sandbox import NOBODY, Limits, Mounts, sandbox_named
from grader.sandbox.docker import docker_client
from grader.sandbox.local import LocalSandbox as NamespaceSandbox
from grader.sandbox.uids import uid_range

from sandbox_fixtures import loopback_listener, backend, docker_ready, sandbox_processes, settled  # noqa: F401  (fixtures)

PROBE = r"""
import os, socket, sys
print("uid", os.getuid())
print("routes", len(open("/proc/net/route").read().splitlines()) - 1)
print("interfaces", sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]))
print("shadow", os.access("/etc/shadow", os.R_OK))
print("root-cache", os.path.exists("/root/.cache"))
s = socket.socket()
s.settimeout(2)
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
    print("loopback connected")
except OSError as error:
    print("loopback", error.errno)
for path in sys.argv[2:]:
    try:
        open(path, "w").write("x")
        print("wrote", path)
    except OSError as error:
        print("refused", path, error.errno)
"""


def run_in(sandbox, code: str, *arguments: str, tmp_path: Path, limits: Limits = Limits(),
           read_only: tuple[Path, ...] = (), timeout: float = 60) -> tuple[int, str, str]:
    writable = tmp_path / "writable"
    writable.mkdir(exist_ok=True)
    process = sandbox.start([sys.executable, "-c", code, *arguments], cwd=writable,
                            mounts=Mounts(read_only=read_only, writable=writable), limits=limits,
                            stdout=tmp_path / "stdout", stderr=tmp_path / "stderr",
                            env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})
    try:
        code = process.wait(timeout)
    finally:
        process.kill()
    return code, (tmp_path / "stdout").read_text(errors="replace"), (tmp_path / "stderr").read_text(errors="replace")


@pytest.fixture
def listener():
    """A TCP server on the host's loopback that records every connection it accepts."""
    with loopback_listener() as listening:
        yield listening


def sandbox_uid(out: str) -> int:
    """The uid the probe printed."""
    return int(next(line for line in out.splitlines() if line.startswith("uid ")).split()[1])


def runs_as_its_own_uid(out: str) -> bool:
    """As root, a uid of the sandbox range (uids.py), never root or nobody."""
    uids = uid_range()
    return uids.first <= sandbox_uid(out) <= uids.last


def test_code_inside_sees_only_loopback_its_mounts_and_runs_as_an_unprivileged_uid(backend: str, tmp_path: Path,
                                                                                  listener) -> None:
    port, accepted = listener
    readonly = tmp_path / "inputs"
    readonly.mkdir()
    (readonly / "Q.npy").write_text("input")
    code, out, err = run_in(sandbox_named(backend), PROBE, str(port), str(readonly / "Q.npy"),
                            str(tmp_path / "writable" / "out.npy"), "/etc/pwned", tmp_path=tmp_path, read_only=(readonly,))
    assert code == 0, err
    if backend == "docker":  # the container's pids limit is its own: it keeps nobody
        assert sandbox_uid(out) == NOBODY
    elif os.geteuid() == 0:
        assert runs_as_its_own_uid(out), out
    assert "routes 0" in out and "interfaces ['lo']" in out
    assert "shadow False" in out and "root-cache False" in out
    assert "loopback connected" not in out and not accepted
    assert f"refused {readonly / 'Q.npy'}" in out and (readonly / "Q.npy").read_text() == "input"
    assert f"wrote {tmp_path / 'writable' / 'out.npy'}" in out
    assert not Path("/etc/pwned").exists()


def test_kill_leaves_no_process_behind(backend: str, tmp_path: Path) -> None:
    sandbox = sandbox_named(backend)
    writable = tmp_path / "w"
    writable.mkdir()
    daemon = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(600)\nprint('parent', flush=True)\ntime.sleep(600)"
    marker = f"kg-test-daemon-{time.time_ns()}"
    process = sandbox.start([sys.executable, "-c", daemon, marker], cwd=writable, mounts=Mounts(writable=writable),
                            limits=Limits(), stdout=tmp_path / "o", stderr=tmp_path / "e", env={"PATH": "/usr/bin:/bin"})
    deadline = time.monotonic() + 30
    while "parent" not in (tmp_path / "o").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None
    process.kill()
    assert process.poll() is not None
    assert settled(lambda: sandbox_processes(marker)) == []  # the daemon sleeps 600 s: killed, or still there


def test_stdout_is_capped_and_the_process_is_not_blocked(backend: str, tmp_path: Path) -> None:
    flood = "import sys\nchunk = b'x' * 65536\nfor _ in range(1024): sys.stdout.buffer.write(chunk)\nprint('done', file=sys.stderr)"
    # Not blocked: it ran to its end ("done") within run_in's wait, which fails a writer stuck on a full pipe.
    code, out, err = run_in(sandbox_named(backend), flood, tmp_path=tmp_path, limits=Limits(log_bytes=4096))
    assert code == 0 and "done" in err
    assert len(out) < 4096 + 200 and "more bytes of output dropped" in out


def test_memory_limit_kills_and_says_so(backend: str, tmp_path: Path) -> None:
    hog = "blocks = []\nwhile True: blocks.append(bytearray(64 << 20))"
    sandbox = sandbox_named(backend)
    writable = tmp_path / "w"
    writable.mkdir()
    process = sandbox.start([sys.executable, "-c", hog], cwd=writable, mounts=Mounts(writable=writable),
                            limits=Limits(memory_limit_bytes=256 << 20), stdout=tmp_path / "o", stderr=tmp_path / "e",
                            env={"PATH": "/usr/bin:/bin"})
    try:
        code = process.wait(60)
        hit = process.limit_hit()  # type: ignore[attr-defined]
    finally:
        process.kill()
    assert code != 0
    assert hit == "exceeded the memory limit (256 MiB)" or "MemoryError" in (tmp_path / "e").read_text()


def test_namespace_sandbox_says_what_it_enforced() -> None:
    enforced = NamespaceSandbox().enforced()
    assert any("network namespace" in e for e in enforced)
    if os.geteuid() == 0:
        assert any(e.startswith(f"runs as a uid of its own from {uid_range()}") for e in enforced), enforced
    from grader.sandbox.cgroups import Cgroup

    probe = Cgroup.create(Limits())
    if probe is None:  # not root, or no writable hierarchy: the result must say the limits are weaker
        assert any("no cgroup" in e for e in enforced)
        return
    probe.remove()
    # Where a cgroup can be made (root, as on this project's CI: cgroup v1), the limits are real, and the result says so.
    assert any(e.startswith(f"memory 8192 MiB (cgroup v{probe.version}") for e in enforced)
    assert f"processes/threads 512 (cgroup v{probe.version} pids.max; also RLIMIT_NPROC of a uid of its own from " \
           f"{uid_range()}, this sandbox's own; the run is ended at the limit)" in enforced


@pytest.mark.parametrize("launcher", ["bwrap", "unshare"])
def test_only_the_python_packages_the_caller_names_are_importable(launcher: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`Mounts.python_packages`: a package outside the interpreter's prefix is mounted only when the caller names it."""
    sandbox = NamespaceSandbox()
    if launcher == "bwrap" and sandbox.bwrap is None:
        pytest.skip("bubblewrap is not installed (bash ci/setup/sandbox.sh)")
    if launcher == "unshare":
        if not sandbox._can_unshare():
            pytest.skip("the unshare fallback needs root, setpriv and util-linux unshare")
        sandbox.bwrap = None
    site = tmp_path / "site"
    (site / "kg_probe_package").mkdir(parents=True)
    (site / "kg_probe_package" / "__init__.py").write_text("")
    for folder in (tmp_path, site, site / "kg_probe_package"):
        folder.chmod(0o755)  # the sandbox's uid reads it inside
    monkeypatch.syspath_prepend(str(site))  # where the grader's own import of it would find it
    probe = "try:\n    import kg_probe_package\n    print('imported')\nexcept ImportError:\n    print('missing')"
    seen = {}
    for packages in ((), ("numpy", "kg_probe_package")):
        writable = tmp_path / f"w{len(packages)}"
        writable.mkdir()
        process = sandbox.start([sys.executable, "-c", probe], cwd=writable,
                                mounts=Mounts(writable=writable, python_packages=packages), limits=Limits(),
                                stdout=tmp_path / "o", stderr=tmp_path / "e",
                                env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)})
        try:
            assert process.wait(60) == 0, (tmp_path / "e").read_text()
        finally:
            process.kill()
        seen[packages] = (tmp_path / "o").read_text().strip()
    assert seen == {(): "missing", ("numpy", "kg_probe_package"): "imported"}


def test_gpu_devices_are_passed_through_when_asked(tmp_path: Path) -> None:
    """Without a GPU here, the arguments are what can be checked: /dev/nvidia* and /sys go in, only on request."""
    sandbox = NamespaceSandbox()
    plain = sandbox._bwrap_arguments(tmp_path, Mounts())
    gpu = sandbox._bwrap_arguments(tmp_path, Mounts(gpu=True))
    assert "/sys" not in plain and "/sys" in gpu
    assert "--unshare-net" in gpu and "--unshare-pid" in gpu


def test_without_bubblewrap_root_gets_the_same_isolation_from_unshare(tmp_path: Path, listener) -> None:
    """The GPU runner may lack bwrap: util-linux unshare and grader/sandbox/mountns.py build the same sandbox."""
    sandbox = NamespaceSandbox()
    if not sandbox.as_root:
        pytest.skip("the unshare fallback needs root")
    sandbox.bwrap = None
    port, accepted = listener
    readonly = tmp_path / "inputs"
    readonly.mkdir()
    (readonly / "Q.npy").write_text("input")
    code, out, err = run_in(sandbox, PROBE, str(port), str(readonly / "Q.npy"), str(tmp_path / "writable" / "out.npy"),
                            tmp_path=tmp_path, read_only=(readonly,))
    assert code == 0, err
    assert runs_as_its_own_uid(out) and "routes 0" in out and "shadow False" in out and "root-cache False" in out
    assert "loopback 111" in out and not accepted
    assert f"refused {readonly / 'Q.npy'}" in out and f"wrote {tmp_path / 'writable' / 'out.npy'}" in out


_ORIGINAL_WHICH = shutil.which


def test_whole_pipeline_grades_through_the_unshare_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without bwrap (as on the GPU runner) the run's plan under /tmp must still be visible inside."""
    from grader.options import Options
    from grader.pipeline import grade
    from grader.assignment import load_assignment

    if not NamespaceSandbox()._can_unshare():
        pytest.skip("the unshare fallback needs root, setpriv and util-linux unshare")
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "bwrap" else _ORIGINAL_WHICH(name))
    assert NamespaceSandbox().bwrap is None
    flash = load_assignment("flash-attention-cpu")
    result = grade(flash.reference_dir, flash, Options(cache_dir=tmp_path / "cache"))
    assert result.score == result.max_score, [k.message for k in result.kernels]


def test_docker_gpu_request_without_the_nvidia_runtime_says_so(tmp_path: Path, docker_ready: None) -> None:
    """The GPU device request really reaches the daemon; one without the NVIDIA runtime refuses it, in words."""
    if shutil.which("nvidia-container-runtime") or shutil.which("nvidia-ctk"):
        pytest.skip("this daemon may have the NVIDIA runtime: the GPU tests cover it")
    writable = tmp_path / "w"
    writable.mkdir()
    ours = {"label": "kernel-grader=sandbox"}
    before = {c.id for c in docker_client().containers.list(all=True, filters=ours)}
    with pytest.raises(GraderError, match=r"cannot give this container a GPU: .*NVIDIA container runtime.*"
                                          r"--sandbox local; Docker said: .*gpu"):
        sandbox_named("docker").start(["python3", "-c", "pass"], cwd=writable, mounts=Mounts(writable=writable, gpu=True),
                                      limits=Limits(), stdout=tmp_path / "o", stderr=tmp_path / "e", env={})
    assert {c.id for c in docker_client().containers.list(all=True, filters=ours)} <= before  # the refused one is removed


def test_the_process_backend_as_root_runs_as_its_own_uid_and_cannot_read_the_gold_or_the_secret(
        tmp_path: Path) -> None:
    """No namespaces: the code still leaves root, and what the grader keeps root's alone stays unreadable."""
    from grader.cache import gold_root

    if os.geteuid() != 0:
        pytest.skip("the process backend leaves the grader's user only as root")
    gold = gold_root(tmp_path / "cache") / "entry"
    gold.mkdir(mode=0o755)
    (gold / "out.npy").write_text("gold")
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t")
    secret.chmod(0o600)
    readonly = tmp_path / "inputs"
    readonly.mkdir()
    (readonly / "Q.npy").write_text("input")
    probe = ("import os, sys\nprint('uid', os.getuid())\nfor path in sys.argv[1:]:\n    try:\n"
             "        print('read', path, open(path).read())\n    except OSError as error:\n"
             "        print('refused', path, error.errno)")
    sandbox = sandbox_named("process")
    code, out, err = run_in(sandbox, probe, str(gold / "out.npy"), str(secret), str(readonly / "Q.npy"),
                            tmp_path=tmp_path, read_only=(readonly,))
    assert code == 0, err
    assert runs_as_its_own_uid(out), out
    assert f"refused {gold / 'out.npy'} 13" in out and f"refused {secret} 13" in out
    assert f"read {readonly / 'Q.npy'} input" in out
    assert any(e.startswith(f"runs as uid {sandbox_uid(out)} ") for e in sandbox.enforced())
    assert "network: not isolated" in sandbox.enforced()


def test_with_the_gpu_the_sandbox_sees_sys_but_not_the_runner_s_interfaces(tmp_path: Path) -> None:
    """/sys goes in for the GPU (read-only), /sys/class/net under an empty tmpfs: the namespace has only lo."""
    sandbox = NamespaceSandbox()
    if sandbox._launcher() is None:
        pytest.skip("the local sandbox needs bubblewrap, or root with util-linux unshare")
    writable = tmp_path / "writable"
    writable.mkdir()
    probe = "import os\nprint(sorted(os.listdir('/sys/class'))[:3], os.listdir('/sys/class/net'))"
    process = sandbox.start([sys.executable, "-c", probe], cwd=writable, mounts=Mounts(writable=writable, gpu=True),
                            limits=Limits(), stdout=tmp_path / "o", stderr=tmp_path / "e",
                            env={"PATH": "/usr/bin:/bin"})
    try:
        assert process.wait(60) == 0, (tmp_path / "e").read_text()
    finally:
        process.kill()
    classes, interfaces = (tmp_path / "o").read_text().rsplit("] ", 1)
    assert classes != "[" and interfaces.strip() == "[]", (tmp_path / "o").read_text()
    assert os.listdir("/sys/class/net")  # the runner has interfaces: they are hidden, not absent
