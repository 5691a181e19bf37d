"""Tests of the host side of the IPU Model: host link each way, stream-copy set-up, per call.

Expectations are hand-computed from the named constants in jax_ipu/model/targets.py (H-1, H-3)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import pytest

from jax_ipu.compiler.program import read_program
from jax_ipu.model import (
    TO_DEVICE,
    TO_HOST,
    analyze,
    call_overhead_cycles,
    get_target,
    host_transfer,
    host_transfer_cycles,
)
from jax_ipu.model.cycles import host_transfer_cycles as runtime_import
from jax_ipu.model.ir import Op, Program, TensorType
from jax_ipu.model.targets import (
    CALL_HOST_SYNCS,
    HOST_STAGING_BYTES_PER_S,
    HOST_SYNC_S,
    IPU2_CLOCK_HZ,
    IPU2_DEVICE_TO_HOST_BYTES_PER_S,
    IPU2_HOST_TO_DEVICE_BYTES_PER_S,
    STREAM_COPY_MID_S,
    VERSIONS,
)
from tests._lowering import portable_artifact

MIB = 1 << 20
# H-3: StreamCopyBegin (~82k cycles) + StreamCopyMid's fixed part (~1.5k) + StreamCopyEnd
SETUP = math.ceil((2 * HOST_SYNC_S + STREAM_COPY_MID_S) * IPU2_CLOCK_HZ)


def test_setup_is_the_measured_stream_copy():
    assert SETUP == 2 * 82_000 + 1_500 == 165_500


def test_one_mib_each_way_hand_computed():
    target = get_target("ipu2")
    up = host_transfer(MIB, target, TO_DEVICE)
    down = host_transfer(MIB, target, TO_HOST)
    assert up.setup_cycles == down.setup_cycles == SETUP
    assert up.link_cycles == math.ceil(MIB / IPU2_HOST_TO_DEVICE_BYTES_PER_S * IPU2_CLOCK_HZ)
    assert down.link_cycles == math.ceil(MIB / IPU2_DEVICE_TO_HOST_BYTES_PER_S * IPU2_CLOCK_HZ)
    assert up.link_cycles == pytest.approx(197_537, abs=1)  # 149 us
    assert down.link_cycles == pytest.approx(475_975, abs=1)  # 358 us
    # the host's staging copy between the user's array and the stream buffer (H-5): 273 us
    staging = math.ceil(MIB / HOST_STAGING_BYTES_PER_S * IPU2_CLOCK_HZ)
    assert up.staging_cycles == down.staging_cycles == staging == 363_179
    assert up.total == SETUP + up.link_cycles + staging
    assert host_transfer_cycles(MIB, target, TO_HOST) == SETUP + down.link_cycles + staging
    # the link back to the host is 2.4x slower (H-1: 56.5 against 23.5 Gbit/s)
    assert down.link_cycles / up.link_cycles == pytest.approx(7.06 / 2.93, rel=1e-4)


def test_nothing_moved_costs_nothing():
    target = get_target("ipu2")
    assert host_transfer(0, target, TO_HOST).total == 0
    assert host_transfer_cycles(0, target) == 0


def test_default_direction_and_the_runtime_import_path():
    # runtime/client.py imports host_transfer_cycles from model.cycles with (nbytes, target)
    target = get_target("ipu2")
    assert runtime_import is host_transfer_cycles
    assert runtime_import(MIB, target) == host_transfer(MIB, target, TO_DEVICE).total


def test_unknown_direction_is_refused():
    with pytest.raises(ValueError, match="to_device"):
        host_transfer(4, get_target("ipu2"), "sideways")


def test_call_overhead_is_two_host_handshakes():
    target = get_target("ipu2")
    assert call_overhead_cycles(target) == math.ceil(CALL_HOST_SYNCS * HOST_SYNC_S *
                                                     IPU2_CLOCK_HZ) == 164_000


@pytest.mark.parametrize("version", VERSIONS)
def test_host_costs_are_the_same_time_on_every_chip(version):
    # the handshakes are host-side: the same microseconds at each chip's clock
    target = get_target(version)
    assert call_overhead_cycles(target) / target.clock_hz == pytest.approx(
        CALL_HOST_SYNCS * HOST_SYNC_S, rel=1e-5)


def test_report_per_call_host_cycles_use_each_direction():
    target = get_target("ipu2")
    r = analyze(read_program(portable_artifact(lambda a, b: a @ b, jax.ShapeDtypeStruct(
        (256, 256), jnp.float32), jax.ShapeDtypeStruct((256, 256), jnp.float32))), target)
    nbytes = 256 * 256 * 4
    assert r.cycles.host_input_cycles_per_call == 2 * host_transfer_cycles(nbytes, target,
                                                                           TO_DEVICE)
    assert r.cycles.host_output_cycles_per_call == host_transfer_cycles(nbytes, target, TO_HOST)


def test_host_callback_streams_out_and_back():
    # a host callback (what jax.pure_callback lowers to): its operand streams to the host,
    # its result back
    t = TensorType((1024,), "float32")
    call = Op("stablehlo.custom_call", (t,), (t,), (0,), (1,),
              {"call_target_name": "xla_ffi_python_cpu_callback"})
    target = get_target("ipu2")
    r = analyze(Program("jit_f", (t,), (t,), [call], (0,), (1,)), target)
    (row,) = r.ops
    assert row.host_cycles == host_transfer_cycles(4096, target, TO_HOST) + \
        host_transfer_cycles(4096, target, TO_DEVICE)
    assert r.cycles.host_exchange == row.host_cycles


def test_staging_is_host_time_on_every_chip():
    # the staging copy is the host's: the same microseconds at each chip's clock
    for version in VERSIONS:
        target = get_target(version)
        assert host_transfer(MIB, target).staging_cycles / target.clock_hz == pytest.approx(
            MIB / HOST_STAGING_BYTES_PER_S, rel=1e-5)
