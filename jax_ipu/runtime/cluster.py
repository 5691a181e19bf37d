"""The processes of a multi-process run: a coordination service of the ipu client's own.

The private XLA:CPU client must exchange its topology and run its collectives under keys that
jax's own CPU backend does not also write, so it gets a separate service, found through jax's."""

from __future__ import annotations

import atexit
import itertools
import logging
import socket
from typing import Any

from jax_ipu import _internals
from jax_ipu.errors import IpuConfigError
from jax_ipu.model.targets import Target

logger = logging.getLogger(__name__)

ADDRESS_KEY = "jax_ipu/coordination_service/{generation}"
AGREE_KEY = "jax_ipu/agree/{name}/{process}"
# A process that starts late (importing, compiling) must not be taken for a dead one.
CONNECT_TIMEOUT_S = 300
SHUTDOWN_TIMEOUT_S = 60
_generations = itertools.count()  # one service per ipu client made in this process


class Cluster:
    """This process's place among `num_processes`, and the coordination client they share."""

    def __init__(self, process_index: int, num_processes: int, client: Any,
                 service: Any | None) -> None:
        self.process_index = process_index
        self.num_processes = num_processes
        self.client = client
        self.service = service
        self._closed = False
        atexit.register(self.shutdown)

    @classmethod
    def join(cls, jax_client: Any, process_index: int, num_processes: int,
             coordinator_address: str) -> Cluster:
        """Start (process 0) or find the service through jax's coordination service; connect."""
        key = ADDRESS_KEY.format(generation=next(_generations))
        service = None
        if process_index == 0:
            host = coordinator_address.rsplit(":", 1)[0]
            service, port = _start_service(num_processes)
            jax_client.key_value_set(key, f"{host}:{port}")
        address = jax_client.blocking_key_value_get(key, CONNECT_TIMEOUT_S * 1000)
        client = _internals.get_distributed_runtime_client(
            address, process_index, init_timeout=CONNECT_TIMEOUT_S,
            shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        logger.info("ipu process %d of %d: coordination service %s", process_index,
                    num_processes, address)
        client.connect()
        return cls(process_index, num_processes, client, service)

    def collectives(self) -> Any:
        """XLA:CPU's gloo collectives over TCP, rendezvousing through this cluster's service."""
        return _internals.make_gloo_tcp_collectives(distributed_client=self.client)

    def agree(self, name: str, value: str, fix: str) -> None:
        """Check every process has the same `value` for `name`; a clear error names who differs."""
        self.client.key_value_set(AGREE_KEY.format(name=name, process=self.process_index), value)
        values = [self.client.blocking_key_value_get(AGREE_KEY.format(name=name, process=p),
                                                     CONNECT_TIMEOUT_S * 1000)
                  for p in range(self.num_processes)]
        if len(set(values)) > 1:
            raise IpuConfigError(
                f"The processes of this run disagree on {name}: "
                + ", ".join(f"process {p} has {v}" for p, v in enumerate(values))
                + f". {fix}"
            )

    def agree_target(self, target: Target) -> None:
        """Check every process models the same chip: version, tiles and the memory proportion
        (which changes plans, so the programs' exchanges, between processes)."""
        self.agree("the IPU Model target",
                   f"{target.version} with {target.num_tiles} tiles and available memory "
                   f"proportion {target.available_memory_proportion:g}",
                   "Set jax_ipu_model_version, jax_ipu_model_num_tiles and "
                   "jax_ipu_available_memory_proportion alike in every process.")

    def shutdown(self) -> None:
        """Leave the cluster (a barrier with the other processes); process 0 stops the service."""
        if self._closed:
            return
        self._closed = True
        try:
            self.client.shutdown()
        finally:
            if self.service is not None:
                self.service.shutdown()


def _start_service(num_processes: int, attempts: int = 3) -> tuple[Any, int]:
    """A coordination service on a free port of every interface; retried if the port is taken."""
    errors: list[str] = []
    for _ in range(attempts):
        port = _free_port()
        try:
            return _internals.get_distributed_runtime_service(f"[::]:{port}", num_processes), port
        except Exception as error:  # the port was taken between probing and binding
            errors.append(str(error))
    raise IpuConfigError(
        "Could not start the ipu coordination service for jax.distributed: "
        + "; ".join(errors) + ". Check that this host may listen on TCP ports."
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])

