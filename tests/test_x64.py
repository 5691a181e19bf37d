"""jax_enable_x64 on ipu: 32-bit programs still run and match CPU; float64 is refused clearly,
naming the user's line: of an eager op, of a library's op (with the library), of the call.

Also: a custom call with no IPU implementation fails at compile with its name and source line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from tests._subprocess import run_python

X64 = {"JAX_ENABLE_X64": "1"}

X64_PROGRAM = """
    import jax, jax.numpy as jnp, numpy as np
    assert jax.config.jax_enable_x64
    ipu, cpu = jax.devices("ipu")[0], jax.devices("cpu")[0]

    def f32_step(w, x):
        return jnp.tanh(x @ w).sum(axis=0) + jnp.arange(3, dtype=jnp.int32).astype(jnp.float32)

    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    x = np.linspace(0, 2, 20, dtype=np.float32).reshape(5, 4)
    got = jax.jit(f32_step)(jax.device_put(w, ipu), jax.device_put(x, ipu))
    want = jax.jit(f32_step)(jax.device_put(w, cpu), jax.device_put(x, cpu))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    idx = jax.jit(lambda v: (v * 3) // 2)(jax.device_put(np.arange(6, dtype=np.int64), ipu))
    print("INT64", np.asarray(idx).tolist(), idx.dtype)
    try:
        jax.jit(lambda v: jnp.sin(v.astype(jnp.float64)))(jax.device_put(w, ipu))
    except Exception as e:
        print("REFUSED", e)
"""


def test_x64_keeps_32_bit_programs_running_and_refuses_float64():
    out = run_python(X64_PROGRAM, env=X64).stdout
    assert "INT64 [0, 1, 3, 4, 6, 7] int64" in out
    assert "REFUSED INVALID_ARGUMENT" in out
    assert "float64" in out and "ipu2 has no float64" in out
    assert "<string>:18 (<lambda>)" in out  # the line with the float64 conversion
    assert "disable x64" in out


def test_unknown_custom_call_fails_at_compile_with_name_and_line():
    out = run_python("""
        import jax, jax.numpy as jnp, numpy as np
        from jax._src.interpreters import mlir
        from jax.extend.core import Primitive
        from jax._src.lib.mlir.dialects import hlo

        secret = Primitive("secret_op")
        secret.def_abstract_eval(lambda x: x)

        def lowering(ctx, x):
            return hlo.CustomCallOp([x.type], [x], call_target_name="my_lapack_kernel").results

        mlir.register_lowering(secret, lowering)
        x = jax.device_put(np.ones(4, np.float32), jax.devices("ipu")[0])
        try:
            jax.jit(lambda v: secret.bind(v) * 2)(x)
        except Exception as e:
            print("REFUSED", e)
    """).stdout
    assert "REFUSED" in out
    assert "my_lapack_kernel" in out
    assert "<string>:16" in out


LIBRARY_PROGRAM = """
    import sys
    sys.path.insert(0, {site!r})
    import jax, jax.numpy as jnp, numpy as np
    import fakeopt
    assert "site-packages" in fakeopt.__file__

    @jax.jit
    def step(w, mu, count):
        update, mu = fakeopt.scale_by_adam(2 * w, mu, count)
        return w - 0.1 * update, mu

    def run(device):
        args = [jax.device_put(a, device) for a in
                (np.linspace(-1, 1, 4, dtype=np.float32), np.zeros(4, np.float32), np.int32(3))]
        return step(*args)

    try:
        run(jax.devices("ipu")[0])
    except Exception as e:
        print("REFUSED", e)
    # The real way out: trace the step with x64 off; the library then computes in float32.
    with jax.enable_x64(False):
        got, want = run(jax.devices("ipu")[0]), run(jax.devices("cpu")[0])
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    print("FIXED", got[0].dtype, np.asarray(got[0]).round(4).tolist())
"""


def test_float64_made_inside_a_library_names_it_and_the_real_options(tmp_path: Path):
    package = tmp_path / "site-packages" / "fakeopt"
    package.mkdir(parents=True)
    shutil.copy(Path(__file__).with_name("_fake_optimizer.py"), package / "__init__.py")
    out = run_python(LIBRARY_PROGRAM.format(site=str(package.parent)), env=X64).stdout
    refused = out.split("FIXED")[0]
    library = f"{package / '__init__.py'}:"
    assert "REFUSED INVALID_ARGUMENT: jit_step cannot run on ipu2" in refused
    assert "compiled for the call at <string>:16 (run)" in refused
    # Each float64 op: the library's line, the library, and the user's line that called it.
    assert f"stablehlo.power with float64 at {library}" in refused
    assert "(scale_by_adam) inside the library 'fakeopt', called from your code at <string>:10 " \
        "(step)" in refused
    assert "the float64 is made inside 'fakeopt', not in your code" in refused
    assert "keeping them float32 cannot remove it" in refused
    assert "`with jax.enable_x64(False):` around the call" in refused
    assert "jax.config.update('jax_enable_x64', False)" in refused
    # The user's own code makes no float64: the float32 advice for user code is not given.
    assert "keep the arrays float32 (e.g. .astype" not in refused
    assert "FIXED float32" in out  # and equal to cpu's step with x64 off


USER_FLOAT64_PROGRAM = """
    import sys
    sys.path.insert(0, {site!r})
    import jax, jax.numpy as jnp, numpy as np
    import fakeopt

    @jax.jit
    def step(w, count):
        mu = jnp.zeros(4, dtype=jnp.float64)
        update, mu = fakeopt.scale_by_adam(w, mu, count)
        return update

    try:
        step(*jax.device_put((np.ones(4, np.float32), np.int32(3)), jax.devices("ipu")[0]))
    except Exception as e:
        print("REFUSED", e)
"""


def _fake_library(tmp_path: Path, name: str = "fakeopt") -> Path:
    package = tmp_path / "site-packages" / name
    package.mkdir(parents=True)
    shutil.copy(Path(__file__).with_name("_fake_optimizer.py"), package / "__init__.py")
    return package.parent


def test_float64_your_own_line_makes_is_named_before_the_library(tmp_path: Path):
    out = run_python(USER_FLOAT64_PROGRAM.format(site=str(_fake_library(tmp_path))),
                     env=X64).stdout
    hint = out.split("How to fix float64: ")[1]
    # The user's line wrote dtype=jnp.float64: the advice names it, and never says the float64
    # is not the user's.
    assert hint.startswith("your code makes float64 at <string>:9 (step): use float32")
    assert "not in your code" not in hint
    assert "'fakeopt' also computes in float64" in hint  # its own power of a Python float


def test_a_library_run_by_python_m_names_no_frame_of_runpy(tmp_path: Path):
    site = _fake_library(tmp_path)
    app = site / "fakeapp"
    app.mkdir()
    (app / "__main__.py").write_text(textwrap.dedent("""
        import jax, numpy as np
        import fakeopt

        @jax.jit
        def step(w, mu, count):
            return fakeopt.scale_by_adam(2 * w, mu, count)

        args = (np.ones(4, np.float32), np.zeros(4, np.float32), np.int32(3))
        try:
            step(*jax.device_put(args, jax.devices("ipu")[0]))
        except Exception as e:
            print("REFUSED", e)
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_IPU_", "POPLAR_"))}
    env.update(X64, PYTHONPATH=str(site), TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-m", "fakeapp"], env=env, capture_output=True,
                         text=True, timeout=120, cwd=tmp_path).stdout
    assert "REFUSED" in out
    assert "runpy" not in out and "your code at" not in out
    assert f"compiled for the call at {app / '__main__.py'}:11 (<module>) inside the library " \
        "'fakeapp', with no code of yours on the call stack" in out
    assert "the float64 is made inside 'fakeopt', not in your code" in out


def test_eager_ops_name_the_line_of_each_call():
    out = run_python("""
        import jax, jax.numpy as jnp, numpy as np
        ipu = jax.devices("ipu")[0]
        x = jax.device_put(np.ones(3, np.float32), ipu)
        for attempt in range(2):
            try:
                if attempt == 0:
                    x.astype(jnp.float64)
                else:
                    x.astype(jnp.float64)
            except Exception as e:
                print("REFUSED", e)
        try:
            with jax.default_device(ipu):
                jnp.ones(3)
        except Exception as e:
            print("REFUSED", e)
    """, env=X64).stdout
    first, second, ones = out.split("REFUSED")[1:]
    # jax reuses the first call's lowering of an eager op; each error still names its own line.
    assert "jit_convert_element_type cannot run on ipu2 (1 problem(s)), the eager op at " \
        "<string>:8 (<module>)" in first
    assert "stablehlo.convert with float64 at <string>:8 (<module>)" in first
    assert "the eager op at <string>:10 (<module>)" in second and "<string>:8" not in second
    # An argument has no line of its own: the call that made the program has.
    assert "the eager op at <string>:15 (<module>)" in ones
    assert "argument 0 of jit_convert_element_type is float64[]: ipu2 has no float64" in ones
