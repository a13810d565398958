// tests/consumer/main.cpp: the main.cpp for README's CMake snippet: tensors, conversion and the device probe.
#include <mpt/mpt.h>

#include <cstdio>

int main() {
  try {
    const mpt::Tensor x = mpt::Tensor::arange(6, mpt::DType::F32).view({2, 3});
    const mpt::Tensor y = x.t().to(mpt::DType::BF16).contiguous();
    const auto values = y.to_vector<float>();
    const bool ok = values == std::vector<float>{0, 3, 1, 4, 2, 5};
    std::printf("%s\ndevice: %s (%s)\nconsumer %s\n", y.str().c_str(), mpt::Device::best().str().c_str(),
                mpt::cuda_status().reason.c_str(), ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
