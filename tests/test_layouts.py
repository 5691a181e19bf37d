"""Layouts on ipu as on cpu: JAX's row-major defaults, user Formats end to end, LayoutConstraint.

Every figure (reported layout and values) is compared with the same program on jax's cpu."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.experimental.layout import Format, Layout
from jax.sharding import SingleDeviceSharding

PLATFORMS = ("cpu", "ipu")
X = np.arange(16 * 256, dtype=np.float32).reshape(16, 256)
CUSTOM = [Layout((0, 1)), Layout((1, 0), tiling=((8, 128),)), Layout((0, 1), tiling=((8, 128),))]


def _on(platform: str) -> tuple[jax.Device, SingleDeviceSharding]:
    device = jax.devices(platform)[0]
    return device, SingleDeviceSharding(device)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_transpose_reports_jax_default_row_major(platform):
    device, _ = _on(platform)
    x = jax.device_put(np.arange(32, dtype=np.float32).reshape(4, 4, 2), device)
    compiled = jax.jit(lambda a: (a.T, a + 1)).lower(x).compile()
    assert [f.layout.major_to_minor for f in compiled.output_formats] == [(0, 1, 2)] * 2
    assert compiled.input_formats[0][0].layout.major_to_minor == (0, 1, 2)


@pytest.mark.parametrize("layout", CUSTOM, ids=str)
def test_user_output_layout_honoured_as_on_cpu(layout):
    results = {}
    for platform in PLATFORMS:
        device, sharding = _on(platform)
        f = jax.jit(lambda a: a * 2 + 1, out_shardings=Format(layout, sharding))
        out = f(jax.device_put(X, device))
        assert out.format.layout.major_to_minor == layout.major_to_minor
        assert tuple(out.format.layout.tiling or ()) == tuple(layout.tiling or ())
        assert f.lower(jax.device_put(X, device)).compile().output_formats.layout == \
            out.format.layout
        # values read back, reduced by a default-layout program, and moved to cpu
        results[platform] = (np.asarray(out), np.asarray(jax.jit(lambda a: a.sum(0))(out)),
                             np.asarray(jax.device_put(out, jax.devices("cpu")[0])))
    for got, expected in zip(results["ipu"], results["cpu"], strict=True):
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(results["ipu"][0], X * 2 + 1)


@pytest.mark.parametrize("layout", CUSTOM, ids=str)
def test_device_put_and_input_layouts(layout):
    results = {}
    for platform in PLATFORMS:
        _, sharding = _on(platform)
        fmt = Format(layout, sharding)
        x = jax.device_put(X, fmt)
        assert x.format.layout.major_to_minor == layout.major_to_minor
        assert tuple(x.format.layout.tiling or ()) == tuple(layout.tiling or ())
        f = jax.jit(lambda a: a - 1, in_shardings=fmt)
        assert f.lower(x).compile().input_formats[0][0].layout == x.format.layout
        results[platform] = np.asarray(f(x))
    np.testing.assert_array_equal(results["ipu"], results["cpu"])
    np.testing.assert_array_equal(results["ipu"], X - 1)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_sharding_constraint_with_concrete_layout(platform):
    """with_sharding_constraint(y, Format(layout, s)) lowers to a LayoutConstraint custom call:
    the value takes that layout, the result's values are unchanged."""
    device, sharding = _on(platform)

    @jax.jit
    def f(a):
        return jax.lax.with_sharding_constraint(a.T, Format(Layout((0, 1)), sharding))

    x = jax.device_put(X, device)
    assert "LayoutConstraint" in f.lower(x).as_text()
    out = f(x)
    assert out.format.layout.major_to_minor == (0, 1)
    np.testing.assert_array_equal(out, X.T)


def test_auto_layout_resolves_to_what_xla_cpu_chose():
    layouts = {}
    for platform in PLATFORMS:
        device, sharding = _on(platform)
        f = jax.jit(lambda a: a.T, in_shardings=Format(Layout.AUTO),
                    out_shardings=Format(Layout.AUTO, sharding))
        compiled = f.lower(jax.ShapeDtypeStruct(X.shape, X.dtype, sharding=sharding)).compile()
        layouts[platform] = (compiled.input_formats[0][0].layout,
                             compiled.output_formats.layout)
    assert layouts["ipu"] == layouts["cpu"]


@pytest.mark.parametrize("platform", PLATFORMS)
def test_formats_of_a_program_with_a_sharding_constraint(platform):
    """One device's program with sdy.sharding_constraint ops (with_sharding_constraint, or a
    device_put inside jit) still reports its formats."""
    device, sharding = _on(platform)
    mesh = jax.sharding.Mesh(np.array([device]), ("i",))
    named = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("i"))
    f = jax.jit(lambda a: jax.lax.with_sharding_constraint(a * 2, named).T)
    compiled = f.lower(jax.device_put(X, device)).compile()
    assert "sharding_constraint" in f.lower(jax.device_put(X, device)).as_text()
    assert compiled.output_formats.layout.major_to_minor == (0, 1)
    np.testing.assert_array_equal(compiled(jax.device_put(X, device)), (X * 2).T)


def _entry_layout(hlo_text: str) -> str:
    """The entry_computation_layout={...} of an HLO module's text (its braces balanced)."""
    start = hlo_text.index("entry_computation_layout=") + len("entry_computation_layout=")
    depth = 0
    for end, char in enumerate(hlo_text[start:], start):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == 0:
            return hlo_text[start:end + 1]
    raise AssertionError("unbalanced entry_computation_layout")


def test_compiled_entry_layout_is_xla_cpus_with_kinds_and_tiles():
    """What jax reads back of a compiled program (as_text(), formats) states the entry layout
    XLA:CPU built it with: memory spaces of the memory kinds and a user's tiles, as on cpu."""
    layouts = {}
    for platform in PLATFORMS:
        device = jax.devices(platform)[0]

        def on(kind: str) -> SingleDeviceSharding:
            return SingleDeviceSharding(device, memory_kind=kind)  # noqa: B023 - used at once

        tiled = Format(Layout((1, 0), tiling=((8, 128),)), on("unpinned_host"))
        f = jax.jit(lambda a, b: (a * 2, (b + 1).T), in_shardings=(on("pinned_host"), on("device")),
                    out_shardings=(on("pinned_host"), tiled))
        compiled = f.lower(X, X).compile()
        layouts[platform] = (_entry_layout(compiled.as_text()), compiled.output_formats)
        out = f(X, X)
        np.testing.assert_array_equal(out[1], (X + 1).T)
    assert layouts["ipu"][0] == layouts["cpu"][0]
    assert "S(5)" in layouts["ipu"][0] and "T(8,128)" in layouts["ipu"][0]
    assert [f.layout for f in layouts["ipu"][1]] == [f.layout for f in layouts["cpu"][1]]


def test_compiled_text_of_one_device_is_xla_cpus_optimized_module_as_on_cpu():
    """jax reads back XLA:CPU's optimized module of a one-device program, as cpu answers for
    its own: the same fusions, entry computation and layouts."""
    f = jax.jit(lambda a: jax.numpy.sin(a) * 2 + a.T)

    def entry(platform: str) -> str:
        text = f.lower(jax.device_put(X[:, :16], jax.devices(platform)[0])).compile().as_text()
        return text[text.index("\nENTRY "):]

    assert entry("ipu") == entry("cpu")
    assert "fusion(" in entry("ipu")
