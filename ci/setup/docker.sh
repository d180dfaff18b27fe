#!/usr/bin/env bash
# Docker for the sandbox tests: install docker.io and debootstrap if missing, start a private
# dockerd (no iptables, no bridge: containers get network_mode none anyway), and build the
# grading image from a debootstrap base once. Idempotent: a second run checks and returns.
set -euo pipefail
cd "$(dirname "$0")/../.."
data_root=/var/lib/kernel-grader-docker
socket=/var/run/kernel-grader-docker.sock
state=${KERNEL_GRADER_DOCKER_STATE:-/var/cache/kernel-grader}
base=kernel-grader-base:bookworm
image=${KERNEL_GRADER_IMAGE:-kernel-grader:local}
export DOCKER_HOST=unix://$socket
mkdir -p "$state"

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; }
fi

if ! docker version >/dev/null 2>&1; then
  echo "starting dockerd (data root $data_root, socket $socket)"
  nohup dockerd --iptables=false --ip6tables=false --bridge=none --data-root "$data_root" \
    --host "$DOCKER_HOST" --pidfile /var/run/kernel-grader-docker.pid --exec-root /var/run/kernel-grader-docker \
    > "$state/dockerd.log" 2>&1 &
  for _ in $(seq 1 60); do docker version >/dev/null 2>&1 && break; sleep 0.5; done
  docker version >/dev/null 2>&1 || { tail -n 20 "$state/dockerd.log"; exit 1; }
fi

# The base: Debian with Python, NumPy and g++ from debootstrap, imported without any registry.
if ! docker image inspect "$base" >/dev/null 2>&1; then
  rootfs=$state/rootfs
  if [ ! -f "$state/rootfs.tar" ]; then
    rm -rf "$rootfs"
    echo "debootstrap bookworm into $rootfs (once)"
    debootstrap --variant=minbase --include=python3,python3-numpy,g++,binutils bookworm "$rootfs" \
      http://deb.debian.org/debian > "$state/debootstrap.log" 2>&1 || { tail -n 20 "$state/debootstrap.log"; exit 1; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -cf "$state/rootfs.tar.tmp" . && mv "$state/rootfs.tar.tmp" "$state/rootfs.tar"
    rm -rf "$rootfs"
  fi
  docker import "$state/rootfs.tar" "$base" >/dev/null
fi

# The grading image: rebuilt only when the Dockerfile or the harness changed (docker's cache).
docker build -q --network none --build-arg BASE="$base" -t "$image" -f ci/Dockerfile grader > "$state/build.log" 2>&1 \
  || { tail -n 20 "$state/build.log"; exit 1; }
echo "docker ready: $image on $DOCKER_HOST"
