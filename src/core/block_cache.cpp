// src/core/block_cache.cpp: best-fit blocks carved from segments, split on allocation and merged on free.
#include "core/block_cache.h"

#include <utility>
#include <vector>

#include "mpt/core/error.h"

namespace mpt::detail {

BlockCache::BlockCache(Acquire acquire, Release release)
    : acquire_(std::move(acquire)), release_(std::move(release)) {}

BlockCache::~BlockCache() {
  for (auto& [base, head] : segment_heads_) {
    size_t bytes = 0;
    for (Block* b = head; b != nullptr;) {
      bytes += b->size;
      Block* next = b->next;
      delete b;
      b = next;
    }
    head = nullptr;
    try {
      release_(base, bytes);
    } catch (...) {  // a destructor must not throw: the memory is lost to this process, nothing else
    }
  }
  for (Block* b : spare_blocks_) delete b;
}

BlockCache::Block* BlockCache::new_block(const Block& value) {
  if (spare_blocks_.empty()) return new Block(value);
  Block* b = spare_blocks_.back();
  spare_blocks_.pop_back();
  *b = value;
  return b;
}

void BlockCache::insert_free(FreeSet& set, Block* b) {
  if (spare_free_nodes_.empty()) {
    set.insert(b);
    return;
  }
  FreeSet::node_type node = std::move(spare_free_nodes_.back());
  spare_free_nodes_.pop_back();
  node.value() = b;
  set.insert(std::move(node));
}

void BlockCache::erase_free(FreeSet& set, Block* b) { spare_free_nodes_.push_back(set.extract(b)); }

size_t BlockCache::segment_size(size_t nbytes) {
  const size_t size = round(nbytes);
  if (size <= kSmallRequest) return kSmallSegment;
  if (size < kMediumRequest) return kMediumSegment;
  return (size + kLargeRound - 1) / kLargeRound * kLargeRound;
}

BlockCache::Block* BlockCache::take(FreeSet& set, size_t size) {
  Block key{nullptr, size, false};
  const auto it = set.lower_bound(&key);  // the smallest free block that holds `size`, the lowest address first
  if (it == set.end()) return nullptr;
  Block* b = *it;
  spare_free_nodes_.push_back(set.extract(it));
  idle_ -= b->size;
  return b;
}

BlockCache::Block* BlockCache::new_segment(size_t size, bool small) {
  void* base = acquire_(size);
  if (base == nullptr) return nullptr;
  ++acquires_;
  ++segments_;
  reserved_ += size;
  Block* b = new_block(Block{static_cast<char*>(base), size, small});
  segment_heads_.emplace(base, b);
  return b;
}

void* BlockCache::allocate(size_t nbytes) {
  const size_t size = round(nbytes);
  const bool small = size <= kSmallRequest;
  FreeSet& set = small ? small_free_ : large_free_;
  Block* b = take(set, size);
  if (b == nullptr) {
    const size_t segment = segment_size(size);
    b = new_segment(segment, small);
    if (b == nullptr && release_idle() > 0) b = new_segment(segment, small);
    if (b == nullptr && size < segment) b = new_segment(size, small);  // room for the request, not for a segment
    if (b == nullptr) return nullptr;
  }
  // Split off the rest when it is worth a block of its own: any 512 bytes in a small segment, more than 1 MiB in a
  // large one (a smaller rest would only ever serve small requests, which large segments do not take).
  const size_t rest = b->size - size;
  if (small ? rest >= kRound : rest > kSmallRequest) {
    Block* r = new_block(Block{b->ptr + size, rest, small, true, b, b->next});
    if (b->next != nullptr) b->next->prev = r;
    b->next = r;
    b->size = size;
    insert_free(set, r);
    idle_ += rest;
  }
  b->free = false;
  if (spare_live_nodes_.empty()) {
    live_.emplace(b->ptr, b);
  } else {
    LiveMap::node_type node = std::move(spare_live_nodes_.back());
    spare_live_nodes_.pop_back();
    node.key() = b->ptr;
    node.mapped() = b;
    live_.insert(std::move(node));
  }
  return b->ptr;
}

size_t BlockCache::block_size(const void* ptr) const {
  const auto it = live_.find(const_cast<void*>(ptr));
  MPT_CHECK(it != live_.end(), "[memory] block_size: {} is not a live block of this cache", ptr);
  return it->second->size;
}

void BlockCache::free(void* ptr) {
  const auto it = live_.find(ptr);
  MPT_CHECK(it != live_.end(), "[memory] free: {} is not a live block of this cache (freed twice, or not from it)",
            ptr);
  Block* b = it->second;
  spare_live_nodes_.push_back(live_.extract(it));
  mark_free(b);
}

void BlockCache::mark_free(Block* b) {
  FreeSet& set = b->small ? small_free_ : large_free_;
  b->free = true;
  if (b->prev != nullptr && b->prev->free) {  // merge into the free block before
    Block* p = b->prev;
    erase_free(set, p);
    idle_ -= p->size;
    p->size += b->size;
    p->next = b->next;
    if (b->next != nullptr) b->next->prev = p;
    drop_block(b);
    b = p;
  }
  if (b->next != nullptr && b->next->free) {  // and the free block after into it
    Block* n = b->next;
    erase_free(set, n);
    idle_ -= n->size;
    b->size += n->size;
    b->next = n->next;
    if (n->next != nullptr) n->next->prev = b;
    drop_block(n);
  }
  insert_free(set, b);
  idle_ += b->size;
}

size_t BlockCache::release_idle() {
  std::vector<void*> idle_segments;
  for (const auto& [base, head] : segment_heads_) {
    if (head->free && head->next == nullptr) idle_segments.push_back(base);
  }
  size_t bytes = 0;
  for (void* base : idle_segments) {
    Block* head = segment_heads_.at(base);
    erase_free(head->small ? small_free_ : large_free_, head);
    idle_ -= head->size;
    reserved_ -= head->size;
    --segments_;
    bytes += head->size;
    const size_t size = head->size;
    segment_heads_.erase(base);
    drop_block(head);
    release_(base, size);
  }
  return bytes;
}

}  // namespace mpt::detail
