"""The migration guide for users of Graphcore's JAX fork, run: each *Before* fails on jax 0.10 with
the error it quotes, each *After* prints what its comments say; the fork's names get signposts."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from jax_ipu import signposts
from jax_ipu.runtime.client import Settings

GUIDE = Path(__file__).resolve().parents[1] / "ipu" / "docs" / "migrating.md"


def _blocks(kind: str) -> list[str]:
    """The ```python blocks of the guide that follow a paragraph starting with **kind**."""
    return re.findall(rf"^\*\*{kind}\*\*(?:(?!```).)*?\n```python\n(.*?)^```",
                      GUIDE.read_text(), re.M | re.S)


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k != "JAX_PLATFORMS" and not k.startswith(("JAX_IPU_", "XLA_IPU_", "TF_POPLAR"))}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)


def _expected(block: str, marker: str) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(rf"# {marker}(.*)$", block, re.M)]


def test_each_before_fails_on_jax_0_10_as_the_guide_says(tmp_path):
    befores = _blocks("Before")
    assert len(befores) == 5
    driver = "import traceback\n" + "".join(
        f"try:\n    exec(compile({block!r}, 'before{i}', 'exec'), {{}})\n"
        f"    print('RAN {i}')\nexcept Exception as e:\n"
        f"    print('FAILED {i}', type(e).__name__ + ': ' + str(e))\n"
        for i, block in enumerate(befores))
    proc = _run(driver, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    failures = dict(line.split(" ", 2)[1:] for line in proc.stdout.splitlines()
                    if line.startswith("FAILED "))
    for i, block in enumerate(befores):
        (said,) = _expected(block, "on jax 0.10: ")
        assert said in failures.get(str(i), f"ran without error: {proc.stdout}"), block


def test_each_after_prints_what_the_guide_says(tmp_path):
    afters = _blocks("After")
    assert len(afters) == 4
    # A block that configures jax before its first use runs in a process of its own.
    alone = [b for b in afters if "jax.config.update" in b]
    together = [b for b in afters if b not in alone]
    runs = [*alone, "".join(f"exec(compile({b!r}, 'after', 'exec'), {{}})\n" for b in together)]
    wanted = [_expected(b, "-> ") for b in alone] + \
        [[line for b in together for line in _expected(b, "-> ")]]
    for code, expected in zip(runs, wanted, strict=True):
        proc = _run(code, tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.splitlines() == expected


@pytest.mark.parametrize("name, replacement", [("transfer_to_infeed", "jax_ipu.InfeedQueue"),
                                               ("transfer_from_outfeed", "jax_ipu.OutfeedQueue")])
def test_the_forks_device_methods_name_their_replacement(name, replacement):
    ipu = jax.devices("ipu")[0]
    with pytest.raises(AttributeError) as err:
        getattr(ipu, name)
    assert f"{ipu!r} has no {name} (Graphcore's JAX fork had it)" in str(err.value)
    assert replacement in str(err.value) and "ipu/docs/migrating.md" in str(err.value)
    assert not hasattr(ipu, name)
    assert ipu.num_tiles == 1472  # the device's own attributes are untouched
    # other platforms' devices keep jax's own error
    with pytest.raises(AttributeError) as err:
        getattr(jax.devices("cpu")[0], name)
    assert "fork" not in str(err.value)


def test_the_forks_environment_variables_are_named_when_the_backend_starts(monkeypatch, caplog):
    monkeypatch.setenv("XLA_IPU_PLATFORM_DEVICE_COUNT", "2")
    monkeypatch.setenv("TF_POPLAR_FLAGS", "--use_ipu_model --ipu_model_tiles=8")
    with caplog.at_level(logging.WARNING, logger="jax_ipu.signposts"):
        Settings.from_config()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert messages[0].startswith("TF_POPLAR_FLAGS is set but jax-ipu does not read it")
    assert "JAX_IPU_MODEL_NUM_TILES" in messages[0]
    assert messages[1].startswith("XLA_IPU_PLATFORM_DEVICE_COUNT is set")
    assert "set JAX_IPU_DEVICE_COUNT" in messages[1]
    assert signposts.warn_fork_environment({"XLA_IPU_PLATFORM_SOMETHING": "1", "HOME": "/"}) \
        == ["XLA_IPU_PLATFORM_SOMETHING is set but jax-ipu does not read it (it was an option of "
            "Graphcore's JAX fork): jax-ipu has no such option. See ipu/docs/migrating.md."]
