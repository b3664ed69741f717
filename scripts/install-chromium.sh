#!/usr/bin/env bash
# Debian's chromium for the console page's browser test (test/console/page-browser.test.ts),
# driven by playwright-core. Never a browser download by a test tool: the
# distribution's package, installed when /usr/bin/chromium is missing.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  echo "chromium is installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "chromium is missing and this is not a Debian-like system: install Chromium so that /usr/bin/chromium runs it" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "installing chromium from Debian's packages"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium > /dev/null
/usr/bin/chromium --version
