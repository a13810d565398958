// tests/ops/test_pointwise_goldens.cpp: the general ops in bf16 and f16 against PyTorch (forward and gradients,
// tests/goldens/pointwise_lowp.safetensors from tools/make_pointwise_goldens.py).
//
// Forward: the same bits as PyTorch's, or one ulp apart (both compute in float32 and round once). Gradients differ by
// design: PyTorch's backward of tanh, sigmoid, exp, sqrt, rsqrt (and pow's) reads the forward's output rounded to
// bf16/f16 (dy * (1 - y^2) ...), ours computes f'(x) in float from the input and rounds once. So each gradient element
// must be at least as close to the exact float64 gradient as PyTorch's, up to one ulp, and ours must not be less
// accurate on average. The same holds for swiglu's forward, which PyTorch composes as F.silu(a) * b (two roundings).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>

#include "mpt/mpt.h"
#include "test_util.h"

namespace mpt {
namespace {

using Unary = std::function<Tensor(const Tensor&)>;
using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;

const std::map<std::string, Unary>& unary_ops() {
  static const std::map<std::string, Unary> m{
      {"neg", [](const Tensor& x) { return -x; }},
      {"abs", [](const Tensor& x) { return ops::abs(x); }},
      {"relu", [](const Tensor& x) { return ops::relu(x); }},
      {"silu", [](const Tensor& x) { return ops::silu(x); }},
      {"tanh", [](const Tensor& x) { return ops::tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return ops::sigmoid(x); }},
      {"exp", [](const Tensor& x) { return ops::exp(x); }},
      {"log", [](const Tensor& x) { return ops::log(x); }},
      {"sqrt", [](const Tensor& x) { return ops::sqrt(x); }},
      {"rsqrt", [](const Tensor& x) { return ops::rsqrt(x); }},
      {"softplus", [](const Tensor& x) { return ops::softplus(x); }},
      {"pow2", [](const Tensor& x) { return ops::pow(x, 2); }},
      {"pow1.5", [](const Tensor& x) { return ops::pow(x, 1.5); }},
      {"clamp", [](const Tensor& x) { return ops::clamp(x, -0.5, 0.75); }}};
  return m;
}

const std::map<std::string, Binary>& binary_ops() {
  static const std::map<std::string, Binary> m{
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return ops::maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return ops::minimum(a, b); }},
      {"pow", [](const Tensor& a, const Tensor& b) { return ops::pow(a, b); }},
      {"swiglu", [](const Tensor& a, const Tensor& b) { return ops::swiglu(a, b); }}};
  return m;
}

struct Agreement {
  int64_t exact = 0, within_ulp = 0, total = 0;
};

// Elementwise: identical bits, or one unit in the last place of the dtype apart (both computed in float32 and rounded
// once; our exp, log, tanh and sigmoid are not glibc's or SLEEF's, so a float result on a rounding boundary may land
// on the neighbour).
Agreement compare(const Tensor& got, const Tensor& want, DType dt) {
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  const double eps = dt == DType::BF16 ? 0x1p-8 : 0x1p-11;  // half the dtype's epsilon: one ulp is eps * 2^e
  Agreement a;
  a.total = static_cast<int64_t>(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] == w[i]) {
      ++a.exact;
      ++a.within_ulp;
      continue;
    }
    const double ulp = 2 * eps * std::ldexp(1.0, std::ilogb(std::fabs(w[i])));
    if (std::fabs(g[i] - w[i]) <= ulp * 1.0001) ++a.within_ulp;
  }
  return a;
}

// The float64 gradients of fn at the (rounded) inputs: the reference both gradients are measured against.
std::vector<Tensor> exact_grads(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                const std::vector<Tensor>& inputs, const Tensor& dy) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) leaves.push_back(t.to(DType::F64).requires_grad_());
  fn(leaves).backward(dy.to(DType::F64));
  std::vector<Tensor> out;
  for (const Tensor& l : leaves) out.push_back(l.grad());
  return out;
}

