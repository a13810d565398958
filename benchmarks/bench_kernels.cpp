// benchmarks/bench_kernels.cpp: kernel throughput next to this machine's measured peaks (table + JSON); one function
// per section: peaks (the library's register-only loops), GEMM (the matmul op against the raw oneDNN primitive, side
// by side), memory-bound ops (memory_bound.cpp).
#include <mpt/mpt.h>
#include <mpt/ops/matmul.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "kernels/cpu/peak.h"
#include "memory_bound.h"

namespace {

using mpt::DType;
using mpt::Tensor;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// ---------------------------------------------------------------- peaks
// The library's register-only loops (kernels/cpu/peak.h): the same figures mpt::dense_peak gives training programs.
struct Peaks {
  double fp32_fma = 0, bf16_dot = 0, amx_bf16 = 0;
  // What a bf16 GEMM can reach: the faster bf16 unit, else the FP32 FMA (mpt::dense_peak's rule).
  double bf16() const { return std::max({amx_bf16, bf16_dot, fp32_fma}); }
};

Peaks measure_peaks(nlohmann::json& out) {
  namespace kc = mpt::kernels::cpu;
  const kc::PeakLoop fma = kc::fp32_fma_peak(), dot = kc::bf16_dot_peak(), amx = kc::amx_bf16_peak();
  const Peaks p{fma.gflops, dot.gflops, amx.gflops};
  fmt::print("peaks ({} threads): FP32 {} {:.0f} GFLOP/s, AVX512-BF16 dot product {:.0f} GFLOP/s, AMX-BF16 tile dot "
             "product {:.0f} GFLOP/s\n\n",
             omp_get_max_threads(), *fma.isa != '\0' ? fma.isa : "FMA", p.fp32_fma, p.bf16_dot, p.amx_bf16);
  out = {{"threads", omp_get_max_threads()}, {"fp32_fma_gflops", p.fp32_fma}, {"bf16_dot_gflops", p.bf16_dot},
         {"amx_bf16_gflops", p.amx_bf16}};
  return p;
}

// ---------------------------------------------------------------- attention

// Causal flash attention forward and backward (ops::causal_attention) on GPT-2 head shapes: GFLOP/s counting the
// causal half of QK^T and PV (forward 2 GEMMs, backward 5 with the recomputed scores), next to the FP32 FMA peak
// (the CPU kernels compute in FP32).
nlohmann::json bench_attention(int64_t batch_heads, int64_t seq, int64_t head_dim, int reps, const Peaks& peaks) {
  nlohmann::json rows = nlohmann::json::array();
  fmt::print("attention (B*H={}, T={}, D={})    ms   GFLOP/s  %FP32 peak\n", batch_heads, seq, head_dim);
  for (mpt::DType dt : {mpt::DType::F32, mpt::DType::BF16}) {
    mpt::Generator gen(3);
    auto make = [&] { return mpt::Tensor::normal({1, batch_heads, seq, head_dim}, 0, 1, dt, mpt::Device::cpu(), gen); };
    const mpt::Tensor q = make(), k = make(), v = make(), dout = make();
    mpt::ops::AttentionResult r = mpt::ops::causal_attention(q, k, v);
    const double gemm = 2.0 * seq * seq / 2 * head_dim * batch_heads;  // one causal T x T x D product
    const double fwd = mpt::bench::median_seconds(reps, [&] { r = mpt::ops::causal_attention(q, k, v); });
    const double bwd = mpt::bench::median_seconds(
        reps, [&] { mpt::ops::causal_attention_backward(dout, q, k, v, r.out, r.lse); });
    for (auto [name, t, flops] : {std::tuple{"forward", fwd, 2 * gemm}, std::tuple{"backward", bwd, 5 * gemm}}) {
      const double gf = flops / t / 1e9;
      fmt::print("  {:<9} {:<5}                 {:7.2f} {:9.0f} {:10.0f}%\n", name, mpt::dtype_name(dt), t * 1e3, gf,
                 peaks.fp32_fma > 0 ? 100 * gf / peaks.fp32_fma : 0.0);
      rows.push_back({{"pass", name}, {"dtype", mpt::dtype_name(dt)}, {"ms", t * 1e3}, {"gflops", gf}});
    }
  }
  fmt::print("\n");
  return rows;
}

// The same heads as 16 samples x 6 heads of a dynamically padded batch, lengths (b + 1) T / 16 (mean 0.53 T): with
// AttentionOptions::lengths the CPU kernel skips each sample's padding key blocks; without, it computes them. The ratio
// is what key padding saves on this batch: padding queries still attend their sample's real keys (PyTorch's masked
// SDPA), so the work is sum_b len_b^2 / 2 + (T - len_b) len_b, 0.70 of the unmasked 16 T^2 / 2 here (64-key blocks
// round each length up).
nlohmann::json bench_attention_padding(int64_t seq, int64_t head_dim, int reps) {
  const int64_t B = 16, H = 6;
  std::vector<int32_t> len(B);
  for (int64_t b = 0; b < B; ++b) len[static_cast<size_t>(b)] = static_cast<int32_t>((b + 1) * seq / B);
  mpt::ops::AttentionOptions padded;
  padded.lengths = mpt::Tensor::from_vector(len, {B});
  nlohmann::json rows = nlohmann::json::array();
  fmt::print("key-padded attention (B={}, H={}, T={}, D={}, lengths (b+1)T/16)   unmasked ms   padded ms   ratio\n", B,
             H, seq, head_dim);
  for (mpt::DType dt : {mpt::DType::F32, mpt::DType::BF16}) {
    mpt::Generator gen(5);
    auto make = [&] { return mpt::Tensor::normal({B, H, seq, head_dim}, 0, 1, dt, mpt::Device::cpu(), gen); };
    const mpt::Tensor q = make(), k = make(), v = make(), dout = make();
    for (bool backward : {false, true}) {
      double ms[2];
      for (int p = 0; p < 2; ++p) {
        const mpt::ops::AttentionOptions o = p == 0 ? mpt::ops::AttentionOptions{} : padded;
        mpt::ops::AttentionResult r = mpt::ops::causal_attention(q, k, v, o);
        auto fwd = [&] { r = mpt::ops::causal_attention(q, k, v, o); };
        auto bwd = [&] { mpt::ops::causal_attention_backward(dout, q, k, v, r.out, r.lse, o); };
        ms[p] = 1e3 * (backward ? mpt::bench::median_seconds(reps, bwd) : mpt::bench::median_seconds(reps, fwd));
      }
      const char* pass = backward ? "backward" : "forward";
      fmt::print("  {:<9} {:<5}                                           {:9.2f} {:11.2f} {:7.2f}\n", pass,
                 mpt::dtype_name(dt), ms[0], ms[1], ms[1] / ms[0]);
      rows.push_back({{"pass", pass}, {"dtype", mpt::dtype_name(dt)}, {"unmasked_ms", ms[0]}, {"padded_ms", ms[1]}});
    }
  }
  fmt::print("\n");
  return rows;
}

// ---------------------------------------------------------------- GEMM
struct GemmShape {
  std::string name;
  int64_t m, n, k;
  bool ta, tb;
};

// A transformer MLP's first linear layer (W: 4C x C) on `tokens` rows: forward and its two backward GEMMs.
std::vector<GemmShape> mlp_shapes(int64_t tokens, int64_t width) {
  const int64_t c = width, h = 4 * width;
  return {{fmt::format("fwd  y=xW^T  C={}", c), tokens, h, c, false, true},
          {fmt::format("dgrad dx=dyW C={}", c), tokens, c, h, false, false},
          {fmt::format("wgrad dW=dy^Tx C={}", c), h, c, tokens, true, false}};
}

// The raw oneDNN matmul on plain row-major buffers (the layouts the op hands over), created once.
class RawMatmul {
 public:
  RawMatmul(const GemmShape& s, dnnl::memory::data_type in, dnnl::memory::data_type out, void* a, void* b, void* c)
      : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    using dims = dnnl::memory::dims;
    const dnnl::memory::desc da({s.m, s.k}, in, s.ta ? dims{1, s.m} : dims{s.k, 1});
    const dnnl::memory::desc db({s.k, s.n}, in, s.tb ? dims{1, s.k} : dims{s.n, 1});
    const dnnl::memory::desc dc({s.m, s.n}, out, dims{s.n, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(da, db, dc), engine_);
    impl_ = pd.impl_info_str();
    prim_ = dnnl::matmul(pd);
    args_ = {{DNNL_ARG_SRC, dnnl::memory(da, engine_, a)}, {DNNL_ARG_WEIGHTS, dnnl::memory(db, engine_, b)},
             {DNNL_ARG_DST, dnnl::memory(dc, engine_, c)}};
  }
  void run() {
    prim_.execute(stream_, args_);
    stream_.wait();
  }
  const std::string& impl() const { return impl_; }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::matmul prim_;
  std::unordered_map<int, dnnl::memory> args_;
  std::string impl_;
};

// One op configuration: input dtype and, for FP8, the scaling.
struct GemmVariant {
  std::string name;
  DType in, out;
  bool fp8 = false, block = false, pow2 = true;
};

Tensor scales(const mpt::Shape& shape, bool pow2) {
  return pow2 ? Tensor::full(shape, 0.5, DType::F32) : Tensor::uniform(shape, 0.3, 0.7, DType::F32);
}

std::vector<GemmVariant> gemm_variants() {
  return {{"f32", DType::F32, DType::F32},
          {"bf16", DType::BF16, DType::BF16},
          {"f16 (via f32)", DType::F16, DType::F16},
          {"e4m3 tensor->bf16", DType::F8E4M3, DType::BF16, true, false},
          {"e4m3 block pow2", DType::F8E4M3, DType::BF16, true, true, true},
          {"e4m3 block fp32", DType::F8E4M3, DType::BF16, true, true, false}};
}

// The matmul options of a variant on a shape (FP8: 1x128 activations and gradients, 128x128 weights).
mpt::ops::MatmulOptions gemm_options(const GemmShape& s, const GemmVariant& v) {
  using Kind = mpt::ops::Fp8Scaling::Kind;
  mpt::ops::MatmulOptions opt{.trans_a = s.ta, .trans_b = s.tb, .out_dtype = v.out};
  if (!v.fp8) return opt;
  const int64_t kb = (s.k + 127) / 128;
  if (!v.block) {
    opt.scale_a = {Kind::PerTensor, Tensor::full({1}, 0.37, DType::F32)};
    opt.scale_b = {Kind::PerTensor, Tensor::full({1}, 1.9, DType::F32)};
    return opt;
  }
  const bool b_is_weight = !s.ta;  // fwd and dgrad multiply by W; wgrad multiplies two activations
  opt.scale_a = {Kind::Block1x128, scales({s.m, kb}, v.pow2)};
  opt.scale_b = b_is_weight ? mpt::ops::Fp8Scaling{Kind::Block128x128, scales({(s.n + 127) / 128, kb}, v.pow2)}
                            : mpt::ops::Fp8Scaling{Kind::Block1x128, scales({s.n, kb}, v.pow2)};
  return opt;
}

// The op and the raw primitive alternate run by run, so drift and other load hit both alike.
nlohmann::json bench_gemm(int64_t tokens, const std::vector<int64_t>& widths, int reps, const Peaks& peaks) {
  nlohmann::json rows = nlohmann::json::array();
  fmt::print("{:<22} {:<18} {:>9} {:>9} {:>7} {:>7}  {}\n", "GEMM (m x n x k)", "dtype", "op GF/s", "raw GF/s",
             "op/raw", "%peak", "raw oneDNN impl");
  for (int64_t width : widths)
    for (const GemmShape& s : mlp_shapes(tokens, width))
      for (const GemmVariant& v : gemm_variants()) {
        const bool wide = v.in == DType::F32 || v.in == DType::F16;  // computed on the f32 path
        const DType raw_in = wide ? DType::F32 : DType::BF16, raw_out = wide ? DType::F32 : DType::BF16;
        const mpt::Shape sa = s.ta ? mpt::Shape{s.k, s.m} : mpt::Shape{s.m, s.k};
        const mpt::Shape sb = s.tb ? mpt::Shape{s.n, s.k} : mpt::Shape{s.k, s.n};
        const Tensor a = Tensor::normal(sa, 0, 1).to(v.in), b = Tensor::normal(sb, 0, 1).to(v.in);
        const Tensor ra = a.to(raw_in), rb = b.to(raw_in), rc = Tensor::empty({s.m, s.n}, raw_out);
        const auto dt = [](DType t) { return t == DType::F32 ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::bf16; };
        RawMatmul raw(s, dt(raw_in), dt(raw_out), ra.data_ptr(), rb.data_ptr(), rc.data_ptr());
        const mpt::ops::MatmulOptions opt = gemm_options(s, v);
        mpt::ops::matmul(a, b, opt);  // warm-up: primitive creation, pools, page faults
        raw.run();
        std::vector<double> t_op, t_raw;
        for (int r = 0; r < reps; ++r) {
          auto t0 = Clock::now();
          mpt::ops::matmul(a, b, opt);
          t_op.push_back(seconds_since(t0));
          t0 = Clock::now();
          raw.run();
          t_raw.push_back(seconds_since(t0));
        }
        const double flop = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
        const double op = flop / median(t_op) / 1e9, rw = flop / median(t_raw) / 1e9;
        const double peak = wide ? peaks.fp32_fma : peaks.bf16();
        fmt::print("{:<22} {:<18} {:>9.0f} {:>9.0f} {:>6.0f}% {:>6.0f}%  {}\n",
                   fmt::format("{} {}x{}x{}", s.name.substr(0, 5), s.m, s.n, s.k), v.name, op, rw, 100 * op / rw,
                   peak > 0 ? 100 * op / peak : 0.0, raw.impl());
        rows.push_back({{"shape", s.name}, {"m", s.m}, {"n", s.n}, {"k", s.k}, {"trans_a", s.ta}, {"trans_b", s.tb},
                        {"dtype", v.name}, {"op_gflops", op}, {"raw_gflops", rw}, {"op_over_raw", op / rw},
                        {"raw_dtype", fmt::format("{}->{}", raw_in, raw_out)}, {"raw_impl", raw.impl()},
                        {"peak_gflops", peak}});
      }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_kernels: CPU kernel throughput next to the measured peaks"};
  int64_t tokens = 4096;
  std::vector<int64_t> widths{384, 768};
  int reps = 7;
  std::string json_path;
  int64_t elements = 32 << 20;
  bool skip_gemm = false, peaks_only = false;
  app.add_option("-n,--elements", elements, "elements per tensor for the memory-bound ops (default 32M)")
      ->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 34));
  app.add_flag("--skip-gemm", skip_gemm, "only the memory-bound section");
  app.add_flag("--peaks-only", peaks_only, "only the compute peaks and the memcpy bandwidth of --elements floats");
  bool attention_only = false;
  app.add_flag("--attention-only", attention_only, "only the causal attention sections (96 heads, T=256, D=64; unmasked and key-padded)");
  app.add_option("-t,--tokens", tokens, "GEMM rows: batch x sequence length");
  app.add_option("-w,--widths", widths, "model widths C (GEMMs of an MLP with hidden 4C)");
  app.add_option("-r,--reps", reps, "timed repetitions after one warm-up (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "also write the results to this file");
  CLI11_PARSE(app, argc, argv);

  nlohmann::json out;
  try {
    nlohmann::json peaks_json;
    const Peaks peaks = measure_peaks(peaks_json);
    out = {{"benchmark", "kernels"}, {"tokens", tokens}, {"reps", reps}, {"peaks", peaks_json}};
    if (peaks_only) {
      const double gbps = mpt::bench::memcpy_gbps(static_cast<size_t>(elements) * sizeof(float), reps);
      fmt::print("memcpy of {} MiB ({} threads): {:.1f} GB/s (bytes read + written)\n", (elements * 4) >> 20,
                 omp_get_max_threads(), gbps);
      out["peaks"]["memcpy_gbps"] = gbps;
      out["peaks"]["memcpy_bytes"] = elements * 4;
    } else if (attention_only) {
      out["attention"] = bench_attention(96, 256, 64, reps, peaks);
      out["attention_padding"] = bench_attention_padding(256, 64, reps);
    } else {
      out["attention"] = bench_attention(96, 256, 64, reps, peaks);
      out["attention_padding"] = bench_attention_padding(256, 64, reps);
      if (!skip_gemm) out["gemm"] = bench_gemm(tokens, widths, reps, peaks);
      out["memory_bound"] = bench_memory_bound(elements, reps);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_kernels: {}\n", e.what());
    return 1;
  }
  fmt::print("{}\n", out.dump());
  if (!json_path.empty()) {
    std::FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f) {
      fmt::print(stderr, "bench_kernels: cannot write {}\n", json_path);
      return 1;
    }
    fmt::print(f, "{}\n", out.dump(2));
    std::fclose(f);
  }
  return 0;
}
