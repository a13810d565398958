// benchmarks/bench_util.h: timing helpers shared by the benchmark programs (median of repeated runs, memcpy baseline).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

namespace mpt::bench {

// Median wall time of `reps` runs of fn after one warm-up run (page faults, pools, caches).
inline double median_seconds(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
  return t[static_cast<size_t>(reps / 2)];
}

// GB/s (bytes read + written) of memcpy over `bytes` split in 1 MiB chunks over the OpenMP threads: the
// bandwidth baseline memory-bound kernels are compared with in the same run.
inline double memcpy_gbps(size_t bytes, int reps) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const auto chunks = static_cast<int64_t>(bytes >> 20);
  const double s = median_seconds(reps, [&] {
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) std::memcpy(dst.data() + (c << 20), src.data() + (c << 20), size_t{1} << 20);
  });
  return 2.0 * static_cast<double>(chunks << 20) / s / 1e9;
}

}  // namespace mpt::bench
