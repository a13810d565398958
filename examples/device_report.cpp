// examples/device_report.cpp: what mptrain found (CUDA build, driver, devices, CPU features) and the device it picks.
//
//   device_report            human-readable report
//   device_report --json     the same facts as one JSON object
//   MPT_FORCE_CPU=1 device_report   Device::best() picks the CPU even when a GPU is usable
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <string>
#include <string_view>

#include "mpt/core/device.h"

namespace {

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<int>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string json_report() {
  const mpt::CudaStatus& s = mpt::cuda_status();
  const mpt::CpuFeatures& f = mpt::cpu_features();
  std::string devices;
  for (const mpt::CudaDeviceInfo& d : s.devices) {
    if (!devices.empty()) devices += ", ";
    devices += fmt::format(R"({{"index": {}, "name": {}, "sm": "{}{}", "total_memory": {}, "multiprocessors": {}}})",
                           d.index, json_string(d.name), d.major, d.minor, d.total_memory, d.multiprocessors);
  }
  auto b = [](bool v) { return v ? "true" : "false"; };
  return fmt::format(
      "{{\"cuda\": {{\"built\": {}, \"usable\": {}, \"driver_version\": {}, \"runtime_version\": {}, "
      "\"device_count\": {}, \"devices\": [{}], \"reason\": {}}}, "
      "\"best_device\": {}, \"best_reason\": {}, "
      "\"cpu\": {{\"vendor\": {}, \"logical_cores\": {}, \"omp_threads\": {}, \"avx2\": {}, \"f16c\": {}, "
      "\"avx512f\": {}, \"avx512bw\": {}, \"avx512vl\": {}, \"avx512_bf16\": {}, \"avx512_fp16\": {}, "
      "\"amx_bf16\": {}}}}}",
      b(s.built), b(s.usable), s.driver_version, s.runtime_version, s.device_count, devices, json_string(s.reason),
      json_string(mpt::Device::best().str()), json_string(mpt::Device::best_reason()), json_string(f.vendor),
      f.logical_cores, f.omp_threads, b(f.avx2), b(f.f16c), b(f.avx512f), b(f.avx512bw), b(f.avx512vl),
      b(f.avx512_bf16), b(f.avx512_fp16), b(f.amx_bf16));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Report the devices mptrain can use and the one it picks"};
  bool json = false;
  app.add_flag("--json", json, "print one JSON object instead of the text report");
  CLI11_PARSE(app, argc, argv);

  if (json) {
    fmt::print("{}\n", json_report());
  } else {
    fmt::print("{}", mpt::device_report());
  }
  return 0;
}
