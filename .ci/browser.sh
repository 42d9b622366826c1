#!/bin/sh
# Debian's headless Chromium and its driver for the dashboard's browser test
# (tests/p2p/dashboard/test_browser.py): installed from the distribution's packages
# when missing and this runs as root; never a downloaded browser. Without them the
# test skips with one line saying so (and fails under CI=true).
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "browser: chromium/chromedriver missing and not installable here (needs root and" \
         "apt-get); the dashboard browser test will skip" >&2
    exit 0
fi
echo "browser: installing Debian's chromium and chromium-driver" >&2
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; }; then
    echo "browser: apt-get could not install chromium chromium-driver; the dashboard" \
         "browser test will skip (or fail under CI=true)" >&2
fi
exit 0
