// kernels/cpu/peak.cpp: register-only FP32 FMA, AVX512-BF16 and AMX-BF16 loops, timed on every OpenMP thread at once.
#include "kernels/cpu/peak.h"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <ctime>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace mpt::kernels::cpu {
namespace {

using Loop = double (*)(int64_t iters);

// The median of the runs after the first (which also starts the threads and wakes the wide vector units). Not their
// best: on a shared virtual machine a run now and then reads 30-40% above the others (its threads' CPU clocks
// undercount), where a median of five does not move.
constexpr int kRuns = 6;
volatile double g_sink = 0;  // the loops' results land here, so none of them is optimised away

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Runs `loop` on every OpenMP thread at once, `flops_per_iter` per thread and iteration, and sums the threads' rates.
// Each thread is timed by its own CPU time, not the wall clock: another process that takes a core for a while lowers
// no thread's rate. (SMT siblings that take turns rather than share a core overstate the peak, never understate it.)
PeakLoop time_loop(Loop loop, int64_t iters, double flops_per_iter, const char* isa) {
  PeakLoop r;
  r.isa = isa;
  const double flops = static_cast<double>(iters) * flops_per_iter;
  double sink = 0;
  std::array<double, kRuns> rates{};
  for (int run = 0; run < kRuns; ++run) {
    int threads = 1;
    double gflops = 0;
#pragma omp parallel reduction(+ : sink, gflops)
    {
      const double t0 = thread_cpu_seconds();
      sink += loop(iters);
      gflops += flops / (thread_cpu_seconds() - t0) / 1e9;
#pragma omp single
      threads = omp_get_num_threads();
    }
    r.threads = threads;
    rates[static_cast<size_t>(run)] = gflops;
  }
  std::sort(rates.begin() + 1, rates.end());
  r.gflops = rates[1 + (kRuns - 1) / 2];
  g_sink = sink;
  return r;
}

// ------------------------------------------------------------ FP32 FMA and BF16 dot product
// Enough independent accumulators to cover the FMA latency times the FMA ports (4 x 2 on current cores); the loops
// are fully unrolled so that each accumulator stays in one register (32 zmm; 16 ymm, hence 12 for AVX2).
constexpr int kAcc512 = 16, kAcc256 = 12;

__attribute__((target("avx512f"))) double sum_lanes(const __m512* acc) {
  alignas(64) float lanes[16];
  double sum = 0;
  for (int i = 0; i < kAcc512; ++i) {
    _mm512_store_ps(lanes, acc[i]);
    for (float v : lanes) sum += v;
  }
  return sum;
}

__attribute__((target("avx512f"))) double fma512_loop(int64_t iters) {
  __m512 acc[kAcc512];
#pragma GCC unroll 16
  for (int i = 0; i < kAcc512; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAcc512; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  }
  return sum_lanes(acc);
}

__attribute__((target("avx2,fma"))) double fma256_loop(int64_t iters) {
  __m256 acc[kAcc256];
#pragma GCC unroll 12
  for (int i = 0; i < kAcc256; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kAcc256; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  }
  alignas(32) float lanes[8];
  double sum = 0;
  for (int i = 0; i < kAcc256; ++i) {
    _mm256_store_ps(lanes, acc[i]);
    for (float v : lanes) sum += v;
  }
  return sum;
}

__attribute__((target("avx512f,avx512bf16"))) double bf16_dot_loop(int64_t iters) {
  __m512 acc[kAcc512];
#pragma GCC unroll 16
  for (int i = 0; i < kAcc512; ++i) acc[i] = _mm512_setzero_ps();
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3F80), y = (__m512bh)_mm512_set1_epi16(0x3380);  // 1, 6e-8
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAcc512; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  }
  return sum_lanes(acc);
}

// ------------------------------------------------------------ AMX-BF16
// Palette 1: 8 tiles of up to 16 rows x 64 bytes; every tile here is full size.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

bool cpu_has_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __get_cpuid_count(7, 0, &a, &b, &c, &d);
  return ((d >> 24) & 1) != 0 && ((d >> 22) & 1) != 0;  // AMX-TILE, AMX-BF16
}

// Linux enables the 8 KiB tile data state per process only on request; the answer holds for every thread.
bool os_permits_amx() {
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  static const bool ok = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return ok;
#else
  return false;
#endif
}

// Four accumulator tiles (C0..C3 += A{0,1} x B{0,1}): each tdpbf16ps is 16 x 16 x 32 multiply-adds, and four in flight
// cover its latency.
__attribute__((target("amx-tile,amx-bf16"))) double amx_bf16_loop(int64_t iters) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t a[16 * 32], b[16 * 32];
  std::fill(a, a + 16 * 32, uint16_t{0x3F80});  // 1
  std::fill(b, b + 16 * 32, uint16_t{0x3380});  // 6e-8
  _tile_loadd(4, a, 64);
  _tile_loadd(5, a, 64);
  _tile_loadd(6, b, 64);
  _tile_loadd(7, b, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t it = 0; it < iters; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float c[4][16 * 16];
  _tile_stored(0, c[0], 64);
  _tile_stored(1, c[1], 64);
  _tile_stored(2, c[2], 64);
  _tile_stored(3, c[3], 64);
  _tile_release();
  double sum = 0;
  for (const auto& tile : c)
    for (float v : tile) sum += v;
  return sum;
}

}  // namespace

// Iteration counts give each run about 13 ms at 3 GHz with two FMA ports (one AMX tile unit).
PeakLoop fp32_fma_peak() {
  if (__builtin_cpu_supports("avx512f")) return time_loop(fma512_loop, 5'000'000, kAcc512 * 16 * 2, "AVX-512 FMA");
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return time_loop(fma256_loop, 6'000'000, kAcc256 * 8 * 2, "AVX2 FMA");
  return {};
}

PeakLoop bf16_dot_peak() {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16")) return {};
  return time_loop(bf16_dot_loop, 5'000'000, kAcc512 * 16 * 2 * 2, "AVX512-BF16 dot product");
}

PeakLoop amx_bf16_peak() {
  if (!cpu_has_amx_bf16() || !os_permits_amx()) return {};
  return time_loop(amx_bf16_loop, 625'000, 4.0 * 16 * 16 * 32 * 2, "AMX-BF16 tile dot product");
}

}  // namespace mpt::kernels::cpu
