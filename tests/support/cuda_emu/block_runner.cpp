// tests/support/cuda_emu/block_runner.cpp: the fiber scheduler of one block: __syncthreads, warp intrinsics, divergence and deadlock detection.
#include "block_runner.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <sstream>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace mpt::cuda_emu::detail {
namespace ctx = boost::context;
namespace {

thread_local BlockRunner* t_runner = nullptr;

// AddressSanitizer must be told before and after every stack switch, or it misreads the fiber stacks
// (false reports, especially when an exception unwinds a fiber). No-ops in other builds.
void asan_start_switch(void** fake_stack, const void* bottom, size_t size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#endif
}
void asan_finish_switch(void* fake_stack, const void** bottom, size_t* size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack, bottom, size);
#endif
}

// Thrown inside a suspended fiber to unwind it when its block is abandoned after an error.
struct AbandonFiber {};

// Lends the worker's StackPool to boost::context and records the stack bounds for ASan.
struct PooledStack {
  StackPool* pool;
  const void** bottom;
  size_t* size;
  ctx::stack_context allocate() {
    ctx::stack_context sc = pool->take();
    *bottom = static_cast<char*>(sc.sp) - sc.size;
    *size = sc.size;
#if defined(__SANITIZE_ADDRESS__)
    // A reused stack still carries the shadow poison of the frames the previous fiber left without returning
    // (the entry frame); clear it, or ASan reports false errors in the new fiber's argument area.
    __asan_unpoison_memory_region(*bottom, sc.size);
#endif
    return sc;
  }
  void deallocate(ctx::stack_context& sc) noexcept { pool->give(sc); }
};

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::kSyncWarp: return "__syncwarp";
    case WarpOp::kShflIdx: return "__shfl_sync";
    case WarpOp::kShflUp: return "__shfl_up_sync";
    case WarpOp::kShflDown: return "__shfl_down_sync";
    case WarpOp::kShflXor: return "__shfl_xor_sync";
    case WarpOp::kBallot: return "__ballot_sync";
    case WarpOp::kAny: return "__any_sync";
    case WarpOp::kAll: return "__all_sync";
  }
  return "?";
}

bool is_shuffle(WarpOp op) {
  return op == WarpOp::kShflIdx || op == WarpOp::kShflUp || op == WarpOp::kShflDown || op == WarpOp::kShflXor;
}

std::string hex(unsigned v) {
  std::ostringstream out;
  out << "0x" << std::hex << v;
  return out.str();
}

std::string call_name(WarpOp op, unsigned mask) { return std::string(op_name(op)) + "(mask=" + hex(mask) + ")"; }

std::string site_name(const std::source_location& s) {
  return std::string(s.file_name()) + ":" + std::to_string(s.line());
}

bool same_site(const std::source_location& a, const std::source_location& b) {
  return a.line() == b.line() && a.column() == b.column() && std::strcmp(a.file_name(), b.file_name()) == 0;
}

// The lane a shuffle reads, as PTX's shfl.sync defines it: lanes form segments of `width`; up/down/xor
// read their own value when the source falls past their segment (xor may read an earlier segment).
int source_lane(WarpOp op, int lane, int arg, int width) {
  const int first = lane & ~(width - 1), last = first + width - 1;
  switch (op) {
    case WarpOp::kShflIdx: return first | (arg & (width - 1));
    case WarpOp::kShflUp: return lane - arg < first ? lane : lane - arg;
    case WarpOp::kShflDown: return lane + arg > last ? lane : lane + arg;
    case WarpOp::kShflXor: return (lane ^ (arg & 31)) > last ? lane : (lane ^ (arg & 31));
    default: return lane;
  }
}

}  // namespace

StackPool::~StackPool() {
  for (auto& sc : free_) {
#if defined(__SANITIZE_ADDRESS__)
    // Unmapping leaves the shadow of the frames a fiber never returned from (its entry frame) poisoned, and a later
    // mapping at that address inherits it: a worker thread's stack, whose static TLS (the emulated __shared__ arrays,
    // static thread_local) ASan does not clear in full, then reported false stack overflows in kernels.
    __asan_unpoison_memory_region(static_cast<char*>(sc.sp) - sc.size, sc.size);
#endif
    alloc_.deallocate(sc);
  }
}

