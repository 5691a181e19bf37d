"""Every jax_ipu flag and its environment variable, in one table.

plugin.py registers the table with jax.config, so each flag is set by `jax.config.update(name, v)`
or by the environment variable named as the flag in upper case (JAX_IPU_...)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from jax_ipu.errors import IpuConfigError
from jax_ipu.model.targets import (
    DEFAULT_AVAILABLE_MEMORY_PROPORTION,
    FULL_CHIP_TILES,
    PRODUCTS,
    VERSIONS,
    Target,
    get_target,
    memory_proportion_ok,
)

__all__ = ["BY_NAME", "FLAGS", "Flag", "IpuConfigError", "engine_options", "target", "value"]

MAX_DEVICES = 64  # an IPU-POD64: the largest system the model describes


@dataclass(frozen=True)
class Flag:
    """One flag: its name, type, default and how a raw value is checked."""

    name: str
    kind: type
    default: Any
    help: str
    allowed: str
    check: Callable[[Any], bool]
    # Read each time it is used (when a program is traced), not when the backend starts, so
    # it may change at any time.
    read_on_use: bool = False

    @property
    def env_var(self) -> str:
        return self.name.upper()

    def parse(self, raw: Any, origin: str = "") -> Any:
        """Turn a value (or an environment string) into the flag's type, or raise a clear error."""
        where = origin or f"jax.config.update({self.name!r}, ...)"
        try:
            if self.kind is bool and isinstance(raw, str):
                low = raw.strip().lower()
                if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError(raw)
                value: Any = low in ("1", "true", "yes", "on")
            elif self.kind is int and isinstance(raw, str):
                value = int(raw.strip())
            elif self.kind is float and isinstance(raw, str):
                value = float(raw.strip())
            elif self.kind is float and isinstance(raw, int) and not isinstance(raw, bool):
                value = float(raw)
            else:
                value = raw
            ok = isinstance(value, self.kind) and not (
                self.kind is int and isinstance(value, bool)
            ) and self.check(value)
        except ValueError:
            ok = False
        if not ok:
            raise IpuConfigError(
                f"Invalid value {raw!r} for {self.name} (set by {where}): allowed values are "
                f"{self.allowed}."
            )
        return value


def _remote_ok(value: str) -> bool:
    host, _, port = value.removeprefix("grpc://").rpartition(":")
    return value.startswith("grpc://") and bool(host) and port.isdigit() and 0 < int(port) < 65536


def _visible_ok(value: str) -> bool:
    if not value.strip():
        return True
    ids = [part.strip() for part in value.split(",")]
    return all(i.isdigit() and int(i) < MAX_DEVICES for i in ids) and len(set(ids)) == len(ids)


