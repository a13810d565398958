// src/optim/batches.h: splits a group's ready parameters into the batches one fused kernel call can take.
#pragma once

#include <cstddef>
#include <vector>

namespace mpt::optim::detail {

// Members (indices) grouped by an equality-comparable key, batches in order of first appearance and members in
// list order, so the calls and their order are deterministic.
template <class Key>
class Batches {
 public:
  void add(const Key& key, size_t member) {
    for (size_t b = 0; b < keys_.size(); ++b) {
      if (keys_[b] == key) {
        members_[b].push_back(member);
        return;
      }
    }
    keys_.push_back(key);
    members_.push_back({member});
  }
  size_t size() const { return keys_.size(); }
  const Key& key(size_t b) const { return keys_[b]; }
  const std::vector<size_t>& members(size_t b) const { return members_[b]; }

 private:
  std::vector<Key> keys_;
  std::vector<std::vector<size_t>> members_;
};

}  // namespace mpt::optim::detail
