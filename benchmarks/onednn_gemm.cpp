// benchmarks/onednn_gemm.cpp: a raw oneDNN bf16/f32 matmul on the GEMM shapes of a GPT training step, built by
// benchmarks/onednn_versions.sh against Debian's oneDNN and the PyPI onednn wheel to compare the two (not in CMake).
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

using dt = dnnl::memory::data_type;

// C (m x n) = A (m x k) B (k x n); A stored k x m when ta, B stored n x k when tb (the layouts of y = x W^T,
// dx = dy W and dW = dy^T x). Median seconds of `reps` after two warm-up runs.
double time_matmul(dnnl::engine& eng, dnnl::stream& s, dt type, int64_t m, int64_t n, int64_t k, bool ta, bool tb,
                   int reps) {
  const dnnl::memory::desc a({m, k}, type, ta ? dnnl::memory::dims{1, m} : dnnl::memory::dims{k, 1});
  const dnnl::memory::desc b({k, n}, type, tb ? dnnl::memory::dims{1, k} : dnnl::memory::dims{n, 1});
  const dnnl::memory::desc c({m, n}, type, dnnl::memory::dims{n, 1});
#if DNNL_VERSION_MAJOR >= 3
  const dnnl::matmul::primitive_desc pd(eng, a, b, c);
#else
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), eng);
#endif
  const dnnl::matmul prim(pd);
  dnnl::memory ma(a, eng), mb(b, eng), mc(c, eng);
  for (dnnl::memory* mem : {&ma, &mb}) {  // small values: no denormals or infinities
    const size_t bytes = mem->get_desc().get_size();
    std::vector<unsigned char> fill(bytes, 0x3c);
    std::copy(fill.begin(), fill.end(), static_cast<unsigned char*>(mem->get_data_handle()));
  }
  std::vector<double> t;
  for (int r = 0; r < reps + 2; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    prim.execute(s, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    s.wait();
    if (r >= 2) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  const dnnl_version_t* v = dnnl_version();
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const int64_t tokens = 4096;
  for (int64_t width : {384, 768}) {
    const int64_t h = 4 * width;
    struct Shape {
      const char* name;
      int64_t m, n, k;
      bool ta, tb;
    };
    for (const Shape& sh : {Shape{"fwd", tokens, h, width, false, true}, Shape{"dgrad", tokens, width, h, false, false},
                            Shape{"wgrad", h, width, tokens, true, false}}) {
      for (dt type : {dt::bf16, dt::f32}) {
        const double sec = time_matmul(eng, s, type, sh.m, sh.n, sh.k, sh.ta, sh.tb, 9);
        std::printf("oneDNN %d.%d %-5s %5lldx%lldx%lld %-4s %7.0f GFLOP/s\n", v->major, v->minor, sh.name,
                    static_cast<long long>(sh.m), static_cast<long long>(sh.n), static_cast<long long>(sh.k),
                    type == dt::bf16 ? "bf16" : "f32", 2.0 * sh.m * sh.n * sh.k / sec / 1e9);
      }
    }
  }
  return 0;
}