class PointwiseGoldens : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_ = new mpt::StateDict(io::load_safetensors(MPT_GOLDENS_DIR "/pointwise_lowp.safetensors"));
  }
  static void TearDownTestSuite() { delete g_; }
  static const Tensor& at(const std::string& name) { return g_->at(name); }
  static mpt::StateDict* g_;

  void expect_agreement(const Tensor& got, const std::string& name, DType dt) {
    const Agreement a = compare(got, at(name), dt);
    EXPECT_EQ(a.within_ulp, a.total) << name << ": " << a.total - a.within_ulp << " elements more than one ulp off";
    // Nearly all elements are the same bits (a test that checked only the ulp bound could pass a systematic bias).
    EXPECT_GE(a.exact, a.total * 95 / 100) << name << ": only " << a.exact << " of " << a.total << " identical";
    exact_ += a.exact;
    total_ += a.total;
  }
  // ours and PyTorch's gradient against the exact one: element by element within PyTorch's error plus one ulp, and a
  // mean error no larger than PyTorch's.
  void expect_as_accurate(const Tensor& ours, const std::string& name, const Tensor& exact, DType dt) {
    const auto o = ours.to_vector<double>(), t = at(name).to_vector<double>(), e = exact.to_vector<double>();
    const double half_eps = dt == DType::BF16 ? 0x1p-8 : 0x1p-11;
    double sum_ours = 0, sum_torch = 0;
    int64_t worse = 0;
    for (size_t i = 0; i < o.size(); ++i) {
      const double ulp = e[i] == 0 ? 0 : 2 * half_eps * std::ldexp(1.0, std::ilogb(std::fabs(e[i])));
      const double eo = std::fabs(o[i] - e[i]), et = std::fabs(t[i] - e[i]);
      sum_ours += eo;
      sum_torch += et;
      if (eo > et + ulp * 1.0001) ++worse;
    }
    EXPECT_EQ(worse, 0) << name << ": elements less accurate than PyTorch's by more than an ulp";
    EXPECT_LE(sum_ours, sum_torch * 1.0001 + 1e-30) << name << ": mean error " << sum_ours / o.size()
                                                    << " vs PyTorch's " << sum_torch / o.size();
    better_ += sum_ours < sum_torch ? 1 : 0;
  }
  int64_t exact_ = 0, total_ = 0, better_ = 0;
};
mpt::StateDict* PointwiseGoldens::g_ = nullptr;

TEST_F(PointwiseGoldens, UnaryOpsMatchPyTorchInBf16AndF16) {
  for (const char* dn : {"bf16", "f16"}) {
    const DType dt = std::string(dn) == "bf16" ? DType::BF16 : DType::F16;
    for (const auto& [op, fn] : unary_ops()) {
      const std::string p = std::string(dn) + "." + op + ".";
      const Tensor x = at(p + "x").clone().requires_grad_();
      ASSERT_EQ(x.dtype(), dt);
      const Tensor y = fn(x);
      y.backward(at(p + "dy"));
      expect_agreement(y, p + "y", dt);
      const auto exact = exact_grads([&fn](const std::vector<Tensor>& in) { return fn(in[0]); }, {at(p + "x")},
                                     at(p + "dy"));
      expect_as_accurate(x.grad(), p + "dx", exact[0], dt);
    }
  }
  std::printf("unary: %lld of %lld forward elements identical to PyTorch's; %lld of 28 gradients more accurate than "
              "PyTorch's, the others equal\n", static_cast<long long>(exact_), static_cast<long long>(total_),
              static_cast<long long>(better_));
}

TEST_F(PointwiseGoldens, BinaryOpsMatchPyTorchInBf16AndF16) {
  for (const char* dn : {"bf16", "f16"}) {
    const DType dt = std::string(dn) == "bf16" ? DType::BF16 : DType::F16;
    for (const auto& [op, fn] : binary_ops()) {
      const std::string p = std::string(dn) + "." + op + ".";
      const Tensor a = at(p + "a").clone().requires_grad_(), b = at(p + "b").clone().requires_grad_();
      const Tensor y = fn(a, b);
      y.backward(at(p + "dy"));
      if (std::string(op) == "swiglu") {  // PyTorch's F.silu(a) * b rounds twice, ours (fused) once
        expect_as_accurate(y, p + "y", fn(at(p + "a").to(DType::F64), at(p + "b").to(DType::F64)), dt);
      } else {
        expect_agreement(y, p + "y", dt);
      }
      const auto exact = exact_grads([&fn](const std::vector<Tensor>& in) { return fn(in[0], in[1]); },
                                     {at(p + "a"), at(p + "b")}, at(p + "dy"));
      expect_as_accurate(a.grad(), p + "da", exact[0], dt);
      expect_as_accurate(b.grad(), p + "db", exact[1], dt);
    }
  }
  std::printf("binary: %lld of %lld forward elements identical to PyTorch's; %lld of 24 gradients more accurate than "
              "PyTorch's, the others equal\n", static_cast<long long>(exact_), static_cast<long long>(total_),
              static_cast<long long>(better_));
}

}  // namespace
}  // namespace mpt
