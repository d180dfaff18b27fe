"""The Gradescope autograder zip on stand-ins for Gradescope's base images (Ubuntu 22.04 and 24.04), done
as Gradescope does it: the zip unpacked into /autograder/source, setup.sh run as root with the package
registries reachable, the container committed as the autograder's image; then each submission graded
in a container of that image with no network and Docker's default capabilities.

The images come from `bash ci/gradescope/ubuntu-images.sh` (not part of CI's setup: it downloads two
Ubuntu systems). The image that setup.sh made is kept, named by the zip's content, so a re-run grades
at once; a new zip replaces it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from test_export_gradescope import autograder_zip  # noqa: F401 -- the zip as `grader export gradescope` writes it
from test_export_gradescope import CONTAINER_UIDS, assert_the_secret_stayed_secret, leaking_upload
from grader.errors import GraderError
from grader.samples import variants
from grader.assignment import load_assignment
from grader.status import CaseStatus

jsonschema = pytest.importorskip("jsonschema", reason="validates results.json (pip install '.[test]')")
SCHEMA = json.loads((Path(__file__).parent / "schemas" / "gradescope-results.schema.json").read_text())

SCRIPT = "ci/gradescope/ubuntu-images.sh"
BASES = "kernel-grader-gradescope"  # the images the script makes, tagged by Ubuntu version
AUTOGRADERS = "kernel-grader-gradescope-autograder"  # after setup.sh: tagged <ubuntu version>-<zip content>
PYTHON_OF = {"ubuntu-22.04": "3.10", "ubuntu-24.04": "3.12"}
FALLBACK_NOTE = "sandbox: process (this container allows no namespaces)"
REFUSAL = "the local sandbox could not start here: "
SETUP_LIMIT_S = 1800  # apt-get and pip over the network: slow mirrors are slow
GRADE_LIMIT_S = 900  # gold, two builds and every case on a small machine


def docker_or_skip():
    from grader.sandbox.docker import docker_client

    try:
        return docker_client()
    except GraderError as error:
        pytest.skip(f"no Docker daemon: {error}; then make the Ubuntu images with `bash {SCRIPT}`")


def content_key(zip_path: Path) -> str:
    """What the zip holds (names, modes, bytes), not when its files were last touched."""
    digest = hashlib.sha256()
    with zipfile.ZipFile(zip_path) as archive:
        for info in sorted(archive.infolist(), key=lambda i: i.filename):
            digest.update(f"{info.filename}\0{info.external_attr >> 16}\0".encode())
            digest.update(hashlib.sha256(archive.read(info)).digest())
    return digest.hexdigest()[:16]


def tar_of(files: dict[str, bytes]) -> bytes:
    """A tar of these files (folders made as needed), as `put_archive` takes it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def container_log(container) -> str:
    return container.logs(stdout=True, stderr=True).decode(errors="replace")


def finish(container, limit_s: int) -> tuple[int, str]:
    """Wait for the container (killed past limit_s); its exit status and its log."""
    import requests

    try:
        status = container.wait(timeout=limit_s)["StatusCode"]
    except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):  # ran past its limit
        container.kill()
        return -1, container_log(container) + f"\n[killed after {limit_s}s]"
    return status, container_log(container)


@pytest.fixture(scope="module", params=sorted(PYTHON_OF))
def autograder_image(request: pytest.FixtureRequest, autograder_zip: Path) -> tuple[str, str]:
    """(Ubuntu version, the image setup.sh made on it), made once per zip's content."""
    import docker.errors

    client = docker_or_skip()
    version = request.param
    base = f"{BASES}:{version}"
    try:
        client.images.get(base)
    except docker.errors.ImageNotFound:
        pytest.skip(f"the image {base} is missing: make it with `bash {SCRIPT}` (as root)")
    tag = f"{version}-{content_key(autograder_zip)}"
    try:
        client.images.get(f"{AUTOGRADERS}:{tag}")
        print(f"\n{version}: setup.sh's image {AUTOGRADERS}:{tag} is cached")
        return version, f"{AUTOGRADERS}:{tag}"
    except docker.errors.ImageNotFound:
        pass
    setup = setup_key(client.images.get(base).id, autograder_zip)
    installed = same_setup(client, version, setup)
    if installed is not None:
        image = swap_source(client, installed, autograder_zip, tag, setup)
        remove_stale(client, version, keep=(tag,))
        print(f"\n{version}: setup.sh's installs reused from {installed.tags[0]}; the zip's files swapped in")
        return version, image
    # Gradescope's order: unzip into /autograder/source, `bash setup.sh` there as root, run_autograder copied up.
    # What the container is given travels in /tmp and leaves with the script (binds and env would be committed).
    given = {"autograder.zip": autograder_zip.read_bytes()}
    trust = ""
    trusted = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    if trusted and Path(trusted).is_file():
        # This machine's egress re-signs TLS with its own authority, which its pip trusts through PIP_CERT;
        # Gradescope's network needs nothing of the kind, so setup.sh itself stays as it is.
        given["host-ca.crt"] = Path(trusted).read_bytes()
        trust = "PIP_CERT=/tmp/given/host-ca.crt "
    script = ("set -e; mkdir -p /autograder/source; cd /autograder/source; unzip -q /tmp/given/autograder.zip; "
              f"{trust}bash /autograder/source/setup.sh; "
              "cp /autograder/source/run_autograder /autograder/run_autograder; rm -rf /tmp/given")
    container = client.containers.create(base, ["bash", "-c", script], user="0",
                                         network_mode="host")  # setup.sh reaches apt's mirror and PyPI
    container.put_archive("/tmp", tar_of({f"given/{name}": data for name, data in given.items()}))
    started = time.monotonic()
    try:
        container.start()
        status, log = finish(container, SETUP_LIMIT_S)
        took = time.monotonic() - started
        assert status == 0, f"setup.sh failed on {base} (exit {status}) after {took:.0f}s:\n{log[-6000:]}"
        container.commit(repository=AUTOGRADERS, tag=tag,
                         conf={"Cmd": ["/autograder/run_autograder"], "WorkingDir": "/autograder",
                               "Labels": {"kernel-grader.setup_seconds": f"{took:.0f}", SETUP_LABEL: setup}})
    finally:
        container.remove(force=True)
    remove_stale(client, version, keep=(tag,))
    print(f"\n{version}: setup.sh took {took:.0f}s; committed as {AUTOGRADERS}:{tag}")
    return version, f"{AUTOGRADERS}:{tag}"


