"""What the TPU preview's demos (pmap_cookbook, lorenz_ode, wave_equation) share: the devices
they ask for, and the IPU Model's time per step of a program with what its IPU-Links cost."""

from __future__ import annotations

import hashlib

import _common
import jax
import numpy as np


def take_devices(platform: str, count: int) -> list[jax.Device]:
    """`count` devices of `platform`, or a clear exit naming what there is and the fix."""
    _common.device_for(platform)
    devices = jax.devices(platform)
    if len(devices) < count:
        where = ("the server has" if _common.is_remote(devices[0])
                 else f"platform {platform!r} has")
        raise SystemExit(
            f"{count} devices asked for, {where} {len(devices)}: pass --devices "
            f"{len(devices)}, or start the server with --devices {count}")
    if _common.is_remote(devices[0]):
        print(f"{count} IPU Models of the jax-ipu server at {jax.config.jax_ipu_remote}")
    return devices[:count]


def step_costs(compiled: jax.stages.Compiled, device: jax.Device, steps: int,
               label: str) -> dict[str, float]:
    """Print the model's time per step of a program that runs `steps` steps per call, and what
    its collectives cost on the IPU-Links (per IPU); {} off the ipu platform."""
    if device.platform != "ipu":
        print(f"model: {label}: per-step time and IPU-Links only on the ipu platform")
        return {}
    import jax_ipu  # here: on --platform cpu the demos run on plain JAX

    report = jax_ipu.report(compiled)
    hz = report.target.clock_hz
    rows = [op for op in report.ops if op.link_bytes]
    link_cycles = sum(op.cycles for op in rows)
    link_bytes = sum(op.link_bytes for op in rows)
    step_s = report.seconds / steps
    link_s = link_cycles / hz / steps
    print(f"model: {label}: {step_s * 1e6:,.3f} us per step on each IPU "
          f"({report.seconds * 1e6:,.2f} us per call of {steps} step(s), "
          f"{report.cycles.total:,.0f} cycles at {hz / 1e9:.2f} GHz)")
    share = 100 * link_s / step_s if step_s else 0.0
    print(f"IPU-Links: {label}: each IPU sends {link_bytes:,} B per call "
          f"({link_bytes / steps:,.4g} B per step), in {link_cycles / hz * 1e6:,.3f} us per call "
          f"({share:.1f}% of its time)")
    # One line per source line: a loop's collectives, or a Python loop's, are summed.
    lines: dict[tuple[str, str], list] = {}
    for op in rows:
        line = lines.setdefault((op.kind, op.location), [0, 0, 0.0, op.note])
        line[0] += op.executions
        line[1] += op.link_bytes
        line[2] += op.cycles
    for (kind, location), (count, nbytes, cycles, note) in lines.items():
        print(f"  {kind} x{count} at {location}: {nbytes:,} B, {cycles:,.0f} cycles; "
              f"the first: {note}")
    return {"step_us": step_s * 1e6, "link_us": link_s * 1e6,
            "link_bytes": float(link_bytes / steps)}


def digest(*arrays: np.ndarray) -> str:
    """A fingerprint of arrays' bytes: equal runs print the same one."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]
