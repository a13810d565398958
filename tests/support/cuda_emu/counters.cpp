// tests/support/cuda_emu/counters.cpp: storage of the process-wide operation counters (cuda_emu/counters.h).
#include "cuda_emu/counters.h"

#include <atomic>
#include <iterator>

namespace mpt::cuda_emu {
namespace {

Counters g_counters;  // every access goes through std::atomic_ref; `syncs` stays 0 here (counters() derives it)

struct Field {
  const char* name;
  uint64_t Counters::*member;
};
#define MPT_EMU_FIELD(f) Field{#f, &Counters::f}
constexpr Field kFields[] = {
    MPT_EMU_FIELD(kernel_launches), MPT_EMU_FIELD(kernel_launches_refused), MPT_EMU_FIELD(kernel_bytes_read),
    MPT_EMU_FIELD(kernel_bytes_written), MPT_EMU_FIELD(kernel_launches_unsized), MPT_EMU_FIELD(matmuls),
    MPT_EMU_FIELD(matmul_flops), MPT_EMU_FIELD(matmul_bytes),
    MPT_EMU_FIELD(collectives), MPT_EMU_FIELD(graph_launches), MPT_EMU_FIELD(h2d), MPT_EMU_FIELD(h2d_bytes),
    MPT_EMU_FIELD(d2h), MPT_EMU_FIELD(d2h_bytes), MPT_EMU_FIELD(d2d), MPT_EMU_FIELD(d2d_bytes),
    MPT_EMU_FIELD(pageable_copies), MPT_EMU_FIELD(sync_copies), MPT_EMU_FIELD(memsets), MPT_EMU_FIELD(stream_syncs),
    MPT_EMU_FIELD(device_syncs), MPT_EMU_FIELD(event_syncs), MPT_EMU_FIELD(syncs), MPT_EMU_FIELD(event_records),
    MPT_EMU_FIELD(stream_waits), MPT_EMU_FIELD(mallocs), MPT_EMU_FIELD(frees), MPT_EMU_FIELD(host_mallocs),
    MPT_EMU_FIELD(host_frees), MPT_EMU_FIELD(pool_allocs), MPT_EMU_FIELD(pool_frees), MPT_EMU_FIELD(pool_grows)};
#undef MPT_EMU_FIELD
static_assert(sizeof(Counters) == std::size(kFields) * sizeof(uint64_t), "a field of Counters is missing from kFields");

std::atomic_ref<uint64_t> slot(uint64_t Counters::*member) { return std::atomic_ref<uint64_t>(g_counters.*member); }

}  // namespace

Counters counters() {
  Counters c;
  for (const Field& f : kFields) c.*f.member = slot(f.member).load(std::memory_order_relaxed);
  c.syncs = c.stream_syncs + c.device_syncs + c.event_syncs + c.sync_copies;
  return c;
}

void reset_counters() {
  for (const Field& f : kFields) slot(f.member).store(0, std::memory_order_relaxed);
}

std::string to_string(const Counters& c) {
  std::string out;
  for (const Field& f : kFields) {
    if (c.*f.member == 0) continue;
    if (!out.empty()) out += ' ';
    out += f.name;
    out += '=';
    out += std::to_string(c.*f.member);
  }
  return out;
}

namespace detail {
void count(uint64_t Counters::*field, uint64_t n) { slot(field).fetch_add(n, std::memory_order_relaxed); }
}  // namespace detail

}  // namespace mpt::cuda_emu