ctx::stack_context StackPool::take() {
  if (free_.empty()) return alloc_.allocate();
  const ctx::stack_context sc = free_.back();
  free_.pop_back();
  return sc;
}

BlockRunner::BlockRunner(dim3 grid, dim3 block, size_t shared_bytes, KernelBody body, StackPool& stacks)
    : grid_(grid),
      block_(block),
      nthreads_(static_cast<int>(block.x * block.y * block.z)),
      shared_bytes_(shared_bytes),
      body_(body),
      stacks_(stacks),
      threads_(static_cast<size_t>(nthreads_)) {
  if (shared_bytes_ > 0) shared_.reset(new SharedChunk[(shared_bytes_ + sizeof(SharedChunk) - 1) / sizeof(SharedChunk)]);
  for (int t = 0; t < nthreads_; ++t) {
    const unsigned u = static_cast<unsigned>(t);
    threads_[t].idx = {u % block.x, (u / block.x) % block.y, u / (block.x * block.y)};
  }
}

BlockRunner* BlockRunner::current() { return t_runner; }

void BlockRunner::run(uint3 block_idx) {
  Builtins& builtins = t_builtins;
  builtins.block_idx = block_idx;
  builtins.block_dim = block_;
  builtins.grid_dim = grid_;
  // Uninitialised shared memory reads as NaN (0xFF bytes) rather than as a plausible zero.
  if (shared_) std::memset(shared_.get(), 0xFF, shared_bytes_);
  waiting_sync_ = 0;
  done_ = 0;
  error_ = nullptr;
  error_thread_ = -1;
  t_runner = this;
  struct ClearCurrent {
    ~ClearCurrent() { t_runner = nullptr; }
  } clear_current;

  for (int t = 0; t < nthreads_; ++t) {
    threads_[t].state = State::kReady;
    threads_[t].fiber = ctx::fiber(std::allocator_arg,
                                   PooledStack{&stacks_, &threads_[t].stack_bottom, &threads_[t].stack_size},
                                   [this, t](ctx::fiber&& scheduler) { return entry(t, std::move(scheduler)); });
  }
  while (done_ < nthreads_) {
    bool progressed = false;
    for (int t = 0; t < nthreads_ && !error_; ++t) {
      Thread& th = threads_[t];
      if (th.state != State::kReady) continue;
      current_ = t;
      builtins.thread_idx = th.idx;
      switch_to(th);
      progressed = true;
    }
    current_ = -1;
    if (error_) {
      abandon_fibers();
      std::string what;
      try {
        std::rethrow_exception(error_);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
        what = "an exception not derived from std::exception";
      }
      fail("thread " + thread_name(error_thread_) + ": " + what);
    }
    if (!progressed) {
      const std::string states = describe_threads();
      abandon_fibers();
      fail("deadlock, no thread can proceed: " + states);
    }
  }
}

ctx::fiber BlockRunner::entry(int t, ctx::fiber&& scheduler) {
  asan_finish_switch(nullptr, &scheduler_stack_bottom_, &scheduler_stack_size_);
  Thread& self = threads_[t];
  self.scheduler = std::move(scheduler);
  try {
    if (!abandoning_) {  // a fiber first entered by abandon_fibers() never runs the kernel
      body_.fn(body_.ctx);
      on_exit(t);
    }
  } catch (const AbandonFiber&) {
    // abandon_fibers() unwound this fiber's stack; the block already failed.
  } catch (...) {
    if (!error_) {
      error_ = std::current_exception();
      error_thread_ = t;
    }
  }
  if (self.state != State::kDone) {
    self.state = State::kDone;
    ++done_;
  }
  asan_start_switch(nullptr, scheduler_stack_bottom_, scheduler_stack_size_);  // this stack is finished
  return std::move(self.scheduler);
}

