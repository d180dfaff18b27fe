"""The sandbox's bounds where no cgroup can be made (forced here by KERNEL_GRADER_NO_CGROUPS=1).

Host memory (the RSS watchdog and RLIMIT_DATA), the private tmpfs mounts, the one writable folder
and the record of what a start applied, on real processes through both launchers of the local
backend (bubblewrap, and util-linux unshare as root). Every hog here is bounded: a sandbox that
fails to stop it costs the machine at most what the test names.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import shutil
import sys
import time
from pathlib import Path

import pytest

from grader.sandbox import Limits, Mounts, sandbox_named, size_in_words
from grader.sandbox.cgroups import NO_CGROUPS, Cgroup
from grader.sandbox.host import data_limit
from grader.sandbox.local import LocalSandbox as NamespaceSandbox
from grader.samples import variants
from grader.assignment import Assignment, load_assignment

from conftest import grade_variant, with_time_limit
from sandbox_fixtures import docker_ready  # noqa: F401  (fixture)

ATTACKS = {v.name: v for v in variants(load_assignment("flash-attention-cpu")) if v.name.startswith("attack-")}
_WHICH = shutil.which


@pytest.fixture
def no_cgroups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NO_CGROUPS, "1")


@pytest.fixture(params=["bwrap", "unshare"])
def launcher(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The local backend through bubblewrap, then through the unshare fallback (as on the GPU runner)."""
    if request.param == "bwrap" and _WHICH("bwrap") is None:
        pytest.skip("bubblewrap is not installed (bash ci/setup/sandbox.sh)")
    if request.param == "unshare":
        if not NamespaceSandbox()._can_unshare():
            pytest.skip("the unshare fallback needs root, setpriv and util-linux unshare")
        monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "bwrap" else _WHICH(name, *a, **k))
    return request.param


def start(sandbox, code: str, tmp_path: Path, limits: Limits, gpu: bool = False):
    writable = tmp_path / "w"
    writable.mkdir(exist_ok=True)
    return sandbox.start([sys.executable, "-c", code], cwd=writable, mounts=Mounts(writable=writable, gpu=gpu),
                         limits=limits, stdout=tmp_path / "o", stderr=tmp_path / "e",
                         env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})


def run(sandbox, code: str, tmp_path: Path, limits: Limits, timeout: float = 20) -> tuple[int, str | None, str, float]:
    """(exit status, limit_hit, stdout + stderr, seconds) of `code` run to its end or its kill.

    The programs hold (sleep 30 s) past their work: one that no limit ends outlives `timeout`, and the wait
    fails the test. No bound in seconds besides: that would measure the machine's load."""
    started = time.monotonic()
    process = start(sandbox, code, tmp_path, limits)
    try:
        code_ = process.wait(timeout)
        hit = process.limit_hit()
    finally:
        process.kill()
    output = (tmp_path / "o").read_text(errors="replace") + (tmp_path / "e").read_text(errors="replace")
    return code_, hit, output, time.monotonic() - started


def grade_attack(name: str, flash: Assignment, tmp_path: Path, cache_dir: Path):
    """The attack graded with 30 s per call: none of these is meant to meet its time limit, and on a loaded
    machine one could reach 3 s before the limit under test ends it; one that no limit ends times out, and
    fails its expected status."""
    started = time.monotonic()
    result = grade_variant(with_time_limit(flash, 30.0), ATTACKS[name], tmp_path, cache_dir, sandbox="local")
    by_name = {k.name: k for k in result.kernels}
    attacked = by_name[ATTACKS[name].kernel]
    assert attacked.status == ATTACKS[name].expect, attacked.message
    other = by_name["flash_attention"]
    assert other.status == "passed" and other.score == other.max_score, other.message
    return attacked, time.monotonic() - started


def test_the_variable_forces_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = Cgroup.create(Limits())
    if probe is None:
        pytest.skip("no writable cgroups here: the fallback is the only path anyway")
    probe.remove()
    monkeypatch.setenv(NO_CGROUPS, "1")
    assert Cgroup.create(Limits()) is None
    assert any("no cgroup" in line for line in NamespaceSandbox().enforced())


def test_host_memory_hog_is_stopped_without_cgroups(launcher: str, no_cgroups: None, flash: Assignment,
                                                    tmp_path: Path, cache_dir: Path) -> None:
    """8 GiB touched in 64 MiB blocks against 1 GiB: killed with the limit named; the other kernel keeps its points."""
    attacked, seconds = grade_attack("attack-host-memory-hog", dataclasses.replace(flash, memory_limit_mb=1024),
                                     tmp_path, cache_dir)
    assert "killed by signal SIGKILL" in attacked.message
    assert "exceeded the memory limit (1 GiB)" in attacked.message
    assert "case 'one-row'" in attacked.message or attacked.cases[0].status == "crashed"


