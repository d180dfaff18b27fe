#!/usr/bin/env bash
# The local sandbox's namespaces come from bubblewrap: install it if missing (idempotent).
set -euo pipefail
command -v bwrap >/dev/null && exit 0
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends bubblewrap >/dev/null \
  || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends bubblewrap >/dev/null; }
command -v bwrap
