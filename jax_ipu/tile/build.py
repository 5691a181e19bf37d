"""Building C++ vertex glue for the host with the system C++ compiler, cached by content.

Codelets are built as Poplar builds them: clang (popc's compiler) when present, with flags that
accept popc's dialect. A build is named by the sha256 of everything that goes into it; only a
library this module wrote under that name (its seal, an HMAC under the user's key, checked, in a
directory no one else can write) is ever loaded, and each FFI target registered once."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import jax

from jax_ipu import config, sealing
from jax_ipu.compiler import checks
from jax_ipu.errors import IpuVertexBuildError

logger = logging.getLogger(__name__)

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
NATIVE_DIR = Path(__file__).resolve().parent / "native"
# Bump when the glue or the flags change meaning: it is part of every build's name.
BUILD_FORMAT = "2"
CXX_FLAGS = ("-std=c++17", "-O2", "-shared", "-fPIC")
# popc is clang: prefer clang++ (then a versioned clang++-N, newest first), else g++ or c++.
CANDIDATES = ("clang++", "g++", "c++")
_VERSIONED_CLANG = re.compile(r"^clang\+\+-(\d+)$")
COMPILE_TIMEOUT_S = 600
MAX_ERROR_LINES = 40
LIBRARY = "vertex.so"
SEAL = "vertex.so.seal"  # hex HMAC-SHA256 of the library and its build's name (sealing.py)
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)
# The IPU Model's worker threads, which every MultiVertex library calls into.
WORKERS_SOURCE = NATIVE_DIR / "workers.cc"

_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL] = {}  # FFI target name -> its library (kept loaded)
_libraries: dict[str, ctypes.CDLL] = {}  # build digest -> its loaded library


def cache_dir() -> Path:
    """Where builds are kept: jax_ipu_tile_cache_dir, else <user cache>/jax_ipu/vertices."""
    chosen = config.value("jax_ipu_tile_cache_dir")
    if chosen:
        return Path(chosen).expanduser()
    return sealing.user_cache_dir() / "jax_ipu" / "vertices"


def compiler() -> list[str]:
    """The C++ compiler command: $CXX, else the first of clang++, clang++-N (newest), g++,
    c++ on PATH."""
    chosen = os.environ.get("CXX", "").strip()
    if chosen:
        command = shlex.split(chosen)
        if shutil.which(command[0]) is None:
            raise IpuVertexBuildError(
                f"CXX={chosen!r} names a C++ compiler that is not on PATH. jax_ipu.tile builds "
                "custom vertices for the host with a C++17 compiler: set CXX to one that "
                "exists, or unset it to use clang++ or g++ (Debian/Ubuntu: apt-get install "
                "clang or g++)")
        return command
    found = _on_path()
    if found:
        return [found]
    raise IpuVertexBuildError(
        "no C++ compiler found (looked for $CXX, then clang++, clang++-N, g++ and c++ on PATH). "
        "jax_ipu.tile builds custom vertices for the host, as Poplar's IPU Model ran codelets on "
        "the host, and needs a C++17 compiler: install g++ (Debian/Ubuntu: "
        "apt-get install g++; Fedora: dnf install gcc-c++), or clang, or set CXX")


def _on_path() -> str | None:
    if shutil.which("clang++"):
        return "clang++"
    versions = []
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        try:
            names = os.listdir(directory or ".")
        except OSError:
            continue
        for name in names:
            m = _VERSIONED_CLANG.match(name)
            if m and shutil.which(os.path.join(directory, name)):
                versions.append((int(m.group(1)), name))
    if versions:
        return max(versions)[1]
    return next((name for name in CANDIDATES[1:] if shutil.which(name)), None)


def compiler_flags(command: list[str]) -> tuple[str, ...]:
    """The flags a codelet is built with by `command`: C++17, -O2, a shared library, plus what
    makes popc's (clang's) dialect compile on the host. Functions are not interposable (so
    `always_inline` holds under -fPIC); g++ has no `__builtin_assume`, a hint it may drop;
    Poplar's attributes ([[poplar::constraint]]) are not warned about."""
    flags = [*CXX_FLAGS, "-fno-semantic-interposition"]
    if "clang" in _identity(tuple(command)).lower():
        flags.append("-Wno-unknown-attributes")
    else:
        flags += ["-Wno-attributes", "-D__builtin_assume(condition)=((void)0)"]
    return tuple(flags)


@functools.lru_cache(maxsize=8)
def _identity(command: tuple[str, ...]) -> str:
    """The compiler's first --version line (part of every build's name)."""
    try:
        done = subprocess.run([*command, "--version"], capture_output=True, text=True,
                              timeout=60, check=False)
    except OSError as e:
        raise IpuVertexBuildError(f"cannot run the C++ compiler {command[0]!r}: {e}") from None
    return (done.stdout.splitlines() or [""])[0]


def local_includes(source: str, directory: Path | None, seen: set[Path] | None = None
                   ) -> list[tuple[str, str]]:
    """(path, text) of the files `source` includes with quotes from `directory`, recursively
    (they are part of a build's content); system includes are not followed."""
    if directory is None:
        return []
    seen = set() if seen is None else seen
    found = []
    for name in _INCLUDE.findall(source):
        path = (directory / name).resolve()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        text = path.read_text(errors="replace")
        found.append((str(path), text))
        found += local_includes(text, path.parent, seen)
    return found