# What setup.sh installs depends on the base image, setup.sh and the grader's pyproject.toml (its packages; the
# grader itself is installed editable: its files are read where they lie). An image made by setup.sh from a zip that
# agrees on all three already holds what setup.sh would install for a new zip: only the zip's files change. A
# changed setup.sh or dependency list runs setup.sh afresh on the base, as Gradescope does.
SETUP_LABEL = "kernel-grader.setup_key"
SETUP_FILES = ("setup.sh", "kernel-grader/pyproject.toml")
MOST_SWAPS = 8  # file swaps stacked on one setup.sh run (a layer each) before setup.sh runs afresh


def setup_key(base_id: str, zip_path: Path) -> str:
    digest = hashlib.sha256(base_id.encode())
    with zipfile.ZipFile(zip_path) as archive:
        for name in SETUP_FILES:
            digest.update(name.encode() + b"\0" + archive.read(name))
    return digest.hexdigest()[:16]


def same_setup(client, version: str, setup: str):
    """An autograder image of this Ubuntu version whose setup.sh installed what this zip's would, if any."""
    for image in client.images.list(name=AUTOGRADERS, filters={"label": f"{SETUP_LABEL}={setup}"}):
        swaps = int((image.labels or {}).get("kernel-grader.swaps", "0"))
        if swaps < MOST_SWAPS and any(t.startswith(f"{AUTOGRADERS}:{version}-") for t in image.tags):
            return image
    return None


def swap_source(client, installed, zip_path: Path, tag: str, setup: str) -> str:
    """`installed` with /autograder/source replaced by the zip's files and run_autograder copied up (no network)."""
    script = ("set -e; rm -rf /autograder/source; mkdir -p /autograder/source; cd /autograder/source; "
              "unzip -q /tmp/given/autograder.zip; cp run_autograder /autograder/run_autograder; rm -rf /tmp/given")
    container = client.containers.create(installed.id, ["bash", "-c", script], user="0", network_mode="none")
    container.put_archive("/tmp", tar_of({"given/autograder.zip": zip_path.read_bytes()}))
    try:
        container.start()
        status, log = finish(container, 300)
        assert status == 0, f"swapping the zip's files into {installed.tags[0]} failed (exit {status}):\n{log[-3000:]}"
        swaps = int((installed.labels or {}).get("kernel-grader.swaps", "0")) + 1
        container.commit(repository=AUTOGRADERS, tag=tag,
                         conf={"Cmd": ["/autograder/run_autograder"], "WorkingDir": "/autograder",
                               "Labels": {**(installed.labels or {}), SETUP_LABEL: setup,
                                          "kernel-grader.swaps": str(swaps)}})
    finally:
        container.remove(force=True)
    return f"{AUTOGRADERS}:{tag}"


def remove_stale(client, version: str, keep: tuple[str, ...]) -> None:
    """The tags of images made from older zips (their layers stay while a newer image is made from them)."""
    for image in client.images.list(name=AUTOGRADERS):
        for stale in image.tags:
            if stale.startswith(f"{AUTOGRADERS}:{version}-") and stale.split(":", 1)[1] not in keep:
                client.images.remove(stale, force=True)


