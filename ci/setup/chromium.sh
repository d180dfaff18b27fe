#!/usr/bin/env bash
# Headless Chromium for the report tests (they render every HTML report and take a screenshot):
# install Debian's chromium if missing. Idempotent: a second run finds it and returns.
set -euo pipefail
command -v chromium >/dev/null && exit 0
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null \
  || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null; }
command -v chromium
