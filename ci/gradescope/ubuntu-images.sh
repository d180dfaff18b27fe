#!/usr/bin/env bash
# Stand-ins for Gradescope's base images, for tests/test_gradescope_images.py: Ubuntu 22.04 (jammy,
# Python 3.10, Gradescope's default) and 24.04 (noble, Python 3.12), debootstrapped from
# http://archive.ubuntu.com/ubuntu and imported into the grader's dockerd as
# kernel-grader-gradescope:ubuntu-22.04 and :ubuntu-24.04. Not under ci/setup/: CI does not pay for it.
#
# What each image holds: Ubuntu's minbase (apt, bash, coreutils, dpkg) plus ca-certificates, curl,
# unzip and python3 (the interpreter only: no pip, no venv, no compiler), and an apt sources.list for
# <release>, -updates and -security with main, restricted, universe and multiverse. Gradescope's
# images are plain Ubuntu with Python 3 and a few such tools; ours hold no more than that, on
# purpose: whatever the autograder needs beyond it (g++, git, pip, venv, bubblewrap) setup.sh must
# install itself, as it would have to on Gradescope.
#
# Idempotent: an image that exists is kept; a rootfs tarball cached under /var/cache/kernel-grader/
# is imported without debootstrapping again. To rebuild one, remove its tarball and its image.
# Needs root, debootstrap and the dockerd that ci/setup/docker.sh starts.
set -euo pipefail
cd "$(dirname "$0")/../.."
state=${KERNEL_GRADER_DOCKER_STATE:-/var/cache/kernel-grader}
mirror=http://archive.ubuntu.com/ubuntu
export DOCKER_HOST=${DOCKER_HOST:-unix:///var/run/kernel-grader-docker.sock}
limit_s=${KERNEL_GRADER_DEBOOTSTRAP_TIMEOUT:-1800}  # a stalled mirror must not hang the script
include=ca-certificates,curl,unzip,python3
keyring=/usr/share/keyrings/ubuntu-archive-keyring.gpg
mkdir -p "$state"

docker version >/dev/null 2>&1 || { echo "no Docker daemon at $DOCKER_HOST: run ci/setup/docker.sh first" >&2; exit 1; }
if ! command -v debootstrap >/dev/null; then
  echo "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null
fi

# Release signatures: checked with Ubuntu's archive key where this machine has it (Debian packages
# it as ubuntu-keyring); without it debootstrap cannot check what it downloads.
check_signatures() {
  if [ ! -f "$keyring" ]; then
    echo "installing ubuntu-keyring (to check the Ubuntu archive's signatures; log $state/ubuntu-keyring.log)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ubuntu-keyring \
      > "$state/ubuntu-keyring.log" 2>&1 || true
  fi
  if [ -f "$keyring" ]; then
    gpg_check=(--keyring="$keyring")
  else
    echo "WARNING: ubuntu-keyring could not be installed here (see $state/ubuntu-keyring.log): debootstrap" \
         "runs with --no-check-gpg, so the Ubuntu packages it downloads are NOT checked against Ubuntu's" \
         "signatures. Inside the image, apt checks them (its ubuntu-keyring comes with the rootfs)." >&2
    gpg_check=(--no-check-gpg)
  fi
}

# build_image RELEASE VERSION: debootstrap (once, cached as a tarball), then docker import.
build_image() {
  local release=$1 version=$2
  local image=kernel-grader-gradescope:ubuntu-$version
  local tarball=$state/gradescope-ubuntu-$version.tar
  local rootfs=$state/gradescope-ubuntu-$version.rootfs
  local log=$state/debootstrap-ubuntu-$version.log
  if docker image inspect "$image" >/dev/null 2>&1; then
    echo "$image: present"
    return
  fi
  if [ ! -f "$tarball" ]; then
    [ ${#gpg_check[@]} -gt 0 ] || check_signatures
    # This debootstrap may predate the release; Ubuntu's scripts are one script (gutsy) under many names.
    local script=/usr/share/debootstrap/scripts/$release
    [ -e "$script" ] || script=/usr/share/debootstrap/scripts/gutsy
    rm -rf "$rootfs"
    echo "debootstrap $release into $rootfs (log $log, at most ${limit_s}s)"
    local started=$SECONDS
    if ! timeout -k 30 "$limit_s" debootstrap --variant=minbase "${gpg_check[@]}" --include="$include" \
        --components=main,universe "$release" "$rootfs" "$mirror" "$script" > "$log" 2>&1; then
      echo "debootstrap of $release failed or ran past ${limit_s}s; the end of $log:" >&2
      tail -n 20 "$log" >&2
      rm -rf "$rootfs"
      exit 1
    fi
    echo "debootstrap $release took $((SECONDS - started))s"
    cat > "$rootfs/etc/apt/sources.list" <<EOF
deb $mirror $release main restricted universe multiverse
deb $mirror $release-updates main restricted universe multiverse
deb $mirror $release-security main restricted universe multiverse
EOF
    rm -f "$rootfs"/etc/apt/sources.list.d/ubuntu.sources  # noble's deb822 file would list the same twice
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
  fi
  docker import --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' "$tarball" "$image" >/dev/null
  echo "$image: imported from $tarball"
}

gpg_check=()
build_image jammy 22.04
build_image noble 24.04
