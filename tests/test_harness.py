"""jax's own test harness (jtu.JaxTestCase) with jax-ipu installed: no test sees jax.config change.

A suite built on the harness runs under pytest in a fresh process, as a user's would, on cpu and
with nothing preloaded; the harness compares jax.config before and after each test."""

from __future__ import annotations

import os
import subprocess
import sys

SUITE = '''
import jax
import jax.numpy as jnp
from jax._src import test_util as jtu


class FirstUseOfJax(jtu.JaxTestCase):
    def test_first_backend_use_discovers_the_plugin(self):
        self.assertEqual(float(jnp.arange(4.0).sum()), 6.0)

    def test_the_options_are_there(self):
        self.assertEqual(jax.config.jax_ipu_model_version, "ipu2")
'''


def _pytest(tmp_path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "harness_test.py").write_text(SUITE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "PYTEST_"))}
    env.update(JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-W", "ignore::DeprecationWarning", *args, "harness_test.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)


def test_jax_test_case_sees_no_config_change_with_jax_ipu_installed(tmp_path):
    proc = _pytest(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout


def test_without_the_pytest_plugin_the_first_test_fails(tmp_path):
    # What the plugin prevents: jax discovers the ipu plugin inside the first test, which then
    # finds the jax_ipu_* options new when the harness compares the config.
    proc = _pytest(tmp_path, "-p", "no:jax_ipu")
    assert proc.returncode != 0
    assert "Test changed global config values" in proc.stdout
    assert "jax_ipu_model_version" in proc.stdout
    assert "1 failed, 1 passed" in proc.stdout
