// tests/support/device_test.cpp: the device under test, CUDA availability for skips, and CUDA-vs-CPU comparisons.
#include "device_test.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace mpt::testing {

Device test_device() {
  const char* env = std::getenv("MPT_TEST_DEVICE");
  if (env == nullptr || *env == '\0') return Device::cpu();
  return Device::parse(env);
}

std::string device_unusable_reason(Device device, int min_major) {
  if (device.is_cpu()) return {};
  const CudaStatus& st = cuda_status();
  if (!st.usable) return "no usable GPU: " + st.reason;
  if (device.index() >= static_cast<int>(st.devices.size()))
    return "no CUDA device " + device.str() + " (" + std::to_string(st.devices.size()) + " found)";
  const CudaDeviceInfo& info = st.devices.at(static_cast<size_t>(device.index()));
  if (info.major < min_major)
    return "needs compute capability " + std::to_string(min_major) + ".x, " + device.str() + " is " +
           std::to_string(info.major) + "." + std::to_string(info.minor);
  return {};
}

Tensor to_cpu(const Tensor& t) { return t.to(Device::cpu()); }
Tensor to_gpu(const Tensor& t) { return t.to(Device::cuda(0)); }

double normwise_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < w.size() && i < g.size(); ++i) {
    const double d = std::abs(g[i] - w[i]);
    num = std::max(num, std::isnan(d) && !(std::isnan(g[i]) && std::isnan(w[i])) ? INFINITY : (std::isnan(d) ? 0 : d));
    den = std::max(den, std::abs(w[i]));
  }
  return den > 0 ? num / den : num;
}

namespace {

void expect_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  const Tensor g = to_cpu(got).contiguous(), w = to_cpu(want).contiguous();
  const size_t es = g.element_size(), n = static_cast<size_t>(g.numel());
  const auto* gb = static_cast<const unsigned char*>(g.data_ptr());
  const auto* wb = static_cast<const unsigned char*>(w.data_ptr());
  size_t mismatches = 0, first = n;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(gb + i * es, wb + i * es, es) != 0) {
      if (first == n) first = i;
      ++mismatches;
    }
  }
  if (mismatches == 0) return;
  const std::vector<double> gv = g.to_vector<double>(), wv = w.to_vector<double>();
  const double tol_ratio = tolerance_ratio(g.to(DType::F64), w.to(DType::F64), tolerance(g.dtype()));
  ADD_FAILURE() << what << ": not bit-exact: " << mismatches << " of " << n << " elements ("
                << dtype_name(g.dtype()) << ") differ; first at flat index " << first << ": got " << gv[first]
                << ", CPU " << wv[first] << "; max |diff| " << max_abs_error(g, w)
                << ", worst ratio to tolerance(" << dtype_name(g.dtype()) << ") " << tol_ratio;
}

}  // namespace

void expect_match(const Tensor& got, const Tensor& want, const Match& m, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": result undefined";
  ASSERT_TRUE(want.defined()) << what << ": reference undefined";
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  if (m.kind == Match::Kind::BitExactUnderEmulation && cuda_is_emulated()) return expect_bits(got, want, what);
  if (!is_floating(got.dtype())) {
    if (m.tol.atol == 0 && m.tol.rtol == 0) return expect_bits(got, want, what);
    return expect_close(to_cpu(got).to(DType::F64), to_cpu(want).to(DType::F64), m.tol, what);
  }
  expect_close(to_cpu(got).to(DType::F64), to_cpu(want).to(DType::F64), m.tol, what);
}

double unit_roundoff(DType t) {
  switch (t) {
    case DType::BF16: return 0x1p-8;
    case DType::F16: return 0x1p-11;
    case DType::F8E4M3: return 0x1p-4;
    case DType::F8E5M2: return 0x1p-3;
    case DType::F64: return 0x1p-53;
    default: return 0x1p-24;
  }
}

Tensor abs64(const Tensor& t) {
  std::vector<double> v = to_cpu(t.detach()).to_vector<double>();
  for (double& x : v) x = std::fabs(x);
  return Tensor::from_vector(v, t.shape());
}

double fp8_accumulation_roundoff() { return cuda_is_emulated() ? 0x1p-24 : 0x1p-17; }

double bias_read_roundoff(const Tensor& bias, DType out, bool fp8_inputs) {
  const DType read = fp8_inputs && out == DType::F32 ? DType::BF16 : out;
  if (read == DType::F32 || read == DType::F64 || bias.dtype() == read) return 0;
  double m = 0;
  for (double v : to_cpu(bias.detach()).to_vector<double>()) m = std::max(m, std::fabs(v));
  return unit_roundoff(read) * m;
}

void expect_gemm_close(const Tensor& got, const Tensor& want, const Tensor& mag, int64_t k, double extra_atol,
                       const std::string& what, double accum_u) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(mag.shape(), want.shape()) << what;
  const std::vector<double> g = to_cpu(got).to_vector<double>(), w = to_cpu(want).to_vector<double>();
  const std::vector<double> m = mag.to_vector<double>();
  const double u = unit_roundoff(want.dtype()), atol = extra_atol + (want.dtype() == DType::F16 ? 0x1p-24 : 0.0);
  double worst = 0;
  size_t wi = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const double bound = 2 * static_cast<double>(k) * accum_u * m[i] + 2 * u * std::fabs(w[i]) + atol;
    const double d = std::fabs(g[i] - w[i]);
    const double r = std::isnan(d) ? (std::isnan(g[i]) && std::isnan(w[i]) ? 0 : INFINITY) : (d == 0 ? 0 : d / bound);
    if (r > worst) worst = r, wi = i;
  }
  EXPECT_LE(worst, 1.0) << what << ": element " << wi << " got " << g[wi] << ", CPU " << w[wi] << ", |A||B| "
                        << m[wi] << " (k " << k << ", accumulation roundoff " << accum_u << ")";
}

void expect_match(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want, const Match& m,
                  const std::string& what) {
  std::vector<std::string> gk, wk;
  for (const auto& kv : got) gk.push_back(kv.first);
  for (const auto& kv : want) wk.push_back(kv.first);
  ASSERT_EQ(gk, wk) << what << ": different keys";
  for (const auto& [key, t] : want) expect_match(got.at(key), t, m, what + " [" + key + "]");
}

}  // namespace mpt::testing
