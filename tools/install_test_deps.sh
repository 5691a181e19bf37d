#!/bin/sh
# Test dependencies outside pip: Debian's chromium, which tests/test_profile_html.py drives
# headless to load the HTML report; g++, which builds jax_ipu.tile's custom vertices
# (tests/test_tile_vertex.py); and clang-15 (Debian 12's, the LLVM of popc, Poplar's codelet
# compiler, with _Float16), which jax_ipu.tile prefers, so that codelets in popc's dialect build
# as on the chip (tests/test_tile_codelets.py); gRPC's C++ library and pkg-config, which the
# remote server's C++ transport builds against (jax_ipu/remote/native/transport.cc, tested in
# tests/test_remote*.py). Idempotent: does nothing when all are installed.
set -eu

PACKAGES=""
command -v chromium >/dev/null 2>&1 || PACKAGES="$PACKAGES chromium"
command -v g++ >/dev/null 2>&1 || PACKAGES="$PACKAGES g++"
command -v clang++-15 >/dev/null 2>&1 || PACKAGES="$PACKAGES clang-15"
command -v pkg-config >/dev/null 2>&1 || PACKAGES="$PACKAGES pkg-config"
pkg-config --exists grpc++ 2>/dev/null || PACKAGES="$PACKAGES libgrpc++-dev"
if [ -z "$PACKAGES" ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi
$SUDO apt-get update
# shellcheck disable=SC2086  # one word per package
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends $PACKAGES
