// src/core/device.cpp: Device parsing and selection, the cached CUDA probe, CPU feature detection, the report.
#include "mpt/core/device.h"

#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include "core/backend.h"
#include "mpt/core/error.h"

#if defined(_OPENMP)
#include <omp.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace mpt {
namespace {

bool force_cpu() {
  const char* v = std::getenv("MPT_FORCE_CPU");
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

#if defined(__x86_64__) || defined(__i386__)
uint64_t read_xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

void detect_x86(CpuFeatures& f) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return;
  const unsigned max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor + 0, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  f.vendor = vendor;

  __get_cpuid(1, &a, &b, &c, &d);
  const bool osxsave = (c >> 27) & 1;
  const uint64_t xcr0 = osxsave ? read_xcr0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;             // SSE and AVX state
  const bool os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;      // XTILECFG, XTILEDATA
  f.f16c = os_avx && ((c >> 29) & 1);
  if (max_leaf < 7) return;

  __get_cpuid_count(7, 0, &a, &b, &c, &d);
  const unsigned max_sub = a;
  f.avx2 = os_avx && ((b >> 5) & 1);
  f.avx512f = os_avx512 && ((b >> 16) & 1);
  f.avx512bw = os_avx512 && ((b >> 30) & 1);
  f.avx512vl = os_avx512 && ((b >> 31) & 1);
  f.avx512_fp16 = os_avx512 && ((d >> 23) & 1);
  f.amx_bf16 = os_amx && ((d >> 22) & 1);
  if (max_sub >= 1) {
    __get_cpuid_count(7, 1, &a, &b, &c, &d);
    f.avx512_bf16 = os_avx512 && ((a >> 5) & 1);
  }
}
#endif

CpuFeatures detect_cpu() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  detect_x86(f);
#endif
  f.logical_cores = static_cast<int>(std::thread::hardware_concurrency());
#if defined(_OPENMP)
  f.omp_threads = omp_get_max_threads();
#else
  f.omp_threads = 1;
#endif
  return f;
}

std::string version_text(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

}  // namespace

Device Device::cuda(int index) {
  Device d(DeviceType::CUDA, index);
  check_device_available(d);
  return d;
}

Device Device::best() {
  if (force_cpu()) return cpu();
  return cuda_status().usable ? Device(DeviceType::CUDA, 0) : cpu();
}

std::string Device::best_reason() {
  if (force_cpu()) {
    return fmt::format("MPT_FORCE_CPU is set; using the CPU (CUDA: {})", cuda_status().reason);
  }
  return cuda_status().reason;
}

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return Device(DeviceType::CUDA, 0);
  std::string_view digits = text;
  bool ok = digits.starts_with("cuda:") && digits.size() > 5 && digits.size() <= 5 + 6;
  int index = 0;
  if (ok) {
    for (char ch : digits.substr(5)) {
      ok = ok && ch >= '0' && ch <= '9';
      index = index * 10 + (ch - '0');
    }
  }
  MPT_CHECK(ok, "[device] cannot parse '{}' as a device: expected 'cpu', 'cuda' or 'cuda:N' with N >= 0", text);
  return Device(DeviceType::CUDA, index);
}

std::string Device::str() const { return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index_); }

const CudaStatus& cuda_status() {
  static const CudaStatus status = cuda_backend::probe();
  return status;
}

void check_device_available(Device device) {
  if (device.is_cpu()) return;
  const CudaStatus& s = cuda_status();
  MPT_CHECK(s.usable, "[cuda] {} was requested but CUDA is not available: {}", device, s.reason);
  MPT_CHECK(device.index() >= 0 && device.index() < s.device_count,
            "[cuda] {} was requested but {} CUDA device(s) were found (valid: cuda:0..cuda:{})", device,
            s.device_count, s.device_count - 1);
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect_cpu();
  return features;
}

std::string device_report() {
  const CudaStatus& s = cuda_status();
  const CpuFeatures& f = cpu_features();
  std::string out = "mptrain device report\n";
  if (s.built) {
    out += fmt::format("  CUDA backend: built (runtime {})\n", version_text(s.runtime_version));
    out += fmt::format("  CUDA driver:  {}\n",
                       s.driver_version > 0 ? version_text(s.driver_version) : std::string("none"));
    out += fmt::format("  CUDA devices: {}\n", s.device_count);
    for (const CudaDeviceInfo& d : s.devices) {
      out += fmt::format("    cuda:{}  {}, sm_{}{}, {:.1f} GiB, {} SMs\n", d.index, d.name, d.major, d.minor,
                         static_cast<double>(d.total_memory) / (1 << 30), d.multiprocessors);
    }
  } else {
    out += fmt::format("  CUDA backend: not built: {}\n", cuda_backend::kNotBuilt);
  }
  out += fmt::format("  CUDA status:  {}\n", s.reason);
  out += fmt::format("  best device:  {} ({})\n", Device::best(), Device::best_reason());
  out += fmt::format("  CPU:          {}, {} logical cores, {} OpenMP threads\n",
                     f.vendor.empty() ? std::string("unknown vendor") : f.vendor, f.logical_cores, f.omp_threads);
  auto yes = [](bool b) { return b ? "yes" : "no"; };
  out += fmt::format("  CPU features: avx2 {}, f16c {}, avx512f {}, avx512bw {}, avx512vl {}, avx512_bf16 {}, "
                     "avx512_fp16 {}, amx_bf16 {}\n",
                     yes(f.avx2), yes(f.f16c), yes(f.avx512f), yes(f.avx512bw), yes(f.avx512vl), yes(f.avx512_bf16),
                     yes(f.avx512_fp16), yes(f.amx_bf16));
  return out;
}

}  // namespace mpt
