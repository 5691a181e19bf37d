"""Data sets for the examples: MNIST from its IDX files (downloaded once into a cache and checked by
SHA-256), a loud fallback to scikit-learn's digits, and Zachary's karate club for the GNN."""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger("jax_ipu.examples.datasets")

CACHE_ENV = "JAX_IPU_MNIST_DIR"
DEFAULT_CACHE = Path("~/.cache/jax_ipu/mnist")
# The TensorFlow mirror first: yann.lecun.com has been refusing or throttling downloads for years.
MNIST_MIRRORS = (
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)
# SHA-256 of the four official archives (9,912,422 / 28,881 / 1,648,877 / 4,542 bytes).
MNIST_FILES = {
    "train_images": (
        "train-images-idx3-ubyte.gz",
        "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    ),
    "train_labels": (
        "train-labels-idx1-ubyte.gz",
        "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    ),
    "test_images": (
        "t10k-images-idx3-ubyte.gz",
        "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    ),
    "test_labels": (
        "t10k-labels-idx1-ubyte.gz",
        "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
    ),
}
# IDX type codes (third byte of the magic number); data is big-endian.
_IDX_DTYPES = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
DIGITS_NAME = "scikit-learn digits (8x8 upsampled 3x by pixel repetition, zero-padded to 28x28)"


class ChecksumError(ValueError):
    """A cached or downloaded file does not have the expected SHA-256."""


@dataclass(frozen=True)
class ImageDataset:
    """Flattened 28x28 grey images in [0, 1] with integer class labels, and where they came from."""

    name: str
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    # Why MNIST was not used, when it was not; empty for MNIST or when digits were asked for.
    fallback_reason: str = ""

    @property
    def is_mnist(self) -> bool:
        return self.name == "MNIST"


@dataclass(frozen=True)
class Graph:
    """A graph as edge lists (both directions, with self-loops) plus node labels."""

    name: str
    num_nodes: int
    senders: np.ndarray
    receivers: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file, gzip-compressed or raw (told apart by content, not by name)."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{path}: not an IDX file (magic {raw[:4].hex()})")
    dtype, ndim = _IDX_DTYPES[raw[2]], raw[3]
    header = 4 + 4 * ndim
    shape = tuple(int(d) for d in np.frombuffer(raw[4:header], dtype=">u4"))
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        raise ValueError(
            f"{path}: IDX header says shape {shape} ({expected} bytes) "
            f"but {len(raw) - header} bytes follow"
        )
    return (
        np.frombuffer(raw, dtype=dtype, offset=header)
        .reshape(shape)
        .astype(dtype.newbyteorder("="))
    )


def sha256_of(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_checksum(path: str | os.PathLike, expected: str) -> None:
    """Raise ChecksumError unless the file's SHA-256 is `expected`."""
    actual = sha256_of(path)
    if actual != expected:
        raise ChecksumError(f"{path}: SHA-256 {actual} does not match the expected {expected}")


def mnist_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The MNIST cache: the argument, else $JAX_IPU_MNIST_DIR, else ~/.cache/jax_ipu/mnist."""
    chosen = cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_CACHE
    return Path(chosen).expanduser()


def _download(filename: str, sha256: str, dest: Path, timeout: float) -> None:
    partial = dest.with_suffix(".part")
    last_error: Exception | None = None
    for mirror in MNIST_MIRRORS:
        try:
            with urllib.request.urlopen(mirror + filename, timeout=timeout) as response:
                partial.write_bytes(response.read())
            verify_checksum(partial, sha256)
        except (OSError, ChecksumError) as err:
            partial.unlink(missing_ok=True)
            log.info("%s%s: %s", mirror, filename, err)
            last_error = err
            continue
        # Rename only after the checksum passed, so the cache never holds a bad file.
        partial.replace(dest)
        return
    raise OSError(
        f"could not download {filename} from {len(MNIST_MIRRORS)} mirrors "
        f"(last error: {last_error})"
    )


def load_mnist(
    cache_dir: str | os.PathLike | None = None, download: bool = True, timeout: float = 3.0
) -> ImageDataset:
    """MNIST from the cache, downloading missing files first when `download` is set.

    Raises OSError when a file is missing and cannot be fetched, ChecksumError when a cached file is
    corrupt (it is left in place for the user to inspect)."""
    root = mnist_cache_dir(cache_dir)
    arrays = {}
    for key, (filename, sha256) in MNIST_FILES.items():
        path = root / filename
        if not path.exists():
            if not download:
                raise OSError(f"{path} is missing and downloading is disabled")
            root.mkdir(parents=True, exist_ok=True)
            log.info("downloading %s into %s", filename, root)
            _download(filename, sha256, path, timeout)
        verify_checksum(path, sha256)
        arrays[key] = read_idx(path)
    return ImageDataset(
        name="MNIST",
        train_images=_flat_unit(arrays["train_images"], 255.0),
        train_labels=arrays["train_labels"].astype(np.int32),
        test_images=_flat_unit(arrays["test_images"], 255.0),
        test_labels=arrays["test_labels"].astype(np.int32),
    )


def load_digits_28x28(test_size: int = 297, seed: int = 0, reason: str = "") -> ImageDataset:
    """scikit-learn's 1,797 handwritten digits, made 28x28 so MNIST models run unchanged.

    Each 8x8 image is repeated 3x3 per pixel (24x24) and zero-padded by 2 on every side; the split
    is a fixed random permutation, `test_size` images held out."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.repeat(np.repeat(digits.images, 3, axis=1), 3, axis=2)
    images = np.pad(images, ((0, 0), (2, 2), (2, 2)))
    order = np.random.default_rng(seed).permutation(len(images))
    images, labels = images[order], digits.target[order].astype(np.int32)
    # The digits are 4-bit intensities, 0..16.
    flat = _flat_unit(images, 16.0)
    return ImageDataset(
        name=DIGITS_NAME,
        train_images=flat[test_size:],
        train_labels=labels[test_size:],
        test_images=flat[:test_size],
        test_labels=labels[:test_size],
        fallback_reason=reason,
    )


def load_image_dataset(
    which: str = "auto",
    cache_dir: str | os.PathLike | None = None,
    download: bool = True,
    timeout: float = 3.0,
) -> ImageDataset:
    """The examples' images: "mnist" (or fail), "digits", or "auto" (MNIST, else digits, loudly).

    On fallback a warning is logged and `fallback_reason` says why, so callers can print it."""
    if which == "digits":
        return load_digits_28x28()
    if which == "mnist":
        return load_mnist(cache_dir, download, timeout)
    if which != "auto":
        raise ValueError(f"unknown data set {which!r}: expected 'auto', 'mnist' or 'digits'")
    try:
        return load_mnist(cache_dir, download, timeout)
    except (OSError, ValueError) as err:
        reason = f"MNIST not available ({err})"
        log.warning("%s; falling back to %s", reason, DIGITS_NAME)
        return load_digits_28x28(reason=reason)


def karate_club() -> Graph:
    """Zachary's karate club from networkx: 34 members, labelled by the club they joined."""
    import networkx as nx

    g = nx.karate_club_graph()
    class_names = ("Mr. Hi", "Officer")
    labels = np.array([class_names.index(g.nodes[n]["club"]) for n in g.nodes], np.int32)
    edges = np.array(list(g.edges), np.int32)
    loops = np.arange(g.number_of_nodes(), dtype=np.int32)
    # Messages flow both ways along each undirected edge, and every node also keeps its own state.
    senders = np.concatenate([edges[:, 0], edges[:, 1], loops])
    receivers = np.concatenate([edges[:, 1], edges[:, 0], loops])
    return Graph(
        name="Zachary's karate club",
        num_nodes=g.number_of_nodes(),
        senders=senders,
        receivers=receivers,
        labels=labels,
        class_names=class_names,
    )


def _flat_unit(images: np.ndarray, scale: float) -> np.ndarray:
    return (images.reshape(len(images), -1) / scale).astype(np.float32)
