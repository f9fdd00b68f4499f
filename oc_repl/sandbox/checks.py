"""The doctor's checks of this machine rather than of the server: what confines `local:` sandboxes, and docker.
Each is a check's fields (name, status, finding, fix), which the doctor makes its Check of."""

from __future__ import annotations

import os

from oc_repl.doctor_report import Status

Found = tuple[str, Status, str, str]

# The image the example tasks and the quick start build on (their Dockerfiles' default BASE_IMAGE).
TEST_IMAGE = os.environ.get("OC_REPL_TEST_IMAGE", "oc-repl-test:bookworm")
DOCKER_FIX = 'eval "$(.ci/dockerd.sh)" && .ci/test-image.sh   (or point DOCKER_HOST at a daemon that answers)'


def local_confinement() -> Found:
    """Whether `local:` sandboxes can be confined here (they refuse --yes without --no-confine otherwise)."""
    from oc_repl.sandbox.confine import check

    ok, why = check()
    if ok:
        return ("local sandbox", "ok", why, "")
    return (
        "local sandbox",
        "warn",
        f"local: sandboxes cannot be confined here: {why}. They ask before running unconfined, and refuse --yes "
        "without --no-confine.",
        "Install bubblewrap (apt-get install bubblewrap), or use a container sandbox (docker-image:<image>).",
    )


def docker_check() -> Found:
    """Whether container sandboxes can run here: the daemon, the test image, and whether containers get a network."""
    from oc_repl.errors import SandboxError
    from oc_repl.sandbox.docker import connect

    try:
        client = connect()
    except SandboxError as exc:
        return ("docker", "warn", f"{exc.message}: docker-image: and task sandboxes cannot run", DOCKER_FIX)
    try:
        import docker

        try:
            client.images.get(TEST_IMAGE)
            image = f"test image {TEST_IMAGE} present"
        except docker.errors.DockerException:
            image = f"test image {TEST_IMAGE} missing (.ci/test-image.sh makes it)"
        bridged = bool(client.networks.list(names=["bridge"]))
    finally:
        client.close()
    network = "a bridge network" if bridged else "no bridge network: task containers that ask for one get none"
    status: Status = "ok" if "present" in image else "warn"
    return ("docker", status, f"daemon answers; {image}; {network}", "" if status == "ok" else DOCKER_FIX)
