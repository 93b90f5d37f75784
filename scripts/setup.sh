#!/usr/bin/env bash
# Installs the Debian 12 packages GenieX needs to build and test (idempotent; no-op when all are present).
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev libutf8proc-dev libxxhash-dev
  clang libclang-rt-14-dev
  python3 python3-pip unzip
  pocl-opencl-icd ocl-icd-opencl-dev opencl-headers
  g++-aarch64-linux-gnu qemu-user googletest
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  # dpkg -s succeeds for removed-but-configured packages too; check the status line itself.
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "setup: not root and sudo is not available; install as root: ${missing[*]}" >&2
    exit 1
  fi
  SUDO=(sudo)
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