FLAGS: tuple[Flag, ...] = (
    Flag(
        "jax_ipu_use_model", bool, True,
        "Run on the IPU Model (an emulated IPU). False asks for IPU hardware, which needs "
        "Graphcore's Poplar SDK: not available in this build.",
        "True or False", lambda v: True,
    ),
    Flag(
        "jax_ipu_model_version", str, "ipu2",
        "The IPU the model emulates: "
        + ", ".join(f"{v} ({PRODUCTS[v]})" for v in VERSIONS) + ".",
        ", ".join(map(repr, VERSIONS[:-1])) + f" or {VERSIONS[-1]!r}", lambda v: v in VERSIONS,
    ),
    Flag(
        "jax_ipu_model_num_tiles", int, 0,
        "Tiles per IPU Model device; 0 means the full chip ("
        + ", ".join(f"{n} on {v}" for v, n in FULL_CHIP_TILES.items()) + ").",
        "0 (full chip) or a whole number of tiles from 1 to the chip's tile count",
        lambda v: v >= 0,  # the chip's count is checked with the version, by get_target
    ),
    Flag(
        "jax_ipu_available_memory_proportion", float, DEFAULT_AVAILABLE_MEMORY_PROPORTION,
        "Share of each tile's memory that matmuls and convolutions may plan their temporaries "
        "in, as PopLibs' availableMemoryProportion: lower fits larger programs, at some cost "
        "in cycles.",
        "a number greater than 0 and at most 1, e.g. 0.3", memory_proportion_ok,
    ),
    Flag(
        "jax_ipu_device_count", int, -1,
        "How many IPU Model devices to create; -1 means all visible devices (one unless "
        "jax_ipu_visible_devices lists more).",
        f"-1 (all) or a whole number from 1 to {MAX_DEVICES}",
        lambda v: v == -1 or 1 <= v <= MAX_DEVICES,
    ),
    Flag(
        "jax_ipu_visible_devices", str, "",
        "Comma-separated device ids to expose, e.g. '0,1'; empty means all.",
        f"'' or distinct comma-separated ids below {MAX_DEVICES}, e.g. '0,1'",
        _visible_ok,
    ),
    Flag(
        "jax_ipu_tile_cache_dir", str, "",
        "Where jax_ipu.tile keeps custom C++ vertices built for the host, by content hash; "
        "empty means <user cache dir>/jax_ipu/vertices ($XDG_CACHE_HOME or ~/.cache).",
        "'' or a directory path", lambda v: True,
    ),
    Flag(
        "jax_ipu_key_file", str, "",
        "A file holding the secret key that seals cached ipu programs and vertex libraries "
        "(HMAC-SHA256), for a cache a team shares on purpose: at least 32 bytes, writable by "
        "no one else. Empty: a key of your own, made (mode 600) as "
        "<user cache dir>/jax_ipu/seal.key ($XDG_CACHE_HOME or ~/.cache).",
        "'' or the path of a key file", lambda v: True, read_on_use=True,
    ),
    Flag(
        "jax_ipu_remote", str, "",
        "Address of a jax-ipu server (python -m jax_ipu serve) whose IPU Model devices platform "
        "'ipu' uses instead of a local model: grpc://HOST:PORT. Empty: a local IPU Model.",
        "'' or grpc://HOST:PORT, e.g. 'grpc://127.0.0.1:8470'",
        lambda v: not v.strip() or _remote_ok(v.strip()),
    ),
    Flag(
        "jax_ipu_remote_token", str, "",
        "The token the jax-ipu server at jax_ipu_remote was started with (--token-file).",
        "the server's token, or '' for a server without one", lambda v: True,
    ),
    Flag(
        "jax_ipu_remote_devices", int, 0,
        "How many of the server's devices this process asks for, as a partition of its own "
        "(as V-IPU partitions a Pod); 0 means all of them.",
        f"0 (all) or a whole number from 1 to {MAX_DEVICES}", lambda v: 0 <= v <= MAX_DEVICES,
    ),
    Flag(
        "jax_ipu_remote_shared_dir", str, "",
        "A directory on this host (e.g. /dev/shm) in which a remote client makes a private "
        "directory for the host buffers it puts of 1 MiB or more: a jax-ipu server on the same "
        "host, run by the same user, reads them as files instead of over gRPC. Empty: every "
        "byte travels over gRPC.",
        "'' or an absolute directory path, e.g. '/dev/shm'",
        lambda v: not v.strip() or os.path.isabs(v.strip()),
    ),
    Flag(
        "jax_ipu_remote_timeout", int, 30,
        "Seconds to keep trying to open a session with the server at jax_ipu_remote.",
        "a whole number of seconds from 1", lambda v: v >= 1,
    ),
    Flag(
        "jax_ipu_tile_worker_timeout_s", float, 60.0,
        "How long a custom MultiVertex's workers may run on one tile before they are stopped "
        "and the call fails (a worker waiting for a result no other worker writes).",
        "a number of seconds greater than 0, e.g. 60", lambda v: v > 0, read_on_use=True,
    ),
)
BY_NAME = {flag.name: flag for flag in FLAGS}


# Flags whose environment variable held a bad value: raised when the ipu backend starts.
ENV_ERRORS: dict[str, IpuConfigError] = {}


@contextlib.contextmanager
def hidden_env(var: str | None) -> Iterator[None]:
    """Within the block, the environment variable `var` (if any) is unset."""
    saved = os.environ.pop(var, None) if var else None
    try:
        yield
    finally:
        if saved is not None:
            os.environ[var] = saved


def check_environment() -> None:
    """Raise the error of a bad JAX_IPU_* variable whose flag was not set since by
    jax.config.update (that value wins)."""
    for name, error in ENV_ERRORS.items():
        if value(name) == BY_NAME[name].default:
            raise error


def environment_problem() -> IpuConfigError | None:
    """The first bad value among the JAX_IPU_* and Poplar variables the ipu backend reads when
    it starts (None when all are good): what would stop it starting."""
    try:
        check_environment()
        target()
        engine_options()
        pvti_options()
    except IpuConfigError as error:
        return error
    return None


def env_value(flag: Flag) -> Any:
    """The flag's value from its environment variable, or its default."""
    raw = os.environ.get(flag.env_var)
    if raw is None:
        return flag.default
    return flag.parse(raw, origin=f"the environment variable {flag.env_var}")


