"""The IPU Model client: its devices, the private XLA:CPU client holding their data, and compile.

Created once per process from the flags in config.py, when jax first asks for the ipu backend."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
import weakref
from dataclasses import asdict, dataclass
from typing import Any

import jax
import numpy as np

from jax_ipu import _internals, compiler, config, profile, signposts
from jax_ipu.errors import IpuConfigError, IpuError, IpuOutOfMemoryError
from jax_ipu.model import TO_DEVICE
from jax_ipu.model.streaming import UNPINNED_HOST, move
from jax_ipu.model.targets import Target
from jax_ipu.runtime import serialized
from jax_ipu.runtime.cluster import Cluster
from jax_ipu.runtime.device import IpuDevice, IpuMemory
from jax_ipu.runtime.executable import IpuExecutable

logger = logging.getLogger(__name__)

NO_HARDWARE = (
    "jax_ipu_use_model=False asks for IPU hardware, which needs Graphcore's Poplar SDK and an "
    "IPU attached to this machine. Neither is available: the Poplar SDK cannot be installed from "
    "any package registry, and this build of jax-ipu has no hardware path. Use the IPU Model "
    "(jax_ipu_use_model=True, the default)."
)


@dataclass(frozen=True)
class Settings:
    """The flags a client is made from, read once when jax creates the backend."""

    target: Target
    device_ids: tuple[int, ...]
    allow_out_of_memory: bool  # POPLAR_ENGINE_OPTIONS' debug.allowOutOfMemory

    @classmethod
    def from_config(cls) -> Settings:
        config.check_environment()
        signposts.warn_fork_environment()
        if not config.value("jax_ipu_use_model"):
            raise IpuError(NO_HARDWARE)
        target = config.target()
        count = config.value("jax_ipu_device_count")
        visible = config.value("jax_ipu_visible_devices")
        ids = tuple(int(i) for i in visible.split(",")) if visible.strip() else ()
        if ids and count not in (-1, len(ids)):
            raise IpuConfigError(
                f"jax_ipu_device_count={count} but jax_ipu_visible_devices={visible!r} lists "
                f"{len(ids)} devices: set one of them, or make them agree."
            )
        if not ids:
            ids = tuple(range(1 if count == -1 else count))
        allow = bool(config.engine_options().get("debug.allowOutOfMemory", False))
        return cls(target=target, device_ids=ids, allow_out_of_memory=allow)


_LIVE: list[IpuClient] = []  # clients live until the process ends, as jaxlib keeps them


def live_clients() -> list[IpuClient]:
    """Every IPU Model client of this process (normally one, made by jax)."""
    return list(_LIVE)


def find_device(device_id: int) -> IpuDevice:
    """The runtime device behind jax's ipu device with this id."""
    for client in _LIVE:
        if device_id in client.by_id:
            return client.by_id[device_id]
    raise IpuError(f"No ipu device with id {device_id} in this process.")


def check_loaded(loaded: Any) -> None:
    """Refuse a loaded executable whose jaxlib wrapper (the part of a serialized executable
    jaxlib writes, before this plugin's sealed bytes) names output memory kinds other than the
    ones the program's outputs are in: jaxlib would abort the process at the first call."""
    exe = find_executable(loaded.fingerprint.decode())
    claimed = [tuple(kinds) for kinds in loaded.get_output_memory_kinds()]
    if any(kinds != exe.output_kinds for kinds in claimed):
        names = sorted({k for kinds in claimed for k in kinds} - set(exe.output_kinds))
        raise serialized.StaleExecutableError(
            f"a serialized ipu executable whose jaxlib wrapper places outputs in memory kinds "
            f"{claimed[0] if len(claimed) == 1 else claimed}, not in the program's "
            f"{list(exe.output_kinds)}"
            + (f" (ipu has no memory kind {', '.join(map(repr, names))})" if names else "")
            + ": it was changed since it was written. Compile the program again")


def find_executable(fingerprint: str) -> IpuExecutable:
    """The live executable with this fingerprint (what jax's compiled objects carry)."""
    for client in _LIVE:
        exe = client.executables.get(fingerprint)
        if exe is not None:
            return exe
    raise IpuError(
        "This compiled program is not an ipu program of this process (compile it with "
        "jax.jit(f, backend='ipu') or on ipu arrays)."
    )


