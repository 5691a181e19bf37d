"""The client switch: with JAX_IPU_REMOTE=grpc://host:port, platform "ipu" is jaxlib's IFRT proxy
client connected to a jax-ipu server, and no local IPU Model starts.

Programs still lower with this plugin's rules for "ipu", so they are the programs a local run
compiles, and give the same numbers. Needs only jax and jaxlib (no grpcio, no protobuf)."""

from __future__ import annotations

import base64
import os
from typing import Any

from jax_ipu import config
from jax_ipu.errors import IpuError

# jaxlib's client defaults to ALTS credentials (Google Cloud only); this selects plaintext. The
# client has no TLS: beyond loopback, tunnel it (ipu/docs/remote.md).
INSECURE_VAR = "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS"
# Keys of the initialization_data a session opens with (the server reads the same names).
TOKEN_KEY = "token"
DEVICES_KEY = "devices"
# The cost_analysis() key that carries the model's report of a remote compile: the codec's
# bytes (runtime/codec.py, data only) in base64, as attribute maps carry text.
REPORT_KEY = "ipu_report"


def address() -> str:
    """The server address the flags name ('' when the switch is off); a malformed one raises
    IpuConfigError naming the flag and the form it takes."""
    return config.value("jax_ipu_remote").strip()


def connection_options() -> Any:
    """jaxlib's ClientConnectionOptions for the flags: timeout, token, partition size."""
    from jax.extend.backend import ifrt_proxy

    options = ifrt_proxy.ClientConnectionOptions()
    options.connection_timeout_in_seconds = int(config.value("jax_ipu_remote_timeout"))
    data: dict[str, Any] = {}
    token = config.value("jax_ipu_remote_token")
    if token:
        data[TOKEN_KEY] = token.encode()  # jaxlib takes bytes, bool or int values
    devices = config.value("jax_ipu_remote_devices")
    if devices:
        data[DEVICES_KEY] = devices
    # No on_disconnect callback: jaxlib calls it from its own thread, and a Python callable
    # called while the interpreter exits aborts the process.
    options.initialization_data = data
    return options


def connect() -> Any:
    """The proxy client for the server the flags name (jax's backend factory for "ipu")."""
    from jax.extend.backend import ifrt_proxy

    target = address()
    os.environ.setdefault(INSECURE_VAR, "true")
    try:
        return ifrt_proxy.get_client(target, connection_options())
    except Exception as exc:  # noqa: BLE001 - jaxlib's error, with our words around it
        raise IpuError(
            f"cannot use the remote IPU Model at {target}: {exc}\nIs a server running there "
            "(python -m jax_ipu serve --port PORT), with a matching JAX_IPU_REMOTE_TOKEN and "
            "enough free devices for JAX_IPU_REMOTE_DEVICES? Unset JAX_IPU_REMOTE for a local "
            "IPU Model.") from None


def register(platform: str, priority: int) -> None:
    """Make `platform` the remote IPU Model (in place of the local plugin)."""
    from jax.extend.backend import register_backend_factory

    address()  # a malformed address is refused now, naming the flag
    register_backend_factory(platform, connect, priority=priority, fail_quietly=False)


def is_remote(backend: Any) -> bool:
    """Whether a jax backend (client) is a proxy to a remote server."""
    return str(getattr(backend, "runtime_type", "")).startswith("proxy/")


def remote_report(compiled: Any) -> Any:
    """The model's ProgramReport of a program compiled on a remote server (data only)."""
    from jax_ipu.model.report import ProgramReport
    from jax_ipu.runtime import codec

    costs = compiled.cost_analysis() or {}
    text = costs.get(REPORT_KEY)
    if not isinstance(text, str):
        raise IpuError("the server sent no report for this program (is it a jax-ipu server?)")
    return codec.loads(ProgramReport, base64.b64decode(text.encode(), validate=True))