@dataclass(frozen=True)
class Build:
    """What one library is made of: the user's codelet (text, and the name compile errors
    show), the generated glue, and the directory of the user's own includes."""

    source: str
    source_name: str
    glue: str
    source_dir: Path | None = None

    def translation_unit(self) -> str:
        # A #line directive ends at the line's end: a name's control characters (a newline would
        # make the rest of the name C++) are written as escapes, as are quotes and backslashes.
        name = "".join(c if c.isprintable() and c not in '"\\' else
                       "".join(f"\\{b:03o}" for b in c.encode()) for c in self.source_name)
        return (f'#include <poplar/Vertex.hpp>\n#line 1 "{name}"\n{self.source}\n'
                f'#line 1 "jax_ipu_vertex_glue.cc"\n{self.glue}')

    def digest(self, command: list[str]) -> str:
        h = hashlib.sha256()
        parts = [BUILD_FORMAT, " ".join(command), _identity(tuple(command)),
                 " ".join(compiler_flags(command)),
                 jax.ffi.include_dir(), self.translation_unit()]
        parts += [p.read_text() for p in sorted(INCLUDE_DIR.rglob("*.hpp"))]
        for path, text in local_includes(self.source, self.source_dir):
            parts += [path, text]
        for part in parts:
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()


def _compile(build: Build, command: list[str], out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="build-", dir=out.parent) as tmp:
        unit = Path(tmp) / "vertex.cc"
        unit.write_text(build.translation_unit())
        argv = [*command, *compiler_flags(command), "-I", str(INCLUDE_DIR), "-isystem",
                jax.ffi.include_dir()]
        if build.source_dir is not None:
            argv += ["-iquote", str(build.source_dir)]
        argv += [str(unit), "-o", str(Path(tmp) / LIBRARY)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True,
                                  timeout=COMPILE_TIMEOUT_S, check=False)
        except OSError as e:
            raise IpuVertexBuildError(f"cannot run the C++ compiler {command[0]!r}: {e}") \
                from None
        except subprocess.TimeoutExpired:
            raise IpuVertexBuildError(f"building {build.source_name} took more than "
                                      f"{COMPILE_TIMEOUT_S} s") from None
        if done.returncode != 0:
            lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
            shown = "\n".join(lines[:MAX_ERROR_LINES])
            more = f"\n... ({len(lines) - MAX_ERROR_LINES} more lines)" \
                if len(lines) > MAX_ERROR_LINES else ""
            raise IpuVertexBuildError(
                f"the C++ compiler failed on the vertex in {build.source_name}:\n{shown}{more}")
        library = Path(tmp) / LIBRARY
        (Path(tmp) / SEAL).write_text(sealing.named_seal(library.read_bytes(), out.name))
        os.chmod(library, 0o600)
        os.chmod(Path(tmp) / SEAL, 0o600)
        # Move the two files into place, the seal last: a library without its seal is never
        # loaded, so a half-written build is rebuilt rather than trusted.
        out.mkdir(mode=0o700, exist_ok=True)
        sealing.check_directory(out, "the vertex build directory")
        os.replace(library, out / LIBRARY)
        os.replace(Path(tmp) / SEAL, out / SEAL)


def library(build: Build) -> Path:
    """The built library for `build`, compiled unless this user's cache already holds it
    (sealed with this user's key, in directories no one else can write)."""
    command = compiler()
    digest = build.digest(command)
    root = _make_root(cache_dir())
    out = root / digest[:32]
    if out.exists():
        sealing.check_directory(out, "the vertex build directory")
    lib = out / LIBRARY
    if sealing.named_seal_holds(lib, out / SEAL, out.name):
        return lib
    logger.info("building vertex %s into %s", build.source_name, out)
    _compile(build, command, out)
    return lib


def _make_root(root: Path) -> Path:
    """`root`, made (mode 700) when missing, refused unless this user's and writable by no one
    else."""
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise IpuVertexBuildError(
            f"cannot make the vertex build cache {str(root)!r}: {e.strerror}. Set "
            "JAX_IPU_TILE_CACHE_DIR (jax_ipu_tile_cache_dir) to a directory you can write") \
            from None
    sealing.check_directory(root, "the vertex build cache (jax_ipu_tile_cache_dir)")
    return root


def register(build: Build, description: str, name: str | None = None,
             symbol: str = "JaxIpuVertexHandler", workers: bool = True) -> str:
    """Build (or find) the library, load it, and register its handler `symbol` as an XLA FFI
    target for the host (XLA:CPU, which also runs ipu programs); the target's name (`name`, else
    one from the build's digest and the symbol), which compiled ipu programs may call
    (compiler/checks.py is told). One build may hold several handlers. `workers`: the library
    may hold MultiVertex codelets, which need the worker threads' library loaded first."""
    with _lock:
        command = compiler()
        digest = build.digest(command)
        default = f"jax_ipu_vertex_{digest[:24]}"
        target = name or (default if symbol == "JaxIpuVertexHandler" else f"{default}_{symbol}")
        if target not in _loaded:
            if workers:
                _load_workers(command)
            if digest not in _libraries:
                _libraries[digest] = ctypes.CDLL(str(library(build)))
            lib = _libraries[digest]
            handler = getattr(lib, symbol)
            jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(handler), platform="cpu")
            checks.ALLOWED_CUSTOM_CALLS[target] = description
            _loaded[target] = lib
        return target


_workers: list[ctypes.CDLL] = []


def _load_workers(command: list[str]) -> None:
    """Load the worker threads' library once per process, its symbols global: MultiVertex
    libraries (whichever compiler built them: its interface is C) resolve jax_ipu_run_workers
    against it when they are loaded."""
    if not _workers:
        workers = Build(WORKERS_SOURCE.read_text(), str(WORKERS_SOURCE), "")
        _workers.append(ctypes.CDLL(str(library(workers)), mode=ctypes.RTLD_GLOBAL))
