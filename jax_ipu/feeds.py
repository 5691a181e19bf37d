"""Infeed and outfeed queues for on-device loops: the host fills one that jitted code reads a batch
at a time, jitted code fills the other and the host drains it; each transfer is a host callback."""

from __future__ import annotations

import collections
import functools
import threading
from collections.abc import Hashable
from typing import Any

import jax
import numpy as np
from jax.experimental import io_callback

from jax_ipu.errors import IpuFeedError

__all__ = ["InfeedQueue", "OutfeedQueue"]

AxisName = Hashable | tuple[Hashable, ...]


def _axis_size(axis_name: AxisName) -> int:
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    size = 1
    for name in names:
        size *= jax.lax.axis_size(name)
    return size


def _replica_index(queue: str, replicas: int, axis_name: AxisName | None) -> tuple[Any, ...]:
    """The operands telling the host callback which device runs it: none on one device, the
    device's index along `axis_name` under pmap/shard_map. Checked while tracing."""
    if axis_name is None:
        if replicas > 1:
            raise IpuFeedError(
                f"{queue} serves {replicas} devices: inside jax.pmap or jax.shard_map, pass the "
                "mapped axis name (e.g. axis_name='i'), so that each device takes its own items."
            )
        return ()
    try:
        size = _axis_size(axis_name)
    except NameError as exc:
        raise IpuFeedError(
            f"{queue}: axis_name={axis_name!r} is not a mapped axis here ({exc}). Use it inside "
            "jax.pmap(..., axis_name=...) or jax.shard_map over a mesh with that axis."
        ) from None
    if size != replicas:
        raise IpuFeedError(
            f"{queue} was made with replicas={replicas} but axis {axis_name!r} has {size} "
            f"devices: make the queue with replicas={size}."
        )
    return (jax.lax.axis_index(axis_name),)


def _describe(spec: jax.ShapeDtypeStruct) -> str:
    return f"{np.dtype(spec.dtype).name}{list(spec.shape)}"


class InfeedQueue:
    """A host-filled queue of batches that jitted code reads one batch at a time.

    `spec` is a pytree of arrays or `jax.ShapeDtypeStruct` giving the structure, shape and dtype
    of one batch (for one device). With `replicas=N` the queue serves N devices under
    `jax.pmap`/`jax.shard_map`: each `put` then takes leaves with a leading axis of N, as pmap
    takes its arguments, and device k reads row k.

    Host side: `put(batch)` adds a batch (copied, checked against `spec`). Device side: `get()`
    inside the jitted function returns the next batch (`get(axis_name)` under pmap/shard_map).
    An empty queue when the program asks for a batch fails that call with an error saying so."""

    def __init__(self, spec: Any, *, replicas: int = 1, name: str = "infeed") -> None:
        if not isinstance(replicas, int) or replicas < 1:
            raise IpuFeedError(f"replicas must be a whole number >= 1, not {replicas!r}.")
        leaves, self._tree = jax.tree.flatten(spec)
        if not leaves:
            raise IpuFeedError("An InfeedQueue needs a spec with at least one array.")
        try:
            self._specs = tuple(
                jax.ShapeDtypeStruct(tuple(leaf.shape), jax.dtypes.canonicalize_dtype(leaf.dtype))
                for leaf in leaves)
        except AttributeError:
            raise IpuFeedError(
                "InfeedQueue(spec): every leaf of spec must have a shape and a dtype (an array or "
                f"jax.ShapeDtypeStruct); got {spec!r}."
            ) from None
        self.replicas = replicas
        self.name = name
        self._items: list[collections.deque[tuple[np.ndarray, ...]]] = [
            collections.deque() for _ in range(replicas)]
        # Batches put since the queue was last empty (a fill, e.g. one epoch's), per device: the
        # count an empty queue's error gives. A call's own boundaries are not visible from a
        # host callback, so the count is the fill's, not the queue's whole life.
        self._filled = [0] * replicas
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"InfeedQueue({self.name!r}, {len(self)} batches waiting, replicas={self.replicas})"

    @property
    def spec(self) -> Any:
        """Structure, shapes and dtypes of one batch for one device."""
        return jax.tree.unflatten(self._tree, self._specs)

    def __len__(self) -> int:
        """Batches waiting (for each device)."""
        with self._lock:
            return len(self._items[0])

    def put(self, batch: Any) -> None:
        """Add one batch (host side). Wrong structure, shape or dtype raises IpuFeedError here."""
        leaves, tree = jax.tree.flatten(batch)
        if tree != self._tree:
            raise IpuFeedError(
                f"{self._label()}: the batch has structure {tree}, but the queue was made for "
                f"{self._tree}. Put batches with the structure of the spec."
            )
        lead = (self.replicas,) if self.replicas > 1 else ()
        arrays = []
        for i, (leaf, spec) in enumerate(zip(leaves, self._specs, strict=True)):
            array = np.asarray(leaf)
            want = lead + tuple(spec.shape)
            if array.dtype != spec.dtype or array.shape != want:
                per = f" ({self.replicas} devices x {list(spec.shape)})" if lead else ""
                raise IpuFeedError(
                    f"{self._label()}: leaf {i} of the batch is {array.dtype.name}"
                    f"{list(array.shape)}, but the queue takes {np.dtype(spec.dtype).name}"
                    f"{list(want)}{per}. Convert it (e.g. np.asarray(x, np.{spec.dtype.name})) "
                    "or make the queue with a spec of this shape and dtype."
                )
            # A copy: the caller may reuse its buffer before the device reads this batch.
            arrays.append(np.array(array, copy=True))
        with self._lock:
            for k, items in enumerate(self._items):
                if not items:
                    self._filled[k] = 0
                items.append(tuple(a[k] for a in arrays) if lead else tuple(arrays))
                self._filled[k] += 1

    def clear(self) -> None:
        """Drop every waiting batch."""
        with self._lock:
            for items in self._items:
                items.clear()
            self._filled = [0] * self.replicas

    def get(self, axis_name: AxisName | None = None) -> Any:
        """The next batch (device side, inside the jitted function; in a loop, one per step).

        Under pmap/shard_map pass the mapped axis name (or a tuple of names, as lax.axis_index
        takes): device k then reads its own row k of each batch. Every device must read as many
        batches per call as the others."""
        args = _replica_index(self._label(), self.replicas, axis_name)
        leaves = io_callback(self._dequeue, list(self._specs), *args, ordered=True)
        return jax.tree.unflatten(self._tree, leaves)

    def _dequeue(self, index: Any = 0) -> list[np.ndarray]:
        k = int(index)
        with self._lock:
            items = self._items[k]
            if not items:
                device = f" for device {k}" if self.replicas > 1 else ""
                filled = self._filled[k]
                what = (f"after reading all {filled} put since the queue was last empty, and "
                        "none has been put since" if filled else
                        "but none has been put since the queue was made or cleared")
                raise IpuFeedError(
                    f"{self._label()} is empty: the program asked for a batch{device} {what}. "
                    "Put one batch per get() the call makes (e.g. every batch of the epoch) "
                    "before calling the jitted function."
                )
            return list(items.popleft())

    def _label(self) -> str:
        return f"InfeedQueue {self.name!r}"


