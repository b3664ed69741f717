#!/bin/sh
# Installs wrk (the HTTP load generator behind `npm run bench -- --load wrk`)
# from Debian's packages when it is missing. Elsewhere: your package manager's
# `wrk`, or build https://github.com/wg/wrk.
set -eu
if command -v wrk >/dev/null 2>&1; then
  echo "wrk is installed: $(command -v wrk)"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "wrk is missing and there is no apt-get here: install the wrk package with your package manager (or build https://github.com/wg/wrk)" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
# A stale package index cannot find the package: refresh it once, then retry.
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y wrk ||
  { $sudo apt-get update && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y wrk; }
echo "wrk installed: $(command -v wrk)"