def value(name: str) -> Any:
    """The current value of a flag: jax.config when registered there, else environment/default."""
    import jax

    flag = BY_NAME[name]
    try:
        return flag.parse(getattr(jax.config, name))
    except AttributeError:
        return env_value(flag)


def target() -> Target:
    """The IPU Model target the flags choose (version, tiles, memory proportion), checked
    together by model.targets.get_target."""
    num_tiles = value("jax_ipu_model_num_tiles")
    return get_target(value("jax_ipu_model_version"), num_tiles or None,
                      value("jax_ipu_available_memory_proportion"))


def source(name: str) -> str:
    """Where a flag's current value comes from: 'config', 'env' or 'default'."""
    flag = BY_NAME[name]
    current = value(name)
    if flag.env_var in os.environ:
        return "env" if current == env_value(flag) else "config"
    return "default" if current == flag.default else "config"


# Poplar engine options, read from POPLAR_ENGINE_OPTIONS as Graphcore's SDK does.
ENGINE_OPTIONS_VAR = "POPLAR_ENGINE_OPTIONS"
ENGINE_OPTIONS: dict[str, str] = {
    "debug.allowOutOfMemory": "compile programs that do not fit, so a report can be written; "
    "executing them raises an error",
    "autoReport.all": "write every report for each compiled program",
    "autoReport.outputGraphProfile": "write the graph (memory) profile",
    "autoReport.outputExecutionProfile": "write the execution (cycles) profile",
    "autoReport.directory": "where reports are written (default ./reports)",
    "profiler.includeFlopEstimates": "add flop estimates to the profiles",
}


def _clipped(raw: str, limit: int = 200) -> str:
    """`raw` as a repr, cut to `limit` characters (a variable may be megabytes long)."""
    return repr(raw) if len(raw) <= limit else f"{raw[:limit]!r}... ({len(raw)} characters)"


def _json_options(var: str, known: dict[str, str], strings: set[str], example: str
                  ) -> dict[str, Any]:
    """The JSON object in environment variable `var`: known keys only, booleans unless listed
    in `strings` (non-empty JSON strings: a path); malformed JSON, unknown keys, bad booleans
    or a path that is not a string (null, a number) raise, naming the key and an example."""
    import json

    raw = os.environ.get(var, "").strip()
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise IpuConfigError(
            f"{var} is not valid JSON ({exc.msg} at character {exc.pos}): {_clipped(raw)}. "
            f"Example: {example}"
        ) from None
    except RecursionError:
        raise IpuConfigError(
            f"{var} nests too deeply to be read: it must be one flat JSON object of options, "
            f"got {_clipped(raw)}. Example: {example}"
        ) from None
    if not isinstance(parsed, dict):
        raise IpuConfigError(f"{var} must be a JSON object, got {_clipped(raw)}.")
    options: dict[str, Any] = {}
    for key, val in parsed.items():
        if key not in known:
            raise IpuConfigError(
                f"Unknown option {key!r} in {var}; the IPU Model understands: "
                f"{', '.join(sorted(known))}."
            )
        if key in strings:
            if not isinstance(val, str) or not val.strip():
                raise IpuConfigError(
                    f"Option {key!r} in {var} must be a directory name as a non-empty JSON "
                    f"string, got {json.dumps(val)}. Example: {example}"
                )
            options[key] = val
            continue
        text = str(val).strip().lower()
        if text not in ("true", "false"):
            raise IpuConfigError(
                f"Option {key!r} in {var} must be \"true\" or \"false\", got "
                f"{json.dumps(val)}. Example: {example}"
            )
        options[key] = text == "true"
    return options


def engine_options() -> dict[str, Any]:
    """POPLAR_ENGINE_OPTIONS as a dict of known keys; malformed JSON or unknown keys raise."""
    return _json_options(ENGINE_OPTIONS_VAR, ENGINE_OPTIONS, {"autoReport.directory"},
                         '{"autoReport.all": "true", "autoReport.directory": "./reports"}')


# Graphcore's host-side timeline (PopVision System Analyser), read from PVTI_OPTIONS.
PVTI_OPTIONS_VAR = "PVTI_OPTIONS"
PVTI_OPTIONS: dict[str, str] = {
    "enable": "write a host timeline of compile, execute and host<->device transfers",
    "directory": "where the timeline is written (default ./reports)",
}


def pvti_options() -> dict[str, Any]:
    """PVTI_OPTIONS as a dict of known keys; malformed JSON or unknown keys raise."""
    return _json_options(PVTI_OPTIONS_VAR, PVTI_OPTIONS, {"directory"},
                         '{"enable": "true", "directory": "./reports"}')