void BlockRunner::switch_to(Thread& th) {
  asan_start_switch(&scheduler_fake_stack_, th.stack_bottom, th.stack_size);
  th.fiber = std::move(th.fiber).resume();
  asan_finish_switch(scheduler_fake_stack_, nullptr, nullptr);
}

void BlockRunner::suspend(Thread& self) {
  asan_start_switch(&self.asan_fake_stack, scheduler_stack_bottom_, scheduler_stack_size_);
  self.scheduler = std::move(self.scheduler).resume();
  asan_finish_switch(self.asan_fake_stack, &scheduler_stack_bottom_, &scheduler_stack_size_);
  if (abandoning_) throw AbandonFiber{};
}

void BlockRunner::sync_threads(const std::source_location& site) {
  Thread& self = threads_[current_];
  if (done_ > 0) {
    throw KernelError("__syncthreads at " + site_name(site) + " reached after " + std::to_string(done_) +
                      " thread(s) of the block exited: divergent __syncthreads, the barrier can never complete (" +
                      describe_threads() + ")");
  }
  self.state = State::kSync;
  self.site = site;
  if (++waiting_sync_ < nthreads_) {
    suspend(self);
    return;
  }
  for (const Thread& th : threads_) {
    if (!same_site(th.site, site)) {
      throw KernelError("divergent __syncthreads: the threads of the block wait at different barriers (" +
                        describe_threads() + ")");
    }
  }
  waiting_sync_ = 0;
  for (Thread& th : threads_) th.state = State::kReady;
}

uint64_t BlockRunner::warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
  Thread& self = threads_[current_];
  const int warp = current_ / 32, lane = current_ % 32, base = warp * 32;
  const int lanes = std::min(32, nthreads_ - base);
  const unsigned existing = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
  if ((mask & ~existing) != 0) {
    throw KernelError(call_name(op, mask) + " names lanes that do not exist: warp " + std::to_string(warp) + " of this " +
                      std::to_string(nthreads_) + "-thread block has " + std::to_string(lanes) + " lanes (mask " +
                      hex(existing) + ")");
  }
  if (((mask >> lane) & 1u) == 0) {
    throw KernelError(call_name(op, mask) + " called by lane " + std::to_string(lane) + ", which is not in its mask");
  }
  if (is_shuffle(op) && (width < 1 || width > 32 || (width & (width - 1)) != 0)) {
    throw KernelError(call_name(op, mask) + ": width " + std::to_string(width) + " is not a power of two in [1, 32]");
  }
  for (unsigned m = mask & ~(1u << lane); m != 0; m &= m - 1) {
    const int l = std::countr_zero(m);
    const Thread& other = threads_[base + l];
    if (other.state == State::kDone) {
      throw KernelError(call_name(op, mask) + " in warp " + std::to_string(warp) + ": lane " + std::to_string(l) +
                        " named in the mask has exited and can never join");
    }
    if (other.state == State::kWarp && other.mask == mask && (other.op != op || other.width != width)) {
      throw KernelError(call_name(op, mask) + " in warp " + std::to_string(warp) + ": lane " + std::to_string(l) +
                        " waits at " + op_name(other.op) + " (width " + std::to_string(other.width) +
                        ") with the same mask; every lane of a mask must make the same call");
    }
  }
  self.state = State::kWarp;
  self.op = op;
  self.mask = mask;
  self.width = width;
  self.arg = arg;
  self.value = value;
  bool complete = true;
  for (unsigned m = mask; m != 0 && complete; m &= m - 1) {
    const Thread& other = threads_[base + std::countr_zero(m)];
    complete = other.state == State::kWarp && other.mask == mask;
  }
  if (complete) {
    complete_warp_op(warp, mask);
  } else {
    suspend(self);
  }
  return self.result;
}

