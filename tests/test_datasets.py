"""Tests of the examples' data module: the IDX reader on files written here (gz and raw), MNIST
loading and downloading with checksums, the announced fallback to the digits, the karate club."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import logging
import re
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "ipu" / "examples"


def _load_datasets() -> ModuleType:
    # Loaded by path under a private name: the examples directory is not a package, and a plain
    # `import datasets` could pick up an unrelated installed package of that name.
    spec = importlib.util.spec_from_file_location("_examples_datasets", EXAMPLES / "datasets.py")
    module = importlib.util.module_from_spec(spec)
    # dataclasses look their module up in sys.modules while the class is being built.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ds = _load_datasets()

IDX_CODES = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C, np.float32: 0x0D}


def idx_bytes(array: np.ndarray) -> bytes:
    """The IDX encoding of `array`, written independently of the reader under test."""
    code = IDX_CODES[array.dtype.type]
    header = bytes([0, 0, code, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape
    )
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write_idx(path: Path, array: np.ndarray, compress: bool) -> Path:
    data = idx_bytes(array)
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


@pytest.mark.parametrize("compress", [True, False])
@pytest.mark.parametrize(
    "array",
    [
        np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28),
        np.array([7, 2, 1, 0, 4], np.uint8),
        np.array([[-5, 3], [1 << 20, -(1 << 30)]], np.int32),
        np.array([[1.5, -2.25, 3e10]], np.float32),
        np.array([-128, 0, 127], np.int8),
        np.array([[-300], [300]], np.int16),
    ],
)
def test_read_idx_round_trip(tmp_path: Path, array: np.ndarray, compress: bool) -> None:
    # The name says nothing: compression is detected from the content.
    got = ds.read_idx(write_idx(tmp_path / "file", array, compress))
    assert got.dtype == array.dtype
    np.testing.assert_array_equal(got, array)


def test_read_idx_rejects_bad_magic(tmp_path: Path) -> None:
    path = tmp_path / "bad"
    path.write_bytes(b"\x01\x02\x08\x01" + (3).to_bytes(4, "big") + b"abc")
    with pytest.raises(ValueError, match="not an IDX file"):
        ds.read_idx(path)


def test_read_idx_rejects_truncated_data(tmp_path: Path) -> None:
    path = tmp_path / "short"
    path.write_bytes(idx_bytes(np.zeros((4, 5), np.uint8))[:-3])
    with pytest.raises(ValueError, match=r"shape \(4, 5\) \(20 bytes\) but 17 bytes follow"):
        ds.read_idx(path)


def fake_mnist(directory: Path, n_train: int = 6, n_test: int = 4) -> dict[str, tuple[str, str]]:
    """Small IDX archives under MNIST's file names; returns a MNIST_FILES table with their sums."""
    rng = np.random.default_rng(0)
    arrays = {
        "train_images": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train_labels": rng.integers(0, 10, n_train, dtype=np.uint8),
        "test_images": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "test_labels": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    directory.mkdir(parents=True, exist_ok=True)
    table = {}
    for key, (filename, _) in ds.MNIST_FILES.items():
        path = write_idx(directory / filename, arrays[key], compress=True)
        table[key] = (filename, hashlib.sha256(path.read_bytes()).hexdigest())
    return table


def test_official_checksums_are_sha256() -> None:
    assert len(ds.MNIST_FILES) == 4
    for filename, digest in ds.MNIST_FILES.values():
        assert filename.endswith("-ubyte.gz")
        assert re.fullmatch(r"[0-9a-f]{64}", digest)


def test_load_mnist_from_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ds, "MNIST_FILES", fake_mnist(tmp_path))
    data = ds.load_mnist(tmp_path, download=False)
    assert data.is_mnist and data.fallback_reason == ""
    assert data.train_images.shape == (6, 784) and data.test_images.shape == (4, 784)
    assert data.train_images.dtype == np.float32
    assert 0.0 <= data.train_images.min() and data.train_images.max() <= 1.0
    raw = ds.read_idx(tmp_path / "train-images-idx3-ubyte.gz")
    np.testing.assert_allclose(data.train_images[1] * 255, raw[1].reshape(-1), atol=1e-4)
    assert data.test_labels.dtype == np.int32


