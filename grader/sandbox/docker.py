"""The `docker` backend: one container per harness, through the docker SDK.

No network (`network_mode="none"`), a read-only root with a tmpfs /tmp, an init process, every
capability dropped, no-new-privileges, nobody as the user, pids/memory/CPU limits, the paths the
runner names bind-mounted at the same place (read-only but for the one writable folder), and the
GPU by a device request when the assignment needs one. The image is `ci/Dockerfile`
(`$KERNEL_GRADER_IMAGE`, default `kernel-grader:local`); the daemon is `$DOCKER_HOST`, else the one
`ci/setup/docker.sh` starts, else the default socket.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from grader.errors import GraderError
from grader.sandbox import NOBODY, Limits, Mounts
from grader.sandbox.local import _give_to_nobody, make_readable
from grader.sandbox.streams import CappedLog, drain_chunks

DEFAULT_IMAGE = "kernel-grader:local"
CI_SOCKET = "/var/run/kernel-grader-docker.sock"  # where ci/setup/docker.sh starts its daemon
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/cuda/bin"
KEPT_ENVIRONMENT = ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "HOME", "CUDA_VISIBLE_DEVICES", "CUPY_CACHE_DIR",
                    "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "KERNEL_GRADER_PROGRESS_FD")


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


class DockerProcess:
    def __init__(self, container, threads: list[threading.Thread], limits: Limits) -> None:
        self._container = container
        self._threads = threads
        self._limits = limits
        self._exit: int | None = None
        self._state: dict = {}

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

    def limit_hit(self) -> str | None:
        if self._state.get("OOMKilled"):
            return f"reached the memory limit ({(self._limits.memory_bytes or 0) >> 20} MiB)"
        return None

    def kill(self) -> None:
        """Kill and remove the container: with it goes every process the code started."""
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
        package = Path(__file__).resolve().parent.parent
        volumes[str(package)] = {"bind": str(package), "mode": "ro"}
        if os.geteuid() == 0:
            for path in mounts.read_only:
                make_readable(path)
        if mounts.writable is not None:
            if os.geteuid() == 0:
                _give_to_nobody(mounts.writable)
            else:  # the container's nobody must write into a folder the grader's own user owns
                for root, dirs, _ in os.walk(mounts.writable):
                    os.chmod(root, 0o777)
            volumes[str(mounts.writable)] = {"bind": str(mounts.writable), "mode": "rw"}
        environment = {k: v for k, v in env.items() if k in KEPT_ENVIRONMENT}
        environment["PATH"] = CONTAINER_PATH
        requests = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if mounts.gpu else []
        ulimits = [docker.types.Ulimit(name="core", soft=0, hard=0),
                   docker.types.Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
                   docker.types.Ulimit(name="fsize", soft=limits.file_size_bytes, hard=limits.file_size_bytes)]
        if limits.cpu_seconds:
            ulimits.append(docker.types.Ulimit(name="cpu", soft=limits.cpu_seconds, hard=limits.cpu_seconds))
        try:
            container = self.client.containers.create(
                self.image, command=command, user=f"{NOBODY}:{NOBODY}", working_dir=str(cwd),
                environment=environment, network_mode="none", read_only=True,
                tmpfs={"/tmp": "rw,nosuid,nodev,size=1g,mode=1777"}, init=True, cap_drop=["ALL"],
                security_opt=["no-new-privileges"], pids_limit=limits.processes or -1,
                mem_limit=limits.memory_bytes or 0, memswap_limit=limits.memory_bytes or -1,
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
        return DockerProcess(container, threads, limits)

    def enforced(self) -> list[str]:
        limits = Limits()
        return ["no network (network_mode none)", "read-only root filesystem, tmpfs /tmp",
                "read-only mounts of inputs and library; one writable output folder",
                f"runs as nobody ({NOBODY}), all capabilities dropped, no-new-privileges", "init process",
                f"memory {(limits.memory_bytes or 0) >> 20} MiB, swap off (cgroup)",
                f"processes/threads {limits.processes} (pids limit)", "no core dumps", "open-file limit",
                "file-size limit", "stdout/stderr capped", "container removed at the end (all processes gone)",
                "clean environment (no secrets)"]
