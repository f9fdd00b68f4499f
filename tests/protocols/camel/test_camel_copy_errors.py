"""shell_write_content_to_file by upstream's procedure where its `docker cp` could not copy, in a container whose
WORKDIR is not /: under `--exact` the result holds what docker's client printed, the daemon's part checked against
the real daemon's answer to the same copy; with the deviation copy_errors_worded, oc-repl's own words.

camel-ai 0.2.90's own results for these writes are compared in test_camel_exact.py (slow)."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from typing import Any

import pytest

from oc_repl import deviations
from oc_repl.protocols.camel.tools import CamelTerminalTools
from tests.docker_support import DOCKER
from tests.protocols.camel.test_camel_tools import M, N, builtin_tools

pytestmark = DOCKER


@pytest.fixture(name="container")
def container_fixture(own_container: Any) -> Any:
    return own_container(working_dir="/app")


@pytest.fixture(name="box")
def box_fixture(container: Any) -> Iterator[Any]:
    from oc_repl.sandbox.docker import DockerSandbox

    sandbox = DockerSandbox.from_spec(container.name)
    yield sandbox
    sandbox.close()


def daemon_answer(client: Any, container: str, path: str) -> str:
    """The daemon's refusal of a file copied into `path` of `container`, as docker's client printed it."""
    import docker

    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        tar.addfile(tarfile.TarInfo("x.txt"))
    with pytest.raises(docker.errors.APIError) as refused:
        client.api.put_archive(container, path, archive.getvalue())
    return f"Error response from daemon: {refused.value.explanation}\n"


def write(tools: CamelTerminalTools, file_path: str) -> tuple[str, str]:
    result = tools.call("shell_write_content_to_file", {"content": "x", "file_path": file_path})
    return result.status, result.text


def failed(file_path: str, error: str) -> tuple[str, str]:
    return "failed", M.render("file.error", file_path=file_path, error=error)


def test_exact_gives_what_docker_cp_printed(box, container, docker_client):
    tools = builtin_tools(box, deviations=deviations.none())
    passwd = box.read_file("/etc/passwd")
    not_a_directory = "Error response from daemon: extraction point is not a directory\n"
    assert daemon_answer(docker_client, container.name, "/etc/passwd") == not_a_directory
    assert write(tools, "/etc/passwd/x.txt") == failed("/etc/passwd/x.txt", not_a_directory)
    assert write(tools, "etc/passwd/x.txt") == failed("etc/passwd/x.txt", not_a_directory)  # made in /app, copied to /
    # camel named the container it was given: here the sandbox's own
    not_found = f"Error response from daemon: Could not find the file rel in container {container.name}\n"
    assert daemon_answer(docker_client, container.name, "rel") == not_found
    assert write(tools, "rel/x.txt") == failed("rel/x.txt", not_found)
    assert box.exec("test -d /app/rel && test ! -e /rel", timeout=10).exit_code == 0
    cleaned = "rel2/deep"  # the parent as the client cleaned it, still relative
    not_found = f"Error response from daemon: Could not find the file {cleaned} in container {container.name}\n"
    assert daemon_answer(docker_client, container.name, cleaned) == not_found
    assert write(tools, "./a/../rel2//deep/x.txt") == failed("./a/../rel2//deep/x.txt", not_found)
    # a path ending as a directory's that is none: the client's own refusal, before the daemon is asked
    assert write(tools, "/etc/passwd/") == failed("/etc/passwd/", "no such directory\n")
    assert write(tools, "made/") == failed("made/", "no such directory\n")
    assert box.read_file("/etc/passwd") == passwd
    # a parent under a file: the daemon's answer names a path in its own storage, so oc-repl words it
    under = N.render("no_directory", path="/etc/passwd/sub")
    assert write(tools, "/etc/passwd/sub/x.txt") == failed("/etc/passwd/sub/x.txt", under)


def test_own_words_while_the_deviation_is_on(box):
    tools = builtin_tools(box, deviations=deviations.defaults().replace(relative_paths_in_workdir=False))
    assert tools.deviations.copy_errors_worded
    passwd = box.read_file("/etc/passwd")
    for file_path, parent in [
        ("/etc/passwd/x.txt", "/etc/passwd"),
        ("rel/x.txt", "/rel"),
        ("/etc/passwd/", "/etc/passwd"),
    ]:
        assert write(tools, file_path) == failed(file_path, N.render("no_directory", path=parent)), file_path
    assert box.read_file("/etc/passwd") == passwd


def test_what_the_copy_takes_is_written_under_both(box):
    for chosen in (deviations.none(), deviations.defaults().replace(relative_paths_in_workdir=False)):
        tools = builtin_tools(box, deviations=chosen)
        assert write(tools, "/srv/new/x.txt") == ("completed", M.render("file.ok", file_path="/srv/new/x.txt"))
        assert write(tools, "tmp/y.txt") == ("completed", M.render("file.ok", file_path="tmp/y.txt"))
        assert box.exec("cat /srv/new/x.txt /tmp/y.txt", timeout=10).output == b"xx"
        box.exec("rm -r /srv/new /tmp/y.txt", timeout=10)
