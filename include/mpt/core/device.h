// mpt/core/device.h: CPU and CUDA devices, and how the library decides whether a GPU is usable.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mpt {

enum class DeviceType : uint8_t { CPU, CUDA };

class Device {
 public:
  constexpr Device() = default;
  static constexpr Device cpu() { return Device(DeviceType::CPU, 0); }
  // Throws mpt::Error naming the reason when the CUDA backend is not built, no driver or no such device.
  static Device cuda(int index = 0);
  // cuda:0 when a GPU is usable, else cpu; best_reason() says why. The environment variable
  // MPT_FORCE_CPU=1 makes it pick the CPU even when a GPU is usable.
  static Device best();
  static std::string best_reason();
  // "cpu", "cuda", "cuda:1"; throws mpt::Error on anything else. Only the syntax is checked: whether
  // the device exists is checked when it is used (allocation, streams, copies), like Device::cuda does.
  static Device parse(const std::string& text);

  constexpr DeviceType type() const { return type_; }
  constexpr int index() const { return index_; }
  constexpr bool is_cpu() const { return type_ == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type_ == DeviceType::CUDA; }
  std::string str() const;
  constexpr bool operator==(const Device&) const = default;

 private:
  constexpr Device(DeviceType t, int i) : type_(t), index_(i) {}
  DeviceType type_ = DeviceType::CPU;
  int index_ = 0;
};

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int major = 0;                // compute capability
  int minor = 0;
  size_t total_memory = 0;      // bytes
  int multiprocessors = 0;
};

// What the library found when it probed for CUDA (once, thread-safe, cached).
struct CudaStatus {
  bool built = false;         // the CUDA backend was compiled in
  bool usable = false;        // built, a driver is present and at least one device answered
  int driver_version = 0;     // cudaDriverGetVersion (0: no driver), e.g. 12040 for 12.4
  int runtime_version = 0;    // cudaRuntimeGetVersion
  int device_count = 0;
  std::vector<CudaDeviceInfo> devices;
  std::string reason;         // one line: why CUDA is or is not used
};
const CudaStatus& cuda_status();

// Throws mpt::Error unless `device` is the CPU or a CUDA device that exists and is usable.
void check_device_available(Device device);

// x86 features detected at run time (CPUID and the OS-enabled register state in XCR0).
struct CpuFeatures {
  std::string vendor;
  bool avx2 = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
  bool amx_bf16 = false;   // the CPU has it and the OS enables tile state (Linux still wants arch_prctl)
  int logical_cores = 0;   // std::thread::hardware_concurrency
  int omp_threads = 0;     // omp_get_max_threads
};
const CpuFeatures& cpu_features();

// A multi-line human-readable report: build, driver, devices (name, compute capability, memory), CPU features.
std::string device_report();

}  // namespace mpt

template <>
struct fmt::formatter<mpt::Device> : fmt::formatter<std::string> {
  auto format(const mpt::Device& d, format_context& ctx) const {
    return fmt::formatter<std::string>::format(d.str(), ctx);
  }
};