def test_a_forked_tree_is_bounded_by_its_sum(launcher: str, no_cgroups: None, tmp_path: Path) -> None:
    """Four processes of 320 MiB each: none alone over 1 GiB (nor its RLIMIT_DATA), together they are."""
    hog = ("import os, time\nfor _ in range(3):\n    if os.fork() == 0:\n        break\n"
           "block = bytearray(320 << 20)\nprint('holding', flush=True)\ntime.sleep(30)")
    code, hit, output, seconds = run(NamespaceSandbox(), hog, tmp_path, Limits(memory_limit_bytes=1 << 30))
    assert hit == "exceeded the memory limit (1 GiB)", output
    assert code == -9


def test_pages_shared_after_a_fork_count_once(launcher: str, no_cgroups: None, tmp_path: Path) -> None:
    """700 MiB touched, then three children that only read it: 2.8 GiB of summed RSS, 700 MiB of memory."""
    shared = ("import os, time\nblock = bytearray(700 << 20)\nchildren = []\nfor _ in range(3):\n"
              "    pid = os.fork()\n    if pid == 0:\n        time.sleep(1.5)\n        os._exit(0)\n"
              "    children.append(pid)\n"
              "for pid in children:\n    os.waitpid(pid, 0)\nprint('all done', flush=True)")
    code, hit, output, _ = run(NamespaceSandbox(), shared, tmp_path, Limits(memory_limit_bytes=1 << 30))
    assert (code, hit) == (0, None), output
    assert "all done" in output


def test_memory_in_a_memfd_counts(launcher: str, no_cgroups: None, tmp_path: Path) -> None:
    """768 MiB written into an unmapped memfd: in no process's RSS nor RLIMIT_DATA; the watchdog reads the fd."""
    hog = ("import os, time\nfd = os.memfd_create('hoard')\nchunk = b'x' * (16 << 20)\n"
           "for _ in range(48):\n    os.write(fd, chunk)\nprint('written', flush=True)\ntime.sleep(30)")
    code, hit, output, seconds = run(NamespaceSandbox(), hog, tmp_path, Limits(memory_limit_bytes=512 << 20))
    assert hit == "exceeded the memory limit (512 MiB)", output


def test_rlimit_data_is_applied_by_default_and_recorded(no_cgroups: None, tmp_path: Path) -> None:
    """The record says what the child really has: RLIMIT_DATA for CPU and CUDA targets, unless turned off."""
    probe = "import resource; print('data', resource.getrlimit(resource.RLIMIT_DATA)[0], flush=True)"
    limits = Limits(memory_limit_bytes=1 << 30)
    for gpu, option, expected in ((False, True, data_limit(limits)), (True, True, data_limit(limits)),
                                  (True, False, resource.RLIM_INFINITY), (False, False, resource.RLIM_INFINITY)):
        sandbox = sandbox_named("process")
        process = start(sandbox, probe, tmp_path, dataclasses.replace(limits, rlimit_data=option), gpu=gpu)
        try:
            assert process.wait(20) == 0
        finally:
            process.kill()
        assert f"data {expected}" in (tmp_path / "o").read_text(), (gpu, option)
        memory = next(line for line in process.applied if line.startswith("memory"))
        assert ("RLIMIT_DATA 1280 MiB" in memory) == (expected != resource.RLIM_INFINITY), memory
        assert memory.startswith("memory 1024 MiB (RSS watchdog every 20 ms")
        assert sandbox.enforced() == list(process.applied)


def test_the_record_is_what_the_last_start_applied(launcher: str, no_cgroups: None, tmp_path: Path) -> None:
    sandbox = NamespaceSandbox()
    limits = Limits(memory_limit_bytes=1 << 30, processes=64, tmp_bytes=64 << 20, tmp_inodes=500, output_files=300)
    probe = "import os; os.system('df -k /tmp /dev/shm')"
    process = start(sandbox, probe, tmp_path, limits)
    try:
        assert process.wait(20) == 0
    finally:
        process.kill()
    applied = sandbox.enforced()
    assert applied == list(process.applied)
    assert "memory 1024 MiB (RSS watchdog every 20 ms + RLIMIT_DATA 1280 MiB; no cgroup)" in applied
    assert any(line.startswith("private /tmp, /dev/shm: tmpfs 64 MiB, 500 inodes each") for line in applied)
    assert "output folder 2048 MiB, 300 files (watchdog every 100 ms)" in applied
    if os.geteuid() == 0:
        uid = int(next(line for line in applied if line.startswith("runs as uid ")).split()[3])
        assert f"processes/threads 64 (RLIMIT_NPROC of uid {uid}, this sandbox's own; watchdog as a second line)" \
            in applied
    # Bubblewrap's --size (or mount's size=) really is the one recorded: 64 MiB = 65536 KiB, each.
    sizes = [line.split()[1] for line in (tmp_path / "o").read_text().splitlines()[1:]]
    assert sizes == ["65536", "65536"]


