// src/core/block_cache.h: a best-fit cache of memory blocks carved from large segments, split and coalesced.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <unordered_map>
#include <vector>

namespace mpt::detail {

// PyTorch's CUDA caching allocator's design, without its streams: requests are rounded to 512 bytes and served by
// the smallest free block that holds them, split when the rest is worth keeping; a freed block merges with its free
// neighbours, so memory freed as one size serves requests of others (a step's activations freed in backward become
// its gradients). Requests up to 1 MiB share 2 MiB segments, those below 10 MiB 20 MiB ones, larger ones get a
// segment of their own rounded to 2 MiB; small and large requests never share a segment, so small blocks do not
// fragment large ones. Segments come from `acquire` (nullptr: the system has no memory) and go back through
// `release` only when wholly free (release_idle, or the destructor). Not thread-safe: the owner locks.
class BlockCache {
 public:
  using Acquire = std::function<void*(size_t bytes)>;
  using Release = std::function<void(void* base, size_t bytes)>;

  static constexpr size_t kRound = 512;
  static constexpr size_t kSmallRequest = size_t{1} << 20;   // up to this: the small segments
  static constexpr size_t kSmallSegment = size_t{2} << 20;
  static constexpr size_t kMediumRequest = size_t{10} << 20;  // below this: a shared large segment
  static constexpr size_t kMediumSegment = size_t{20} << 20;
  static constexpr size_t kLargeRound = size_t{2} << 20;

  BlockCache(Acquire acquire, Release release);
  ~BlockCache();  // gives every segment back; blocks still handed out must not be used after
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  static size_t round(size_t nbytes) { return (std::max<size_t>(nbytes, 1) + kRound - 1) / kRound * kRound; }
  // The size of the segment a request of `nbytes` makes when no free block holds it.
  static size_t segment_size(size_t nbytes);

  // A block of at least round(nbytes) bytes, or nullptr when a new segment was needed and `acquire` refused it even
  // after the idle segments went back (and then a segment of just the rounded request, if that is smaller).
  void* allocate(size_t nbytes);
  bool owns(const void* ptr) const { return live_.count(const_cast<void*>(ptr)) != 0; }
  // The block's size as handed out (round(nbytes) or a little more when the rest was too small to split off).
  size_t block_size(const void* ptr) const;
  // Back to the cache; a pointer this cache did not hand out is refused with an mpt::Error.
  void free(void* ptr);
  // Every wholly free segment back through `release`; returns the bytes given back.
  size_t release_idle();

  size_t reserved() const { return reserved_; }  // bytes of all segments
  size_t live_blocks() const { return live_.size(); }  // blocks handed out and not freed yet
  size_t idle() const { return idle_; }          // bytes of free blocks
  size_t segments() const { return segments_; }
  uint64_t segment_acquires() const { return acquires_; }

 private:
  struct Block {
    char* ptr;
    size_t size;
    bool small;  // from a small segment
    bool free = false;
    Block* prev = nullptr;  // neighbours in the same segment, by address
    Block* next = nullptr;
  };
  struct BySize {
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };
  using FreeSet = std::set<Block*, BySize>;
  using LiveMap = std::unordered_map<void*, Block*>;

  Block* take(FreeSet& set, size_t size);
  Block* new_segment(size_t size, bool small);
  void mark_free(Block* b);
  // A step allocates and frees hundreds of blocks: their records, tree nodes and map nodes are recycled here rather
  // than allocated on the heap each time (extract / insert of node handles).
  Block* new_block(const Block& value);
  void drop_block(Block* b) { spare_blocks_.push_back(b); }
  void insert_free(FreeSet& set, Block* b);
  void erase_free(FreeSet& set, Block* b);

  Acquire acquire_;
  Release release_;
  FreeSet small_free_, large_free_;
  LiveMap live_;
  std::unordered_map<void*, Block*> segment_heads_;  // base -> its first block (merges keep the lower block)
  std::vector<Block*> spare_blocks_;
  std::vector<FreeSet::node_type> spare_free_nodes_;
  std::vector<LiveMap::node_type> spare_live_nodes_;
  size_t reserved_ = 0, idle_ = 0, segments_ = 0;
  uint64_t acquires_ = 0;
};

}  // namespace mpt::detail
