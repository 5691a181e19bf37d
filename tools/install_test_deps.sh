#!/bin/sh
# Test dependencies outside pip: Debian's chromium, which tests/test_profile_html.py drives
# headless to load the HTML report. Idempotent: does nothing when chromium is installed.
set -eu

if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends chromium
