"""Harbor's local docker environment on Compose v1: `harbor run -e oc_repl.harbor:ComposeV1Environment`, for machines
whose packages have docker-compose 1.x and no Compose v2 plugin (Debian 12's `docker.io` + `docker-compose`), and
`oc_repl.harbor:OfflineComposeV1Environment` for a daemon without a network bridge as well (containers then run with
`network_mode: none`, no compose network made).

Relative to Harbor's `-e docker` only the compose front end changes: compose-v1.sh here, a wrapper over
docker-compose 1.x (`exec` and `cp` go to the docker CLI), without `up --wait` (Harbor then polls `exec true` until
the container answers). Everything else (build or prebuilt image, up, exec, upload, download, logs, stop) is Harbor's
own code. `COMPOSE_V1_STOP_TIMEOUT=S` shortens `down`/`stop` (a PID 1 that ignores SIGTERM waits 10 s otherwise).
"""

from __future__ import annotations

from pathlib import Path

from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.environments.docker import COMPOSE_NO_NETWORK_PATH
from harbor.environments.docker.docker import DockerEnvironment
from harbor.environments.docker.runtime import ContainerRuntime

WRAPPER = Path(__file__).with_name("compose-v1.sh")


class ComposeV1Environment(DockerEnvironment):
    @classmethod
    def runtime(cls) -> ContainerRuntime:
        return ContainerRuntime(
            engine=("docker",),
            compose=("bash", str(WRAPPER)),  # run by bash: an installed package need not keep the file executable
            supports_compose_wait=False,
            supports_compose_cp=True,
            supports_compose_project_directory=True,
        )


class OfflineComposeV1Environment(ComposeV1Environment):
    """Harbor's own no-network compose file goes last, so the task's main service has no network at all; the
    environment can then say it disables the internet, and never probes the kernel for Harbor's egress sidecar (that
    probe pulls an image)."""

    @classmethod
    def _egress_control_kernel_support(cls) -> bool:
        return False

    @property
    def _docker_compose_paths(self) -> list[Path]:
        return [*super()._docker_compose_paths, COMPOSE_NO_NETWORK_PATH]

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return super().capabilities.model_copy(update={"disable_internet": True})
