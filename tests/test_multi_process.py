"""Several processes on loopback with jax.distributed: global ipu devices, cross-process
collectives and sharded programs, number by number against the same processes on cpu."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _launch(platform: str, envs: list[dict[str, str]], tmp: Path,
            timeout: float = 240) -> list[subprocess.CompletedProcess]:
    """Start one worker per entry of `envs` (its extra environment), wait for all of them."""
    port, n = _free_port(), len(envs)
    procs = []
    for pid, extra in enumerate(envs):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "POPLAR_"))}
        env.update({"JAX_PLATFORMS": platform, "TF_CPP_MIN_LOG_LEVEL": "3", **extra})
        cmd = [sys.executable, "-m", "tests._multi_process_worker", str(pid), str(n), str(port),
               platform, str(tmp / f"{platform}_{pid}.json")]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    done = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            proc.kill()
    return done


def _run(platform: str, devices_per_process: list[int], tmp: Path) -> list[dict]:
    count = "JAX_IPU_DEVICE_COUNT" if platform == "ipu" else "JAX_NUM_CPU_DEVICES"
    done = _launch(platform, [{count: str(k)} for k in devices_per_process], tmp)
    for pid, proc in enumerate(done):
        assert proc.returncode == 0, f"{platform} process {pid}:\n{proc.stdout}\n{proc.stderr}"
    return [json.loads((tmp / f"{platform}_{pid}.json").read_text())
            for pid in range(len(devices_per_process))]


@pytest.mark.parametrize("devices_per_process", [[2, 2], [1, 1, 1]], ids=["2x2", "3x1"])
def test_processes_match_cpu(tmp_path: Path, devices_per_process: list[int]) -> None:
    ipu = _run("ipu", devices_per_process, tmp_path)
    cpu = _run("cpu", devices_per_process, tmp_path)
    n = sum(devices_per_process)
    owners = [p for p, k in enumerate(devices_per_process) for _ in range(k)]
    for pid, (mine, theirs) in enumerate(zip(ipu, cpu, strict=True)):
        assert mine["process_index"] == pid and mine["process_count"] == len(devices_per_process)
        assert mine["device_processes"] == owners and mine["local_is_mine"]
        # Every device's rows reached every other device, across the process boundary.
        rows = np.concatenate([np.arange(k * 3, dtype=np.float32).reshape(k, 3) + 100 * p
                               for p, k in enumerate(devices_per_process)])
        np.testing.assert_allclose(mine["pmap"]["psum"][0], rows.sum(0), rtol=1e-6)
        np.testing.assert_array_equal(mine["pmap"]["gather"][0], rows)
        assert mine["global_shape"] == [2 * n, 4]
        assert len(mine["allgather_ids"]) == len(devices_per_process)
        for key, value in theirs.items():
            if key == "pmap":
                for name, per_device in value.items():
                    np.testing.assert_allclose(mine[key][name], per_device, rtol=1e-6,
                                               err_msg=name)
            else:
                np.testing.assert_allclose(mine[key], value, rtol=1e-6, err_msg=key)
        # The model costs the gradient mean as an all-reduce over every IPU of every process.
        assert mine["ipu_links"], "no collective reached the IPU-Links in the model"
        assert all(f"over {n} IPUs" in note for _, note, _ in mine["ipu_links"]), mine["ipu_links"]


def test_visible_devices_choose_local_ipus_and_ids_stay_global(tmp_path: Path) -> None:
    done = _launch("ipu", [{"JAX_IPU_DEVICE_COUNT": "2"}, {"JAX_IPU_VISIBLE_DEVICES": "7,5"}],
                   tmp_path)
    assert all(proc.returncode == 0 for proc in done), done[1].stderr[-3000:]
    first, second = (json.loads((tmp_path / f"ipu_{p}.json").read_text()) for p in (0, 1))
    assert first["ids"] == second["ids"] == [0, 1, 2, 3]
    assert first["device_processes"] == [0, 0, 1, 1]
    assert first["local_hardware_ids"] == [0, 1]
    assert second["local_hardware_ids"] == [7, 5]
    assert first["pmap"]["psum"] == second["pmap"]["psum"]


@pytest.mark.parametrize("variable, values, differ", [
    ("JAX_IPU_MODEL_VERSION", ("ipu2", "ipu21"),
     "process 0 has ipu2 with 1472 tiles and available memory proportion 0.6, process 1 has "
     "ipu21 with 1472 tiles"),
    # The proportion changes the plans of matmuls, so what the processes exchange.
    ("JAX_IPU_AVAILABLE_MEMORY_PROPORTION", ("0.6", "0.3"),
     "process 0 has ipu2 with 1472 tiles and available memory proportion 0.6, process 1 has "
     "ipu2 with 1472 tiles and available memory proportion 0.3"),
], ids=["version", "memory-proportion"])
def test_processes_disagreeing_on_the_chip_are_refused(tmp_path: Path, variable: str,
                                                        values: tuple[str, str],
                                                        differ: str) -> None:
    done = _launch("ipu", [{variable: value} for value in values], tmp_path)
    for proc in done:
        assert proc.returncode != 0
        assert "disagree on the IPU Model target" in proc.stderr, proc.stderr[-2000:]
        assert differ in proc.stderr
        assert "jax_ipu_available_memory_proportion alike in every process" in proc.stderr