def grade(image: str, files: dict[str, bytes]) -> tuple[dict, str]:
    """Upload `files` as /autograder/submission, run /autograder/run_autograder: (results.json, the log)."""
    client = docker_or_skip()
    # Docker's default capabilities and seccomp profile, no network: what a grading container gets.
    container = client.containers.create(image, ["/autograder/run_autograder"], user="0", network_mode="none",
                                         working_dir="/autograder", environment=CONTAINER_UIDS)
    try:
        container.put_archive("/autograder", tar_of({f"submission/{name}": data for name, data in files.items()}))
        container.start()
        status, log = finish(container, GRADE_LIMIT_S)
        assert status == 0, f"run_autograder exited {status} in {image}:\n{log[-6000:]}"
        stream, _ = container.get_archive("/autograder/results/results.json")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
            document = json.loads(archive.extractfile("results.json").read())
    finally:
        container.remove(force=True)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    return document, log


def reference_files(names: tuple[str, ...] = ("standard_attention.cpp", "flash_attention.cpp")) -> dict[str, bytes]:
    source = load_assignment("flash-attention-cpu").reference_dir / "src"
    return {name: (source / name).read_bytes() for name in names}


def assert_sandbox_is_said(document: dict, log: str) -> str:
    """The sandbox that graded, as results.json records it, with why where it fell back (said to the student)."""
    assert "extra_data" in document, f"the grader could not grade: {document['output']}\n{log[-3000:]}"
    sandbox = document["extra_data"]["sandbox"]
    assert sandbox in {"local", "process"}, log[-3000:]
    fell_back = document["output"].startswith(FALLBACK_NOTE)
    assert fell_back == (sandbox == "process"), f"results.json says sandbox {sandbox}:\n{log[-3000:]}"
    assert (FALLBACK_NOTE in log) == fell_back, log[-3000:]
    if fell_back:  # for the reason Docker's default capabilities give, in bubblewrap's words, not another
        refusal = next(line for line in log.splitlines() if line.startswith(REFUSAL))
        assert "namespace" in refusal.lower(), log[-3000:]
        return f"{sandbox} sandbox ({refusal})"
    return f"{sandbox} sandbox"


def test_the_reference_uploaded_flat_scores_full_marks(autograder_image: tuple[str, str]) -> None:
    version, image = autograder_image
    document, log = grade(image, reference_files())
    assert document["score"] == pytest.approx(3.0), f"{document['output']}\n--- log ---\n{log[-4000:]}"
    assert all(t["status"] == "passed" for t in document["tests"]), log[-3000:]
    assert all(0 <= t["score"] <= t["max_score"] for t in document["tests"])
    assert document["extra_data"]["python"].startswith(PYTHON_OF[version]), document["extra_data"]
    sandbox = assert_sandbox_is_said(document, log)
    print(f"\n{version}: reference scored {document['score']:g} in the {sandbox} "
          f"(Python {document['extra_data']['python']}, {document['execution_time']}s)")


def test_a_mutant_loses_points_and_is_told_which_case_failed(autograder_image: tuple[str, str]) -> None:
    version, image = autograder_image
    mutant = next(v for v in variants(load_assignment("flash-attention-cpu")) if v.name == "mutant-flash-no-rescale")
    files = reference_files(("standard_attention.cpp",))
    files["flash_attention.cpp"] = (mutant.folder / "src" / "flash_attention.cpp").read_bytes()
    document, log = grade(image, files)
    assert document["score"] < 3.0, f"{document['output']}\n--- log ---\n{log[-4000:]}"
    failed = [t for t in document["tests"] if t["status"] == "failed"]
    assert failed and all(t["name"].startswith(f"{mutant.kernel} / ") for t in failed), log[-3000:]
    assert all(t["score"] == 0 and t["output"].strip() for t in failed), failed
    # Judged wrong (its outputs compared with the gold), not crashed or timed out: what this mutant does.
    assert {t["tags"][2] for t in failed} == {CaseStatus.FAILED.value}, failed
    assert sum(t["score"] for t in document["tests"]) == pytest.approx(document["score"], abs=1e-5)
    assert all(t["status"] == "passed" for t in document["tests"] if t["name"].startswith("standard_attention"))
    sandbox = assert_sandbox_is_said(document, log)
    print(f"\n{version}: {mutant.name} scored {document['score']:g} in the {sandbox}; failed: "
          + "; ".join(f"{t['name']}: {t['output'].splitlines()[0]}" for t in failed))


@pytest.mark.parametrize("how", ["static-constructor", "include"])
def test_student_code_reads_none_of_the_autograders_files_on_the_image(how: str, autograder_image: tuple[str, str],
                                                                      autograder_zip: Path) -> None:
    """Gradescope's case: root in a container that refuses namespaces, the zip unzipped by unzip itself into
    /autograder/source (setup.sh's venv and pip's files beside it), student code run under a uid of its own.
    static-constructor: the probe of test_export_gradescope, which tries every file the zip ships, the grader's
    folders and the cache; include: the compiler reads the secret."""
    version, image = autograder_image
    document, log = grade(image, leaking_upload(autograder_zip, "/autograder", how))
    sandbox = assert_sandbox_is_said(document, log)
    assert_the_secret_stayed_secret(document, how)
    print(f"\n{version}: a {how} read of the autograder's files in the {sandbox}: refused, score "
          f"{document['score']:g}")
