#!/usr/bin/env bash
# benchmarks/onednn_versions.sh: Debian's oneDNN against the PyPI onednn wheel (3.x) on the GEMMs of a GPT training
# step, interleaved in one run: builds benchmarks/onednn_gemm.cpp against each, runs both twice. Needs pip (the wheels
# are downloaded to a temporary directory, nothing is installed) and libdnnl-dev. The PyPI onednn is Intel's oneAPI
# build: it pulls the SYCL, OpenCL and compiler runtimes (intel-sycl-rt, intel-cmplr-lib-rt, ...: about 650 MB).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q -d "$work/wheels" onednn onednn-devel
(cd "$work" && for w in wheels/*.whl; do unzip -qo "$w"; done)
hpp=$(find "$work" -path '*include/oneapi/dnnl/dnnl.hpp' | head -1)
inc=${hpp%/oneapi/dnnl/dnnl.hpp}
lib=$(dirname "$(find "$work" -name 'libdnnl.so.3' | head -1)")
libs=$(find "$work" -name 'lib*.so*' -printf '%h\n' | sort -u | paste -sd:)
g++ -O2 -std=c++17 "$here/onednn_gemm.cpp" -o "$work/gemm_debian" -ldnnl
g++ -O2 -std=c++17 -I"$inc" "$here/onednn_gemm.cpp" -o "$work/gemm_pypi" -L"$lib" -ldnnl \
  -Wl,--unresolved-symbols=ignore-in-shared-libs
# Its CPU engine runs on SYCL: a SYCL CPU device, i.e. Intel's OpenCL CPU runtime (intel-opencl-rt) as the ICD.
ocl=$(find "$work" -name 'libintelocl.so*' | head -1)
for round in 1 2; do
  "$work/gemm_debian"
  LD_LIBRARY_PATH="$libs" OCL_ICD_FILENAMES="$ocl" SYCL_DEVICE_FILTER=opencl:cpu ONEAPI_DEVICE_SELECTOR=opencl:cpu \
    "$work/gemm_pypi"
done
