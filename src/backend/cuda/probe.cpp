// src/backend/cuda/probe.cpp: decides once whether CUDA is usable (driver present, devices answer) and why.
#include <fmt/format.h>

#include <cmath>

#include "backend/cuda/check.h"
#include "core/backend.h"

namespace mpt::cuda_backend {
namespace {

std::string version_text(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

std::string count_failure_hint(cudaError_t e, int runtime_version) {
  if (e == cudaErrorInsufficientDriver)
    return fmt::format(" (the driver is older than CUDA runtime {} or no GPU is present)",
                       version_text(runtime_version));
  if (e == cudaErrorStubLibrary) return " (a stub libcuda was loaded instead of a real driver)";
  return "";
}

}  // namespace

CudaStatus probe() {
  CudaStatus s;
  s.built = true;
  if (cudaRuntimeGetVersion(&s.runtime_version) != cudaSuccess) s.runtime_version = 0;

  int driver = 0;
  const cudaError_t de = cudaDriverGetVersion(&driver);
  if (de != cudaSuccess) {
    (void)cudaGetLastError();
    s.reason = fmt::format("cudaDriverGetVersion failed: {}; using the CPU", cuda_status_text(de));
    return s;
  }
  s.driver_version = driver;
  if (driver == 0) {
    s.reason = "no NVIDIA driver found (cudaDriverGetVersion returned 0); using the CPU";
    return s;
  }

  int count = 0;  // cudaGetDeviceCount leaves it unwritten when it fails
  const cudaError_t ce = cudaGetDeviceCount(&count);
  // Clear the last-error slot so that a later, unrelated cudaGetLastError check does not report this
  // failure (where the error is sticky, as without any driver, nothing can clear it; no CUDA work runs then).
  (void)cudaGetLastError();
  if (ce != cudaSuccess) {
    s.reason = fmt::format("CUDA driver {} found but cudaGetDeviceCount failed: {}{}; using the CPU",
                           version_text(driver), cuda_status_text(ce), count_failure_hint(ce, s.runtime_version));
    return s;
  }
  if (count <= 0) {
    s.reason = fmt::format("CUDA driver {} found but no CUDA device; using the CPU", version_text(driver));
    return s;
  }
  s.device_count = count;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    const cudaError_t pe = cudaGetDeviceProperties(&prop, i);
    if (pe != cudaSuccess) {
      (void)cudaGetLastError();
      s.device_count = 0;
      s.devices.clear();
      s.reason = fmt::format("CUDA driver {} found but cudaGetDeviceProperties({}) failed: {}; using the CPU",
                             version_text(driver), i, cuda_status_text(pe));
      return s;
    }
    s.devices.push_back({.index = i,
                         .name = prop.name,
                         .major = prop.major,
                         .minor = prop.minor,
                         .total_memory = prop.totalGlobalMem,
                         .multiprocessors = prop.multiProcessorCount});
  }
  const CudaDeviceInfo& d0 = s.devices.front();
  s.usable = true;
  s.reason = fmt::format("using cuda:0 ({}, sm_{}{}, {} GiB)", d0.name, d0.major, d0.minor,
                         std::llround(static_cast<double>(d0.total_memory) / (1 << 30)));
  return s;
}

}  // namespace mpt::cuda_backend
