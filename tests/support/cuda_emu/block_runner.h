// tests/support/cuda_emu/block_runner.h: runs the threads of one CUDA block as cooperative fibers on one OS thread.
#pragma once

#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>

#include <exception>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "cuda_emu/device.h"
#include "cuda_emu/launch.h"

namespace mpt::cuda_emu::detail {

// Fiber stacks of one OS worker, reused from block to block. Each has a guard page, so an overflow
// faults instead of corrupting a neighbour.
class StackPool {
 public:
  explicit StackPool(size_t stack_bytes) : alloc_(stack_bytes) { free_.reserve(kMaxThreadsPerBlock); }
  ~StackPool();
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;
  boost::context::stack_context take();
  void give(boost::context::stack_context sc) noexcept { free_.push_back(sc); }

 private:
  boost::context::protected_fixedsize_stack alloc_;
  std::vector<boost::context::stack_context> free_;
  size_t allocated_ = 0;
};

// Runs blocks of one launch, one at a time. Barriers and warp intrinsics suspend the calling fiber
// until every thread they wait for has arrived; the last one to arrive completes the operation. A
// wait that can never complete (divergence, an exited thread, mismatched warp calls) raises KernelError.
class BlockRunner {
 public:
  BlockRunner(dim3 grid, dim3 block, size_t shared_bytes, KernelBody body, StackPool& stacks);
  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;

  // Runs every thread of the block to completion; throws KernelError naming the block and thread.
  void run(uint3 block_idx);

  // The runner of the block executing on this OS thread, or nullptr outside emulated kernels.
  static BlockRunner* current();

  void sync_threads(const std::source_location& site);
  uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width);
  void* dynamic_shared() { return shared_bytes_ ? shared_.get() : nullptr; }

 private:
  enum class State : uint8_t { kReady, kSync, kWarp, kDone };
  struct Thread {
    boost::context::fiber fiber;      // the suspended thread (empty while it runs or once done)
    boost::context::fiber scheduler;  // held by the running thread, to switch back
    State state = State::kDone;
    uint3 idx{0, 0, 0};
    std::source_location site;  // of the __syncthreads it waits at
    WarpOp op = WarpOp::kSyncWarp;
    unsigned mask = 0;
    int width = 32, arg = 0;
    uint64_t value = 0, result = 0;
    const void* stack_bottom = nullptr;  // the fiber's stack, for AddressSanitizer's switch annotations
    size_t stack_size = 0;
    void* asan_fake_stack = nullptr;
  };
  struct alignas(128) SharedChunk {
    unsigned char bytes[128];
  };

  boost::context::fiber entry(int t, boost::context::fiber&& scheduler);
  void suspend(Thread& self);
  void switch_to(Thread& th);  // scheduler -> fiber, annotated for ASan
  void on_exit(int t);
  void complete_warp_op(int warp, unsigned mask);
  void abandon_fibers();
  [[noreturn]] void fail(const std::string& message) const;
  std::string describe_threads() const;
  std::string thread_name(int t) const;

  dim3 grid_, block_;
  int nthreads_;
  size_t shared_bytes_;
  KernelBody body_;
  StackPool& stacks_;
  std::unique_ptr<SharedChunk[]> shared_;
  std::vector<Thread> threads_;
  int current_ = -1;
  int waiting_sync_ = 0;
  int done_ = 0;
  bool abandoning_ = false;  // set while abandon_fibers() unwinds suspended fibers
  const void* scheduler_stack_bottom_ = nullptr;
  size_t scheduler_stack_size_ = 0;
  void* scheduler_fake_stack_ = nullptr;
  std::exception_ptr error_;
  int error_thread_ = -1;
};

}  // namespace mpt::cuda_emu::detail