def test_the_record_names_the_cgroup_where_there_is_one(tmp_path: Path) -> None:
    probe = Cgroup.create(Limits())
    if probe is None:
        pytest.skip("no writable cgroups here")
    probe.remove()
    sandbox = NamespaceSandbox()
    process = start(sandbox, "pass", tmp_path, Limits(memory_limit_bytes=1 << 30, processes=64))
    try:
        process.wait(20)
    finally:
        process.kill()
    version = probe.version
    assert any(line.startswith(f"memory 1024 MiB (cgroup v{version}") for line in sandbox.enforced())
    assert any(line.startswith(f"processes/threads 64 (cgroup v{version} pids.max") for line in sandbox.enforced())


def test_docker_records_the_limits_it_passed(tmp_path: Path, docker_ready: None) -> None:
    sandbox = sandbox_named("docker")
    writable = tmp_path / "w"
    writable.mkdir()
    process = sandbox.start(["python3", "-c", "import os; os.system('df -k /tmp /dev/shm')"], cwd=writable,
                            mounts=Mounts(writable=writable),
                            limits=Limits(memory_limit_bytes=768 << 20, tmp_bytes=64 << 20),
                            stdout=tmp_path / "o", stderr=tmp_path / "e", env={})
    try:
        assert process.wait(60) == 0
    finally:
        process.kill()
    applied = sandbox.enforced()
    assert "memory 768 MiB (cgroup), swap off" in applied and "memory 8192 MiB (cgroup), swap off" not in applied
    assert any("/tmp, /dev/shm: tmpfs 64 MiB, 10000 inodes each" in line for line in applied)
    assert [line.split()[1] for line in (tmp_path / "o").read_text().splitlines()[1:]] == ["65536", "65536"]


def test_filling_the_private_tmp_fails_the_kernel(launcher: str, no_cgroups: None, flash: Assignment,
                                                  tmp_path: Path, cache_dir: Path) -> None:
    """The private /tmp is a bounded tmpfs (RAM): full, it stops the run with a message; the host's /tmp stays.

    Not the host's free space before and after: another test run on the machine writes there too."""
    attacked, seconds = grade_attack("attack-fill-private-tmp", flash, tmp_path, cache_dir)
    assert f"filled its private /tmp ({size_in_words(Limits().tmp_bytes)})" in attacked.message
    assert not Path("/tmp/kernel-grader-fill-attack").exists()


def test_a_file_flood_in_a_private_tmpfs_is_stopped(launcher: str, no_cgroups: None, tmp_path: Path) -> None:
    """Empty files cost inodes (kernel memory), not tmpfs bytes: /dev/shm is bounded in files too."""
    flood = ("import time\ntry:\n    for i in range(30000):\n        open(f'/dev/shm/kg-flood-{i}', 'w').close()\n"
             "except OSError as error:\n    print('refused at', i, error.errno, flush=True)\ntime.sleep(30)")
    code, hit, output, seconds = run(NamespaceSandbox(), flood, tmp_path, Limits(tmp_inodes=2000))
    assert hit == "filled its private /dev/shm (2000 files)", output
    assert not Path("/dev/shm/kg-flood-0").exists()


def test_an_output_folder_flood_of_names_is_stopped(flash: Assignment, tmp_path: Path, cache_dir: Path,
                                                    no_cgroups: None) -> None:
    attacked, seconds = grade_attack("attack-flood-output-files", flash, tmp_path, cache_dir)
    assert f"created more than {Limits().output_files} files in its output folder" in attacked.message


def test_an_output_folder_flood_of_new_files_is_stopped(launcher: str, no_cgroups: None, tmp_path: Path) -> None:
    """New empty files, each an inode on the host's disk: stopped soon past the limit, the disk's inodes spared."""
    flood = ("import os\nfor i in range(20000):\n    os.close(os.open(f'new-{i}', os.O_WRONLY | os.O_CREAT, 0o600))\n"
             "print('all created', flush=True)")
    code, hit, output, seconds = run(NamespaceSandbox(), flood, tmp_path, Limits(output_files=2000))
    assert hit == "created more than 2000 files in its output folder", output
    assert "all created" not in output


WRITERS = {
    "visible": "f = open(name, 'wb'); f.write(b'x' * size); f.flush(); kept.append(f)",
    "deleted-kept-open": "f = open(name, 'wb'); os.unlink(name); f.write(b'x' * size); f.flush(); kept.append(f)",
    "deleted-kept-mapped": ("f = open(name, 'w+b'); f.truncate(size); m = mmap.mmap(f.fileno(), size); f.close(); "
                            "os.unlink(name); m[:] = b'x' * size; kept.append(m)"),
}