class OutfeedQueue:
    """A queue that jitted code fills (losses, metrics) and the host drains.

    Device side: `put(value)` inside the jitted function enqueues a pytree of arrays
    (`put(value, axis_name)` under pmap/shard_map). Host side: `drain()` returns what was
    enqueued so far, oldest first. Gradients do not flow through `put`."""

    def __init__(self, *, replicas: int = 1, name: str = "outfeed") -> None:
        if not isinstance(replicas, int) or replicas < 1:
            raise IpuFeedError(f"replicas must be a whole number >= 1, not {replicas!r}.")
        self.replicas = replicas
        self.name = name
        self._items: list[list[Any]] = [[] for _ in range(replicas)]
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OutfeedQueue({self.name!r}, {len(self)} items waiting, replicas={self.replicas})"

    def __len__(self) -> int:
        """Items waiting (complete across devices)."""
        with self._lock:
            return min(len(items) for items in self._items)

    def put(self, value: Any, axis_name: AxisName | None = None) -> None:
        """Enqueue `value`, a pytree of arrays (device side, inside the jitted function).

        Under pmap/shard_map pass the mapped axis name: each device's values are kept apart
        and `drain()` stacks them, device k in row k."""
        args = _replica_index(f"OutfeedQueue {self.name!r}", self.replicas, axis_name)
        leaves, tree = jax.tree.flatten(value)
        # put() only observes values: no gradient flows into it (io_callback has no JVP).
        leaves = [jax.lax.stop_gradient(leaf) for leaf in leaves]
        io_callback(functools.partial(self._enqueue, tree, len(args)), None, *args, *leaves,
                    ordered=True)

    def _enqueue(self, tree: Any, has_index: int, *values: Any) -> None:
        k = int(values[0]) if has_index else 0
        arrays = [np.array(v, copy=True) for v in values[has_index:]]
        with self._lock:
            self._items[k].append(jax.tree.unflatten(tree, arrays))

    def drain(self) -> list[Any]:
        """Everything enqueued so far, oldest first, and empty the queue (host side).

        With replicas=N each item's leaves have a leading axis of N (device k in row k); an item
        some devices have not enqueued yet stays for the next drain."""
        with self._lock:
            count = min(len(items) for items in self._items)
            taken = [items[:count] for items in self._items]
            for items in self._items:
                del items[:count]
        if self.replicas == 1:
            return taken[0]
        return [jax.tree.map(lambda *rows: np.stack(rows), *per_device)
                for per_device in zip(*taken, strict=True)]