class IpuClient:
    """The devices of this process and the operations PJRT asks of them."""

    platform_name = "ipu"

    def __init__(self, settings: Settings, cluster: Cluster | None = None) -> None:
        self.settings = settings
        self.cluster = cluster
        self.process_index = cluster.process_index if cluster else 0
        count = len(settings.device_ids)
        if cluster is None:
            self.cpu_client = _internals.get_tfrt_cpu_client(asynchronous=True, num_devices=count)
        else:
            cluster.agree_target(settings.target)
            self.cpu_client = _internals.get_tfrt_cpu_client(
                asynchronous=True, distributed_client=cluster.client,
                node_id=cluster.process_index, num_nodes=cluster.num_processes,
                collectives=cluster.collectives(), num_devices=count)
        self.devices = self._make_devices()
        self.addressable = [d for d in self.devices if d.process_index == self.process_index]
        self.by_id = {d.id: d for d in self.devices}
        # Each memory's arrays live in the same memory kind of its CPU device, so that the
        # XLA:CPU executables find their arguments where the programs declare them.
        self._shardings = {(d.id, kind): jax.sharding.SingleDeviceSharding(d.cpu_device,
                                                                            memory_kind=kind)
                           for d in self.addressable for kind in d.memories}
        self.build = serialized.build_id()
        target = settings.target
        # jax's compilation cache keys on it: everything a compile's result depends on (the
        # build, every field of the target the model judges with, debug.allowOutOfMemory).
        fields = json.dumps(asdict(target), sort_keys=True, default=sorted)  # sets
        target_digest = hashlib.sha256(fields.encode()).hexdigest()[:12]
        self.platform_version = (
            f"IPU Model {target.version}, {target.num_tiles} tiles (jax-ipu {self.build}, "
            f"target {target_digest}"
            + (", debug.allowOutOfMemory" if settings.allow_out_of_memory else "") + ")")
        self.executables: weakref.WeakValueDictionary[str, IpuExecutable] = (
            weakref.WeakValueDictionary())
        self.profiler = profile.from_environment()
        _LIVE.append(self)
        logger.info("IPU Model client: %s", self.devices)

    def _make_devices(self) -> list[IpuDevice]:
        """This process's devices; in a multi-process run, every process's, numbered globally.

        Alone, a device's id is its IPU id (jax_ipu_visible_devices). Among processes, ids run
        0, 1, ... in process order, as jax numbers GPUs, and the IPU id is the local hardware id.
        """
        target, local_ids = self.settings.target, self.settings.device_ids
        if self.cluster is None:
            return [IpuDevice(i, target, cpu, 0, i, self)
                    for i, cpu in zip(local_ids, self.cpu_client.local_devices(), strict=True)]
        cpu_devices = sorted(self.cpu_client.devices(), key=lambda d: (d.process_index, d.id))
        devices, ordinal = [], {}
        for global_id, cpu in enumerate(cpu_devices):
            k = ordinal[cpu.process_index] = ordinal.get(cpu.process_index, -1) + 1
            local_id = local_ids[k] if cpu.process_index == self.process_index else k
            devices.append(IpuDevice(global_id, target, cpu, cpu.process_index, local_id, self))
        return devices

    @property
    def memories(self) -> list[IpuMemory]:
        return [m for d in self.addressable for m in d.memories.values()]

    def device(self, device_id: int) -> IpuDevice:
        try:
            return self.by_id[device_id]
        except KeyError:
            raise IpuError(
                f"No ipu device with id {device_id}; this process has ids "
                f"{sorted(self.by_id)} (see jax_ipu_device_count / jax_ipu_visible_devices)."
            ) from None

    def compile(self, code: bytes, options: bytes) -> IpuExecutable:
        """The program jax sent, compiled for the devices its options assign (see
        compiler.compile), as an executable of this client."""
        start = time.perf_counter()
        compiled = compiler.compile(code, options, self.settings.target, self.cpu_client,
                                    self._cpu_device_of, self.settings.allow_out_of_memory)
        return self._load(compiled, code, options, start)

    def serialize(self, exe: IpuExecutable) -> bytes:
        """What jax's compilation cache and serialize_executable keep of an executable."""
        c = exe.compiled
        return serialized.dumps(serialized.Blob(
            self.build, exe.code, exe.options, c.cpu_executable.serialize(), c.program, c.report,
            c.assignment, c.outputs))

    def deserialize(self, data: bytes, options: bytes | None = None) -> IpuExecutable:
        """An executable serialize() made (in this or another process of the same build),
        loaded for the devices `options` (else its own compile options) assign."""
        start = time.perf_counter()
        blob = serialized.loads(data, self.build)
        options = options or blob.options
        compiled = compiler.load(blob.code, options, blob.cpu_executable, blob.program,
                                 blob.report, blob.outputs, self.cpu_client, self._cpu_device_of)
        return self._load(compiled, blob.code, options, start)

    @functools.cached_property
    def _cpu_device_of(self) -> dict[int, Any]:
        return {d.id: d.cpu_device for d in self.devices}

    def _load(self, compiled: compiler.Compiled, code: bytes, options: bytes, start: float
              ) -> IpuExecutable:
        devices = [self.device(int(i)) for i in compiled.assignment.flat]
        exe = IpuExecutable(compiled, devices, code, options, self.profiler, self.process_index)
        self.executables[exe.fingerprint] = exe
        if self.profiler:
            self.profiler.compiled(exe, start, time.perf_counter())
        return exe

    def put(self, host: np.ndarray, memory: IpuMemory) -> Any:
        """Host -> a device's memory: a CPU array with a copy of `host`, which may be a view of
        memory the caller reuses once this returns. Refused when that memory cannot hold it."""
        _check_room(memory, host, "a transfer")
        listener = profile.listening(self.profiler)
        start = time.perf_counter() if listener else 0.0
        array = self._place(host, memory)
        if memory.kind != UNPINNED_HOST:  # host memory is the host's own: nothing moves
            device = memory.device
            cycles = device.charge(memory.transfer_advance(host.nbytes, TO_DEVICE))
            if listener:
                listener.transferred("host_to_device", host.nbytes, device, start,
                                     time.perf_counter(), cycles)
        return array

    def _place(self, host: np.ndarray, memory: IpuMemory) -> Any:
        device = memory.device
        # Copied during the call (IMMUTABLE_ONLY_DURING_CALL): `host` may be jaxlib's memory.
        return _internals.batched_device_put(
            aval(host.shape, host.dtype), self._shardings[device.id, memory.kind], [host],
            [device.cpu_device], True, True,
            _internals.HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL)

    def fetched(self, device: IpuDevice) -> Any:
        """What the PJRT layer calls after it read a buffer of `device` back to the host over
        the host link (it charges the device's clock itself, by the memory's read_advance):
        fetched(nbytes, start_s, end_s, cycles), or None when nothing is profiled."""
        if not self.profiler:
            return None
        profiler = self.profiler

        def fetched(nbytes: int, start: float, end: float, cycles: int) -> None:
            profiler.transferred("device_to_host", nbytes, device, start, end, cycles)

        return fetched

    def copy(self, array: Any, source: IpuMemory, dest: IpuMemory) -> Any:
        """One memory -> another: between the kinds of one device, a move the model charges
        (over the gateway for Streaming Memory, the host link for host memory); to another
        device, through the host in this model (over IPU-Links on hardware)."""
        listener = profile.listening(self.profiler)
        start = time.perf_counter() if listener else 0.0
        if source.device is not dest.device:
            host = np.asarray(array)
            if source.kind != UNPINNED_HOST:
                cycles = source.device.charge(source.read_advance(host.nbytes))
                if listener:
                    listener.transferred("device_to_host", host.nbytes, source.device,
                                         start, time.perf_counter(), cycles)
            return self.put(host, dest)
        host = np.asarray(array)
        _check_room(dest, host, "a copy")
        moved = move(host.nbytes, source.kind, dest.kind, dest.device.target)
        dest.device.advance("streaming_setup", moved.setup_cycles)
        dest.device.advance("streaming", moved.transfer_cycles)
        placed = self._place(host, dest)
        if listener and moved.total:
            listener.moved(dest.device, host.nbytes, source.kind, dest.kind, start,
                           time.perf_counter(), moved.setup_cycles, moved.transfer_cycles)
        return placed


def _check_room(memory: IpuMemory, host: np.ndarray, what: str) -> None:
    """Refuse, naming the memory, the figures and the fixes, an array its memory cannot hold
    (`what` moves it: "a transfer", "a copy")."""
    free = memory.bytes_free
    if free is not None and host.nbytes > free:
        raise IpuOutOfMemoryError(memory.shortfall(
            host.nbytes, f"{what} of {host.dtype.name}{list(host.shape)}"))


@functools.lru_cache(maxsize=1024)
def aval(shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """jax's abstract value of an array (kept built: every put and result of a loop asks)."""
    return jax.core.ShapedArray(shape, dtype)
