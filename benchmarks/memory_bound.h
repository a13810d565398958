// benchmarks/memory_bound.h: the memory-bound section of bench_kernels (ops end to end, GB/s next to memcpy).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

// Times each memory-bound op on tensors of about n elements (far above L2) and prints GB/s next to the memcpy
// bandwidth of the same threads measured in the same run; returns the rows as JSON.
nlohmann::json bench_memory_bound(int64_t n, int reps);
