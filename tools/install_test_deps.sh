#!/bin/sh
# Test dependencies outside pip: Debian's chromium, which tests/test_profile_html.py drives
# headless to load the HTML report, and g++, which builds jax_ipu.tile's custom vertices
# (tests/test_tile_vertex.py). Idempotent: does nothing when both are installed.
set -eu

PACKAGES=""
command -v chromium >/dev/null 2>&1 || PACKAGES="$PACKAGES chromium"
command -v g++ >/dev/null 2>&1 || PACKAGES="$PACKAGES g++"
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
