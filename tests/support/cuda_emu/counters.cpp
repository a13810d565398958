// tests/support/cuda_emu/counters.cpp: storage of the process-wide operation counters (cuda_emu/counters.h).
#include "cuda_emu/counters.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <map>
#include <mutex>
#include <string_view>
#include <utility>

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

// The per-site tally, keyed by the (static) strings' addresses; names are made when read.
std::atomic<bool> g_sites_on{false};
std::mutex g_sites_mutex;
std::map<std::pair<const char*, const char*>, KernelSite> g_sites;

// "cudaError_t mpt::kernels::cuda::{anonymous}::launch_rows(const T*, ...) [with T = float]" -> "launch_rows".
std::string short_function(std::string_view f) {
  f = f.substr(0, f.find('('));
  if (!f.empty() && f.back() == '>') {  // a template's arguments
    int depth = 0;
    for (size_t i = f.size(); i-- > 0;) {
      depth += f[i] == '>' ? 1 : f[i] == '<' ? -1 : 0;
      if (depth == 0) {
        f = f.substr(0, i);
        break;
      }
    }
  }
  const size_t colon = f.rfind("::"), space = f.rfind(' ');
  size_t start = 0;
  if (colon != std::string_view::npos) start = colon + 2;
  if (space != std::string_view::npos && space + 1 > start) start = space + 1;
  return std::string(f.substr(start));
}

std::string site_name(const char* function, const char* file) {
  if (function == nullptr) return "(unnamed)";
  std::string_view path = file != nullptr ? std::string_view(file) : std::string_view();
  if (const size_t slash = path.rfind('/'); slash != std::string_view::npos) path = path.substr(slash + 1);
  std::string name(path);
  if (!name.empty()) name += ' ';
  return name + short_function(function);
}

// min = v when v is known (nonzero) and smaller, or min is unset (0).
void keep_smaller(uint64_t& min, uint64_t v) {
  if (v != 0 && (min == 0 || v < min)) min = v;
}

}  // namespace

void set_kernel_sites(bool on) { g_sites_on.store(on, std::memory_order_relaxed); }

std::vector<KernelSite> kernel_sites() {
  std::map<std::string, KernelSite> merged;
  {
    std::lock_guard lock(g_sites_mutex);
    for (const auto& [key, site] : g_sites) {
      KernelSite& m = merged[site_name(key.first, key.second)];
      m.launches += site.launches, m.bytes_read += site.bytes_read, m.bytes_written += site.bytes_written;
      m.few_block_launches += site.few_block_launches, m.few_block_bytes += site.few_block_bytes;
      m.few_block_max_bytes = std::max(m.few_block_max_bytes, site.few_block_max_bytes);
      keep_smaller(m.min_blocks, site.min_blocks);
      keep_smaller(m.min_threads, site.min_threads);
    }
  }
  std::vector<KernelSite> out;
  for (auto& [name, site] : merged) {
    site.name = name;
    out.push_back(std::move(site));
  }
  std::stable_sort(out.begin(), out.end(), [](const KernelSite& a, const KernelSite& b) {
    return a.bytes_read + a.bytes_written > b.bytes_read + b.bytes_written;
  });
  return out;
}

Counters counters() {
  Counters c;
  for (const Field& f : kFields) c.*f.member = slot(f.member).load(std::memory_order_relaxed);
  c.syncs = c.stream_syncs + c.device_syncs + c.event_syncs + c.sync_copies;
  return c;
}

void reset_counters() {
  for (const Field& f : kFields) slot(f.member).store(0, std::memory_order_relaxed);
  std::lock_guard lock(g_sites_mutex);
  g_sites.clear();
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

void count_site(const char* function, const char* file, uint64_t read, uint64_t written, uint64_t blocks,
                uint64_t threads) {
  if (!g_sites_on.load(std::memory_order_relaxed)) return;
  std::lock_guard lock(g_sites_mutex);
  KernelSite& s = g_sites[{function, file}];
  ++s.launches, s.bytes_read += read, s.bytes_written += written;
  if (blocks == 0) return;
  if (blocks < kSmsOfAnH100) {
    ++s.few_block_launches, s.few_block_bytes += read + written;
    s.few_block_max_bytes = std::max(s.few_block_max_bytes, read + written);
  }
  keep_smaller(s.min_blocks, blocks);
  keep_smaller(s.min_threads, blocks * threads);
}
}  // namespace detail

}  // namespace mpt::cuda_emu
