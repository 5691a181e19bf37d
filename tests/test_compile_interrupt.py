"""Ctrl-C during a compile: the user gets KeyboardInterrupt, the compile jaxlib runs on its worker
thread stops instead of running on for nobody, and the next compile of the process works."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np

from jax_ipu.pjrt import cancel

# The model's judgement made long on purpose (a loop of 30 s of short sleeps) so that the
# interrupt lands inside it; the loop notes when it was stopped, and by what.
LONG_JUDGEMENT = """
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a background shell ignores it
    import jax, jax.numpy as jnp, numpy as np
    from jax_ipu.compiler import driver
    judge = driver.judge_program
    seen = {}
    def slow_judge(*args, **kwargs):
        seen["judging"] = time.perf_counter()
        print("judging", flush=True)
        try:
            for _ in range(3000):
                time.sleep(0.01)
        except BaseException as e:
            seen["stopped"] = (time.perf_counter(), type(e).__name__)
            raise
        seen["ran on"] = True
        return judge(*args, **kwargs)
    driver.judge_program = slow_judge
    x = np.arange(6, dtype=np.float32)
    ipu = jax.devices("ipu")[0]
    try:
        jax.jit(lambda a: jnp.sin(a) * 2 + a).lower(jax.device_put(x, ipu)).compile()
        print("not interrupted", flush=True)
    except KeyboardInterrupt:
        interrupted = time.perf_counter()
        print("KeyboardInterrupt", flush=True)
    except BaseException as e:
        print("swallowed", type(e).__name__, str(e)[:200], flush=True)
    for _ in range(100):  # the worker notices within a few polls
        if "stopped" in seen:
            break
        time.sleep(0.05)
    when, what = seen.get("stopped", (float("inf"), "nothing"))
    print("stopped by", what, "after", round(when - interrupted, 2), flush=True)
    driver.judge_program = judge
    f = jax.jit(lambda a: jnp.cos(a) * 3 - a)
    same = np.array_equal(np.asarray(f(jax.device_put(x, ipu))),
                          np.asarray(f(jax.device_put(x, jax.devices("cpu")[0]))))
    print("next compile agrees with cpu", same, flush=True)
"""


def test_ctrl_c_during_a_compile_is_keyboard_interrupt_and_stops_the_compile():
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(LONG_JUDGEMENT)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "judging"
        time.sleep(0.5)  # inside the judgement, on jaxlib's compile thread
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err  # no abort at exit either
    caught, stopped, agrees = out.splitlines()
    assert caught == "KeyboardInterrupt"  # not a JaxRuntimeError, not lost
    _, _, what, _, after = stopped.split()
    assert what == "CompileAbandoned"
    assert float(after) < 5.0  # not the 30 s the judgement had left
    assert agrees == "next compile agrees with cpu True"


def test_the_cancelled_error_of_a_ctrl_c_in_a_slot_becomes_keyboard_interrupt():
    # error.c answers a Ctrl-C taken inside a slot with CANCELLED and sets the interrupt pending
    # again; jax's compile asks this handler, which raises it there.
    interrupted = jax.errors.JaxRuntimeError(f"CANCELLED: {cancel.INTERRUPTED}")
    assert isinstance(cancel.interrupted_compile(interrupted), KeyboardInterrupt)
    assert cancel.interrupted_compile(jax.errors.JaxRuntimeError("INTERNAL: other")) is None
    from jax._src import compiler

    x = jax.device_put(np.ones(3, np.float32), jax.devices("ipu")[0])  # the plugin is loaded
    assert compiler._XLA_RUNTIME_ERROR_HANDLERS.count(cancel.interrupted_compile) == 1
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda a: a + 1)(x)), [2, 2, 2])
