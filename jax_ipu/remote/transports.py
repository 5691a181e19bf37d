"""Which gRPC transport carries the server's calls: the C++ one (native_transport.py) when it
can be built here, else grpcio's Python server; both answer through the same service."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from jax_ipu.errors import IpuError

logger = logging.getLogger(__name__)

NAMES = ("auto", "native", "grpcio")


class Transport(Protocol):
    name: str
    port: int

    def stop(self, grace: float) -> None: ...

    def wait(self) -> None: ...


class TransportError(IpuError):
    """The transport asked for cannot run here (and why, and what to install)."""


def check(name: str) -> str:
    if name not in NAMES:
        raise TransportError(f"transport {name!r}: choose one of {', '.join(NAMES)}")
    return name


def start(name: str, service: Any, host: str, port: int, threads: int) -> Transport:
    """A started transport serving `service` on host:port. "auto": the C++ transport, or
    grpcio's when the C++ one cannot be built (logged, with the reason). `threads` sizes
    grpcio's pool; the C++ transport serves on one thread and defers what may wait."""
    address = f"[{host.strip('[]')}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if check(name) != "grpcio":
            from jax_ipu.remote import native_transport

            try:
                return native_transport.NativeTransport(service, address)
            except native_transport.NativeTransportUnavailable as exc:
                if name == "native":
                    raise TransportError(str(exc)) from None
                logger.warning("serving with grpcio's Python transport, about 2x slower a "
                               "call: %s", exc)
        from jax_ipu.remote.grpcio_transport import GrpcioTransport

        return GrpcioTransport(service, address, threads)
    except OSError as exc:  # the address cannot be bound
        raise TransportError(str(exc)) from None