def test_cache_dir_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ds.CACHE_ENV, str(tmp_path / "env"))
    assert ds.mnist_cache_dir() == tmp_path / "env"
    assert ds.mnist_cache_dir(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv(ds.CACHE_ENV)
    assert ds.mnist_cache_dir() == Path.home() / ".cache" / "jax_ipu" / "mnist"


def test_corrupt_cached_file_fails_checksum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ds, "MNIST_FILES", fake_mnist(tmp_path))
    victim = tmp_path / "t10k-labels-idx1-ubyte.gz"
    data = victim.read_bytes()
    victim.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    with pytest.raises(ds.ChecksumError, match="t10k-labels-idx1-ubyte.gz: SHA-256 .* does not"):
        ds.load_mnist(tmp_path, download=False)


def test_download_from_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A file:// mirror exercises the download path without a network.
    mirror = tmp_path / "mirror"
    monkeypatch.setattr(ds, "MNIST_FILES", fake_mnist(mirror))
    monkeypatch.setattr(ds, "MNIST_MIRRORS", (mirror.as_uri() + "/",))
    cache = tmp_path / "cache"
    data = ds.load_mnist(cache, download=True)
    assert data.is_mnist and len(data.train_labels) == 6
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        name for name, _ in ds.MNIST_FILES.values()
    )


def test_download_with_bad_checksum_keeps_cache_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror = tmp_path / "mirror"
    table = fake_mnist(mirror)
    table["train_images"] = (table["train_images"][0], "0" * 64)
    monkeypatch.setattr(ds, "MNIST_FILES", table)
    monkeypatch.setattr(ds, "MNIST_MIRRORS", (mirror.as_uri() + "/",))
    cache = tmp_path / "cache"
    with pytest.raises(OSError, match="could not download train-images-idx3-ubyte.gz"):
        ds.load_mnist(cache, download=True)
    assert list(cache.iterdir()) == []


def test_fallback_is_announced(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=ds.log.name):
        data = ds.load_image_dataset("auto", tmp_path, download=False)
    assert not data.is_mnist
    assert data.name == ds.DIGITS_NAME and "scikit-learn digits" in data.name
    assert "MNIST not available" in data.fallback_reason
    assert "downloading is disabled" in data.fallback_reason
    assert any(
        r.levelno == logging.WARNING and "falling back to scikit-learn digits" in r.getMessage()
        for r in caplog.records
    )


def test_failed_download_falls_back_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Port 9 on localhost refuses connections: the attempt fails at once instead of hanging.
    monkeypatch.setattr(ds, "MNIST_MIRRORS", ("http://127.0.0.1:9/",))
    data = ds.load_image_dataset("auto", tmp_path, download=True, timeout=1.0)
    assert not data.is_mnist
    assert "could not download" in data.fallback_reason
    assert not any(tmp_path.glob("*.part"))


def test_mnist_only_does_not_fall_back(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="downloading is disabled"):
        ds.load_image_dataset("mnist", tmp_path, download=False)


def test_digits_as_28x28() -> None:
    data = ds.load_image_dataset("digits")
    assert data.fallback_reason == "" and not data.is_mnist
    assert data.train_images.shape == (1500, 784) and data.test_images.shape == (297, 784)
    assert data.train_images.min() == 0.0 and data.train_images.max() == 1.0
    images = data.train_images.reshape(-1, 28, 28)
    # Zero border of 2 pixels, and each 8x8 pixel repeated over a 3x3 block.
    assert not images[:, :2].any() and not images[:, -2:].any()
    assert not images[:, :, :2].any() and not images[:, :, -2:].any()
    blocks = images[:, 2:26, 2:26].reshape(-1, 8, 3, 8, 3)
    assert (blocks == blocks[:, :, :1, :, :1]).all()
    assert set(np.unique(data.train_labels)) == set(range(10))


def test_unknown_dataset_name() -> None:
    with pytest.raises(ValueError, match="unknown data set 'cifar'"):
        ds.load_image_dataset("cifar")


def test_karate_club() -> None:
    g = ds.karate_club()
    assert g.num_nodes == 34
    # 78 undirected edges, both directions, plus a self-loop per member.
    assert len(g.senders) == len(g.receivers) == 2 * 78 + 34
    assert g.class_names[g.labels[0]] == "Mr. Hi" and g.class_names[g.labels[33]] == "Officer"
    assert np.bincount(g.labels).tolist() == [17, 17]
    edges = set(zip(g.senders.tolist(), g.receivers.tolist(), strict=True))
    assert all((r, s) in edges for s, r in edges)
