"""The `docker` backend: one container per harness, through the docker SDK.

No network (`network_mode="none"`), a read-only root with a bounded tmpfs /tmp and /dev/shm, an
init process, every capability dropped, no-new-privileges, nobody as the user, pids/memory/CPU
limits (the container's cgroup, whose pids counter the watchdog reads where the daemon is local), the paths the runner names bind-mounted at the same place
(read-only but for the one writable folder, which the watchdog bounds), and the GPU by a device
request when the assignment needs one. Each start records what it applied; `enforced()` reports it.
The image is `ci/Dockerfile` (`$KERNEL_GRADER_IMAGE`, default `kernel-grader:local`); the daemon is
`$DOCKER_HOST`, else the one `ci/setup/docker.sh` starts, else the default socket.

The code runs as nobody, not as a uid of its own (uids.py): the container's pids limit is a bound of
its own cgroup, per sandbox already, and the daemon, perhaps another machine's, knows nothing of
this machine's uid leases.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from grader.boundary.runtimes import environment_names
from grader.errors import GraderError
from grader.sandbox import HARNESS_PACKAGE, NOBODY, LimitHit, Limits, Mounts, in_mib
from grader.sandbox.cgroups import pids_cgroup_of
from grader.sandbox.host import give_to, make_readable, rlimit_words, watch_for
from grader.sandbox.streams import CappedLog, drain_chunks
from grader.sandbox.watchdog import Watch, WatchedProcess, Watchdog

DEFAULT_IMAGE = "kernel-grader:local"
CI_SOCKET = "/var/run/kernel-grader-docker.sock"  # where ci/setup/docker.sh starts its daemon
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/cuda/bin"
# Besides the runtimes' own (their harness_env and kernel cache: `grader.boundary.runtimes.environment_names`).
KEPT_ENVIRONMENT = ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "HOME", "CUDA_VISIBLE_DEVICES",
                    "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "KERNEL_GRADER_PROGRESS_FD", "USER", "LOGNAME")


def docker_client():
    """A client for the daemon the grader should use, or a GraderError saying why there is none."""
    try:
        import docker
    except ImportError as error:
        raise GraderError(f"the docker sandbox needs the docker SDK (pip install docker): {error}") from None
    try:
        if "DOCKER_HOST" not in os.environ and os.path.exists(CI_SOCKET):
            client = docker.DockerClient(base_url=f"unix://{CI_SOCKET}")
        else:
            client = docker.from_env()
        client.ping()
        return client
    except Exception as error:
        raise GraderError(f"the docker sandbox cannot reach a Docker daemon ({error}); start one "
                          "(bash ci/setup/docker.sh) or set DOCKER_HOST") from None


class DockerProcess(WatchedProcess):
    def __init__(self, container, threads: list[threading.Thread], limits: Limits, applied: list[str],
                 watch: Watch | None = None, pid: int | None = None) -> None:
        self._container = container
        self._threads = threads
        self._limits = limits
        self._exit: int | None = None
        self._state: dict = {}
        self.applied = tuple(applied)
        # The writable folder is the host's: the container's cgroup does not bound it. A full tmpfs stops
        # the run here as in the local backend, where the container's processes are visible (`pid`).
        self._watchdog = Watchdog(pid, watch, self._stop_container).start() if watch is not None else None

    def _stop_container(self) -> None:
        try:
            self._container.kill()
        except Exception:
            pass

    def poll(self) -> int | None:
        if self._exit is None:
            try:
                self._container.reload()
            except Exception:
                self._exit = -9  # removed under us: treat as killed
                return self._exit
            self._state = self._container.attrs.get("State", {})
            if self._state.get("Status") in ("exited", "dead"):
                self._exit = int(self._state.get("ExitCode", -1))
                if self._exit >= 128:  # docker reports death by signal N as 128 + N
                    self._exit = -(self._exit - 128)
        return self._exit

    def wait(self, timeout: float | None = None) -> int:
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                import subprocess

                raise subprocess.TimeoutExpired("docker container", timeout or 0)
            time.sleep(0.05)
        return code

    def _bound_hit(self) -> LimitHit | None:
        if self._state.get("OOMKilled"):
            return LimitHit.memory(self._limits.memory_limit_bytes)
        return None

    def kill(self) -> None:
        """Kill and remove the container: with it goes every process the code started."""
        if self._watchdog is not None:
            self._watchdog.stop()
        try:
            self._container.remove(force=True)
        except Exception:
            pass
        for thread in self._threads:
            thread.join(timeout=5)


class DockerSandbox:
    name = "docker"

    def __init__(self, image: str | None = None) -> None:
        self.image = image or os.environ.get("KERNEL_GRADER_IMAGE", DEFAULT_IMAGE)
        self._client = None
        self._applied: tuple[str, ...] | None = None

    @property
    def client(self):
        if self._client is None:
            self._client = docker_client()
        return self._client

    def start(self, command: list[str], *, cwd: Path, mounts: Mounts, limits: Limits,
              stdout: Path, stderr: Path, env: dict[str, str]) -> DockerProcess:
        import docker

        # The image's interpreter runs the same harness (mounted read-only at its own path).
        command = ["python3" if part == sys.executable else part for part in command]
        volumes = {str(p): {"bind": str(p), "mode": "ro"} for p in mounts.read_only}
        volumes[str(HARNESS_PACKAGE)] = {"bind": str(HARNESS_PACKAGE), "mode": "ro"}
        if os.geteuid() == 0:
            for path in mounts.read_only:
                make_readable(path)
        if mounts.writable is not None:
            if os.geteuid() == 0:
                give_to(mounts.writable, NOBODY, NOBODY)
            else:  # the container's nobody must write into a folder the grader's own user owns
                for root, dirs, _ in os.walk(mounts.writable):
                    os.chmod(root, 0o777)
            volumes[str(mounts.writable)] = {"bind": str(mounts.writable), "mode": "rw"}
        kept = (*KEPT_ENVIRONMENT, *environment_names())
        environment = {k: v for k, v in env.items() if k in kept}
        environment["PATH"] = CONTAINER_PATH
        requests = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if mounts.gpu else []
        ulimits = [docker.types.Ulimit(name="core", soft=0, hard=0),
                   docker.types.Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
                   docker.types.Ulimit(name="fsize", soft=limits.file_size_bytes, hard=limits.file_size_bytes)]
        if limits.cpu_seconds:
            ulimits.append(docker.types.Ulimit(name="cpu", soft=limits.cpu_seconds, hard=limits.cpu_seconds))
        # RAM-backed: bounded in bytes and inodes (an inode costs kernel memory that no size counts).
        tmpfs = f"rw,nosuid,nodev,size={limits.tmp_bytes},nr_inodes={limits.tmp_inodes},mode=1777"
        try:
            container = self.client.containers.create(
                self.image, command=command, user=f"{NOBODY}:{NOBODY}", working_dir=str(cwd),
                environment=environment, network_mode="none", read_only=True,
                tmpfs={"/tmp": tmpfs, "/dev/shm": tmpfs}, init=True, cap_drop=["ALL"],
                security_opt=["no-new-privileges"], pids_limit=limits.processes or -1,
                mem_limit=limits.memory_limit_bytes or 0, memswap_limit=limits.memory_limit_bytes or -1,
                nano_cpus=int(limits.cpus * 1e9) if limits.cpus else 0, ulimits=ulimits, volumes=volumes,
                device_requests=requests, log_config=docker.types.LogConfig(type="none"),
                labels={"kernel-grader": "sandbox"}, stdin_open=False, tty=False, detach=True,
            )
        except docker.errors.ImageNotFound:
            raise GraderError(f"the docker sandbox's image {self.image!r} is missing: build it with "
                              "`bash ci/setup/docker.sh` (or docker build -f ci/Dockerfile grader)") from None
        except docker.errors.APIError as error:
            raise GraderError(f"the docker sandbox could not create a container: {error}") from None
        stream = self.client.api.attach(container.id, stdout=True, stderr=True, stream=True, demux=True)
        threads = [drain_chunks(stream, CappedLog(stdout, limits.log_bytes), CappedLog(stderr, limits.log_bytes))]
        try:
            container.start()
        except docker.errors.APIError as error:
            container.remove(force=True)
            if mounts.gpu and "device driver" in str(error):
                raise GraderError("the docker sandbox cannot give this container a GPU: the Docker daemon has no "
                                  "NVIDIA container runtime (install nvidia-container-toolkit and restart dockerd), "
                                  f"or grade with --sandbox local; Docker said: {error.explanation or error}") from None
            raise GraderError(f"the docker sandbox could not start a container: {error}") from None
        pid = _local_pid(container)
        watch = _watch(limits, mounts, tmpfs=pid is not None, pids=pids_cgroup_of(pid) if pid is not None else None)
        process = DockerProcess(container, threads, limits, self._record(limits, mounts, watch), watch, pid)
        self._applied = process.applied
        return process

    def _record(self, limits: Limits, mounts: Mounts, watch: Watch | None) -> list[str]:
        """What `start` passes to the daemon (and the watchdog), in words."""
        applied = ["no network (network_mode none)",
                   f"read-only root filesystem; /tmp, /dev/shm: tmpfs {in_mib(limits.tmp_bytes)}, "
                   f"{limits.tmp_inodes} inodes each",
                   "read-only mounts of inputs and library; one writable output folder",
                   f"runs as nobody ({NOBODY}), all capabilities dropped, no-new-privileges", "init process"]
        applied.append(f"memory {in_mib(limits.memory_limit_bytes)} (cgroup), swap off" if limits.memory_limit_bytes
                       else "memory: no limit")
        ended = "; the run is ended at the limit" if watch is not None and watch.pids_cgroup is not None else ""
        applied.append(f"processes/threads {limits.processes} (the container's pids limit{ended})" if limits.processes
                       else "processes/threads: no limit")
        if limits.cpus:
            applied.append(f"CPU share {limits.cpus:g} cores")
        if watch is not None:
            applied += watch.describe()
            if watch.tmpfs_bytes:
                applied.append("a full /tmp or /dev/shm stops the run (watchdog)")
        return [*applied, *rlimit_words(limits), "container removed at the end (all processes gone)",
                "clean environment (no secrets)"]

    def enforced(self, limits: Limits | None = None, gpu: bool = False) -> list[str]:
        """What the last start applied; else (or with `limits`) what a start would apply."""
        if limits is None and self._applied is not None:
            return list(self._applied)
        limits = limits or Limits()
        mounts = Mounts(writable=Path("."), gpu=gpu)
        return self._record(limits, mounts, _watch(limits, mounts, tmpfs=False))


def _watch(limits: Limits, mounts: Mounts, tmpfs: bool, pids: Path | None = None) -> Watch | None:
    """The watchdog's bounds, where there is anything the container's cgroup leaves unbounded.

    `pids`: the container's pids cgroup, as this machine mounts it: a fork bomb at its limit spins
    there, and the watchdog ends the run that stays at it.
    """
    if mounts.writable is None and not tmpfs and pids is None:
        return None
    caps = {"tasks": limits.processes, "pids_cgroup": pids} if pids is not None and limits.processes else {}
    return watch_for(limits, mounts.writable, tmpfs, **caps)


def _local_pid(container) -> int | None:
    """The container's first process as this machine's /proc shows it; None where the daemon runs elsewhere."""
    try:
        container.reload()
        pid = int(container.attrs.get("State", {}).get("Pid") or 0)
        if pid > 0 and container.id in Path(f"/proc/{pid}/cgroup").read_text():
            return pid
    except Exception:
        pass
    return None