void BlockRunner::complete_warp_op(int warp, unsigned mask) {
  const int base = warp * 32;
  const WarpOp op = threads_[base + std::countr_zero(mask)].op;
  unsigned ballot = 0;
  for (unsigned m = mask; m != 0; m &= m - 1) {
    const int l = std::countr_zero(m);
    if (threads_[base + l].value != 0) ballot |= 1u << l;
  }
  for (unsigned m = mask; m != 0; m &= m - 1) {
    const int l = std::countr_zero(m);
    Thread& th = threads_[base + l];
    switch (op) {
      case WarpOp::kSyncWarp: th.result = 0; break;
      case WarpOp::kBallot: th.result = ballot; break;
      case WarpOp::kAny: th.result = ballot != 0; break;
      case WarpOp::kAll: th.result = ballot == mask; break;
      default: {
        const int src = source_lane(op, l, th.arg, th.width);
        if (((mask >> src) & 1u) == 0) {
          throw KernelError(call_name(op, mask) + " in warp " + std::to_string(warp) + ": lane " + std::to_string(l) +
                            " reads lane " + std::to_string(src) +
                            ", which is not in the mask (the value is undefined on a GPU)");
        }
        th.result = threads_[base + src].value;
      }
    }
  }
  for (unsigned m = mask; m != 0; m &= m - 1) threads_[base + std::countr_zero(m)].state = State::kReady;
}

void BlockRunner::on_exit(int t) {
  threads_[t].state = State::kDone;
  ++done_;
  if (waiting_sync_ > 0) {
    throw KernelError("thread exited while other threads wait at __syncthreads: divergent __syncthreads, the barrier "
                      "can never complete (" + describe_threads() + ")");
  }
  const int warp = t / 32, lane = t % 32, base = warp * 32;
  const int lanes = std::min(32, nthreads_ - base);
  for (int l = 0; l < lanes; ++l) {
    const Thread& other = threads_[base + l];
    if (other.state == State::kWarp && ((other.mask >> lane) & 1u) != 0) {
      throw KernelError("thread exited while lane " + std::to_string(l) + " of warp " + std::to_string(warp) +
                        " waits at " + call_name(other.op, other.mask) + ", which names it: the call can never complete");
    }
  }
}

void BlockRunner::abandon_fibers() {
  // Resume every suspended fiber once so that suspend() throws AbandonFiber and its stack unwinds
  // through our own (ASan-annotated) switches rather than boost's forced_unwind.
  abandoning_ = true;
  for (int t = 0; t < nthreads_; ++t) {
    Thread& th = threads_[t];
    current_ = t;
    if (th.fiber) switch_to(th);
    th.state = State::kDone;
  }
  current_ = -1;
  abandoning_ = false;
  waiting_sync_ = 0;
}

void BlockRunner::fail(const std::string& message) const {
  const uint3 b = t_builtins.block_idx;
  throw KernelError("[cuda_emu] kernel failed in block (" + std::to_string(b.x) + "," + std::to_string(b.y) + "," +
                    std::to_string(b.z) + ") of a " + std::to_string(nthreads_) + "-thread block: " + message);
}

std::string BlockRunner::thread_name(int t) const {
  const uint3 i = threads_[t].idx;
  return "(" + std::to_string(i.x) + "," + std::to_string(i.y) + "," + std::to_string(i.z) + ")";
}

// Consecutive threads in the same state form one entry: "threads 0-31: at __syncthreads (f.cu:12)".
std::string BlockRunner::describe_threads() const {
  const auto state_of = [this](int t) -> std::string {
    const Thread& th = threads_[t];
    switch (th.state) {
      case State::kReady: return "running";
      case State::kDone: return "exited";
      case State::kSync: return "at __syncthreads (" + site_name(th.site) + ")";
      case State::kWarp: return "at " + call_name(th.op, th.mask) + " in warp " + std::to_string(t / 32);
    }
    return "?";
  };
  std::ostringstream out;
  int begin = 0;
  std::string state = state_of(0);
  for (int t = 1; t <= nthreads_; ++t) {
    const std::string next = t < nthreads_ ? state_of(t) : std::string();
    if (t < nthreads_ && next == state) continue;
    out << (begin > 0 ? "; " : "") << "threads " << begin;
    if (t - 1 > begin) out << "-" << t - 1;
    out << " " << state;
    begin = t;
    state = next;
  }
  return out.str();
}

}  // namespace mpt::cuda_emu::detail
