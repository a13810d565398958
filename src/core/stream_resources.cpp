// src/core/stream_resources.cpp: the registry of per-stream cache releases.
#include "core/stream_resources.h"

#include <algorithm>
#include <mutex>
#include <vector>

namespace mpt::detail {
namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::vector<StreamRelease>& registry() {
  static auto* r = new std::vector<StreamRelease>();  // never destroyed: streams may retire during static destruction
  return *r;
}

}  // namespace

void on_stream_release(StreamRelease release) {
  const std::lock_guard lock(registry_mutex());
  std::vector<StreamRelease>& r = registry();
  if (std::find(r.begin(), r.end(), release) == r.end()) r.push_back(release);
}

void release_stream_resources(int device, void* stream) {
  std::vector<StreamRelease> releases;
  {
    const std::lock_guard lock(registry_mutex());
    releases = registry();
  }
  for (StreamRelease release : releases) release(device, stream);
}

}  // namespace mpt::detail
