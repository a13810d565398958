#!/usr/bin/env bash
# tools/install-deps.sh: installs the Debian packages mptrain builds against (when run as root and missing).
set -euo pipefail
packages=(cmake ninja-build g++ ccache libfmt-dev libgtest-dev libgmock-dev libdnnl-dev libcli11-dev
          nlohmann-json3-dev libopenmpi-dev openmpi-bin libboost-context-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