@pytest.mark.parametrize("how", sorted(WRITERS))
def test_output_folder_bytes_are_bounded(how: str, tmp_path: Path) -> None:
    """96 MiB against 64 MiB: in files, or in files deleted but kept open or mapped (on the disk, in no folder walk)."""
    writer = (f"import mmap, os, time\nkept = []\nsize = 32 << 20\nfor i in range(3):\n    name = f'part-{{i}}'\n"
              f"    {WRITERS[how]}\nprint('written', flush=True)\ntime.sleep(30)")
    code, hit, output, seconds = run(NamespaceSandbox(), writer, tmp_path, Limits(output_bytes=64 << 20))
    expected = "wrote more than 64 MiB into its output folder" + ("" if how == "visible" else
                                                                  " (in deleted files it kept open or mapped)")
    assert hit == expected, output


def test_sysv_shared_memory_is_bounded(launcher: str, tmp_path: Path) -> None:
    """A detached SysV segment is in no RSS: the sandbox's IPC namespace caps the segments instead."""
    if os.geteuid() != 0:
        pytest.skip("the IPC namespace's sysctls are set as root")
    probe = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.shmget.restype = ctypes.c_int\n"
             "for mib in (32, 512):\n    print(mib, libc.shmget(0, ctypes.c_size_t(mib << 20), 0o1600) >= 0)")
    code, hit, output, _ = run(NamespaceSandbox(), probe, tmp_path, Limits(tmp_bytes=256 << 20))
    assert code == 0 and "32 True" in output and "512 False" in output, output


def test_threads_are_bounded_as_root_without_cgroups(launcher: str, no_cgroups: None, tmp_path: Path) -> None:
    """Past 24 they fail inside (the sandbox uid's RLIMIT_NPROC), and the run is ended at the cap."""
    if os.geteuid() != 0:
        pytest.skip("as another user RLIMIT_NPROC bounds them")
    threads = ("import threading, time\nfor _ in range(60):\n"
               "    threading.Thread(target=time.sleep, args=(30,)).start()\n"
               "print('started', flush=True)\ntime.sleep(30)")
    code, hit, output, seconds = run(NamespaceSandbox(), threads, tmp_path, Limits(processes=24))
    assert hit == "reached the process/thread limit (24)", output


def test_a_process_that_ends_while_the_tree_is_read_is_not_counted_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three children read first, then ended: their share moved to the parent read after them (1.05 GiB read
    of 700 MiB). The reading is taken again, and the tree is charged its 700 MiB; a tree that really holds
    more is still charged all of it."""
    from grader.sandbox import procfs

    shared = 700 << 20
    alive = {10, 11, 12, 13}
    ending = {11, 12, 13}  # each ends right after its first reading

    def proportional(pid: int) -> int:
        share = shared // len(alive) if pid in alive else 0
        if pid in ending:
            ending.discard(pid)
            alive.discard(pid)
        return share

    monkeypatch.setattr(procfs, "proportional_memory", proportional)
    monkeypatch.setattr(procfs, "status_memory", lambda pid: (0, 0) if pid in alive else None)
    assert procfs.tree_proportional_memory({10, 11, 12, 13}) == shared

    alive.update({11, 12, 13})  # the same tree, nothing ending: one reading, all of it
    shared = 1500 << 20
    assert procfs.tree_proportional_memory({10, 11, 12, 13}) == shared


def test_one_walk_of_proc_serves_the_watchdogs_that_ask_at_once() -> None:
    """A table begun after what a watchdog asks for is shared; one asking past it gets a walk of its own,
    which sees a process started meanwhile."""
    from grader.sandbox.procfs import shared_process_table

    began, table = shared_process_table(time.monotonic())
    assert os.getpid() in table
    assert shared_process_table(began - 0.01) == (began, table)  # another watchdog, the same moment
    child = os.fork()
    if child == 0:
        time.sleep(5)
        os._exit(0)
    try:
        later, fresh = shared_process_table(began)  # this watchdog's next walk: never the table it had
        assert later > began and child in fresh and child not in table
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)


def test_a_death_by_signal_is_that_signal_through_either_launcher(launcher: str, tmp_path: Path) -> None:
    """abort() is SIGABRT and a kill is SIGKILL through bubblewrap and unshare alike: the unshare launcher stays its
    namespace's init and runs the code as its child (as init the code would drop its own abort(); unshare itself
    exits 1 for a child killed by a signal)."""
    import signal

    for code, expected in (("import os; os.abort()", signal.SIGABRT),
                           ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", signal.SIGKILL),
                           ("import sys; sys.exit(3)", None)):
        status, _, output, _ = run(NamespaceSandbox(), code, tmp_path, Limits())
        assert status == (-expected if expected else 3), (launcher, code, status, output)
        assert "sigprocmask" not in output
