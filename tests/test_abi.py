"""The plugin's own PJRT layouts against the struct_size jaxlib passes, and the version gate.

jaxlib fills every *_Args.struct_size with its own size: a free check of every layout used."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import serialize_executable

from jax_ipu import plugin
from jax_ipu.pjrt import _table, abi, slots
from jax_ipu.runtime.plan import ExecutePlan

# Layouts of the slots the C table serves (the Python ones are registered with theirs).
C_SERVED = {
    "PJRT_LoadedExecutable_Execute": abi.LoadedExecute,
    "PJRT_Buffer_ElementType": abi.BufferElementType,
    "PJRT_Buffer_Dimensions": abi.BufferDimensions,
    "PJRT_Buffer_GetMemoryLayout": abi.BufferGetMemoryLayout,
    "PJRT_Buffer_ToHostBuffer": abi.BufferToHost,
    "PJRT_Buffer_IsDeleted": abi.LoadedBool,
    "PJRT_Buffer_ReadyEvent": abi.DevicePtr,
    "PJRT_Buffer_Device": abi.DevicePtr,
    "PJRT_Executable_NumOutputs": abi.ExecutableSize,
    "PJRT_Executable_NumReplicas": abi.ExecutableSize,
    "PJRT_Executable_NumPartitions": abi.ExecutableSize,
    "PJRT_Memory_Kind": abi.MemoryString,
    "PJRT_Buffer_Delete": abi.BufferOnly,
    "PJRT_LoadedExecutable_Delete": abi.LoadedDelete,
    "PJRT_LoadedExecutable_IsDeleted": abi.LoadedBool,
    "PJRT_Event_Await": abi.EventOnly,
    "PJRT_Event_Destroy": abi.EventOnly,
    "PJRT_Event_Error": abi.EventOnly,
    "PJRT_Event_IsReady": abi.EventIsReady,
    "PJRT_Event_OnReady": abi.EventOnReady,
    "PJRT_Event_Set": abi.EventSet,
    "PJRT_Event_Create": abi.EventOnly,
}


def _exercise() -> None:
    ipu = jax.devices("ipu")[0]
    x = jax.device_put(np.arange(12, dtype=np.float32).reshape(3, 4), ipu)
    y = jax.jit(lambda a, b: (a + b, a.sum()), donate_argnums=1)(x, x + 1)
    np.asarray(y[0])
    jnp.sin(x).block_until_ready()
    ipu.memory_stats()
    compiled = jax.jit(lambda a: a * 2).lower(x).compile()
    compiled.memory_analysis()
    compiled.cost_analysis()
    serialize_executable.deserialize_and_load(*serialize_executable.serialize(compiled))
    big = jax.jit(lambda a: jnp.linalg.matrix_power(a, 8).sum())  # runs in the background
    slow = big(jax.device_put(np.ones((768, 768), np.float32), ipu))
    slow.is_ready()
    slow.block_until_ready()
    compiled(x).delete()
    x.delete()


def test_every_layout_matches_what_jaxlib_passes():
    _exercise()
    seen = _table.seen_struct_sizes()
    layouts = {name: entry[1] for name, entry in zip(slots.SLOT_NAMES, slots._HANDLERS,
                                                     strict=True) if entry}
    layouts.update(C_SERVED)
    checked = {name: (size, layouts[name].STRUCT_SIZE) for name, size in seen.items()
               if name in layouts}
    assert len(checked) >= 30, sorted(seen)
    wrong = {name: sizes for name, sizes in checked.items() if sizes[0] != sizes[1]}
    assert not wrong, f"jaxlib's struct_size vs ours: {wrong}"


def test_table_speaks_the_api_of_jaxlib():
    assert (_table.API_MAJOR, _table.API_MINOR) == (0, 112)
    assert _table.NUM_SLOTS == 138
    assert slots.SLOT_NAMES[138:] == ("PJRT_Shardings_ParameterShardings",
                                      "PJRT_Shardings_OutputShardings", "PJRT_Profiler_Create",
                                      "PJRT_Profiler_Start", "PJRT_Profiler_Stop",
                                      "PJRT_Profiler_CollectData")


@pytest.mark.parametrize("version", ["0.9.2", "0.11.0", "1.0.0"])
def test_other_jaxlib_versions_are_refused_with_one_clear_error(version):
    with pytest.raises(ImportError) as info:
        plugin.check_versions(version)
    message = str(info.value)
    assert version in message and "0.10" in message and "pip install" in message


def test_pinned_jaxlib_passes_the_gate():
    plugin.check_versions("0.10.2")


def test_the_plan_c_reads_is_the_declared_type():
    assert set(_table.plan_fields()) == {f.name for f in dataclasses.fields(ExecutePlan)}
    slots.check_plan_type(ExecutePlan)


def test_a_plan_field_renamed_on_one_side_stops_the_plugin():
    renamed = dataclasses.make_dataclass(
        "ExecutePlan", [("program_name" if f.name == "name" else f.name, f.type)
                        for f in dataclasses.fields(ExecutePlan)], frozen=True)
    with pytest.raises(ImportError, match=r"C reads \['name'\].*declares \['program_name'\]"):
        slots.check_plan_type(renamed)


def test_c_reads_no_plan_of_another_type():
    jax.devices("ipu")  # the plugin installed its plan type
    look_alike = SimpleNamespace(**{name: None for name in _table.plan_fields()})
    with pytest.raises(TypeError, match="ExecutePlan"):
        _table.new_executable(object(), look_alike)
