#!/usr/bin/env bash
# tools/install-deps.sh: installs what mptrain needs on Debian 12 (as root, and only what is missing).
# Usage: bash tools/install-deps.sh [--tools]
#   default: every Debian package the build, the examples and the tests need, on a minimal Debian 12
#            (proved by tools/fresh-machine-check.sh). The CUDA toolkit is optional and not installed here.
#   --tools: also the Debian packages of the tools/ scripts: debootstrap and git (fresh-machine-check.sh),
#            python3-torch and numpy (make_goldens.py), matplotlib (plot_convergence.py). Two tools compare against
#            PyPI packages, which a virtual environment should hold so that they do not shadow Debian's torch:
#            benchmarks/compare_pytorch.py (PyPI's torch is the baseline, docs/benchmarks.md) and
#            safetensors_crosscheck.py.
set -euo pipefail
# ocl-icd-opencl-dev: Debian's dnnl-config.cmake requires OpenCL, which libdnnl-dev only recommends.
# clang and libclang-rt-14-dev: libFuzzer, for the fuzz targets of the sanitizer build (tests/fuzz).
# libsentencepiece-dev and libpcre2-dev: the BPE tokenizers (SentencePiece training; GPT-2's pre-tokenizer regex).
packages=(cmake ninja-build g++ ccache libfmt-dev libgtest-dev libgmock-dev libdnnl-dev ocl-icd-opencl-dev
          libcli11-dev nlohmann-json3-dev libopenmpi-dev openmpi-bin libboost-context-dev libxxhash-dev
          clang libclang-rt-14-dev libsentencepiece-dev libpcre2-dev)
tools=0
for arg in "$@"; do
  case "$arg" in
    --tools) tools=1 ;;
    *) echo "install-deps: unknown argument '$arg' (usage: bash tools/install-deps.sh [--tools])" >&2; exit 2 ;;
  esac
done
if [[ $tools -eq 1 ]]; then
  packages+=(debootstrap git python3 python3-venv python3-torch python3-numpy python3-matplotlib)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
elif [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
  exit 1
else
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
