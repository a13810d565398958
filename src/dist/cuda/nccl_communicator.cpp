// src/backend/cuda/nccl_communicator.cpp: the NCCL communicator: collectives on CUDA tensors on a communication stream
// ordered against the compute stream with events; completion and asynchronous errors polled with a deadline.
#include <nccl.h>

#include <cstring>
#include <functional>
#include <thread>

#include "backend/cuda/check.h"
#include "backend/cuda/device_guard.h"
#include "dist/communicator_impl.h"
#include "mpt/core/device.h"
#include "mpt/core/stream.h"

namespace mpt::dist {
namespace {

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::F8E4M3: return ncclFloat8e4m3;
    case DType::F8E5M2: return ncclFloat8e5m2;
    default: MPT_THROW("[dist.nccl] no NCCL type for {}", t);
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

// The NCCL communicator and the streams its collectives run on; shared with the works in flight.
struct NcclState {
  ncclComm_t comm = nullptr;
  Device device;
  Stream stream;
  bool aborted = false;
  explicit NcclState(Device d) : device(d), stream(d) {}
  ~NcclState() {
    if (comm == nullptr) return;
    cuda_backend::DeviceGuard guard(device.index());
    if (aborted) return;  // ncclCommAbort already released it
    (void)ncclCommDestroy(comm);
  }
  // Throws if NCCL reported an asynchronous error (after aborting the communicator).
  void check_async(const std::string& what, int rank) {
    ncclResult_t async = ncclSuccess;
    MPT_NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
    if (async == ncclSuccess || async == ncclInProgress) return;
    abort();
    MPT_THROW("[dist.nccl] {} on rank {} failed: {} ({})", what, rank, cuda_backend::nccl_status_text(async),
              ncclGetLastError(comm));
  }
  void abort() {
    if (aborted) return;
    aborted = true;
    (void)ncclCommAbort(comm);
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclState> st, std::string what, int rank, std::chrono::milliseconds timeout,
           std::vector<Tensor> keep, std::function<void()> finish)
      : st_(std::move(st)), done_(st_->device), what_(std::move(what)), rank_(rank), timeout_(timeout),
        keep_(std::move(keep)), finish_(std::move(finish)) {
    done_.record(st_->stream);
  }
  ~NcclWork() override {
    // Done, or already ordered before the compute stream's later work (wait_on_device) with nothing left to run on
    // completion: the kept buffers' frees are stream-ordered after the collective too, so the host need not wait
    // (a clipping norm's all-reduce dropped right after wait_on_device costs no host wait).
    if (complete_ || (ordered_ && !finish_ && !st_->aborted)) return;
    try {
      if (st_->aborted)
        order_after();  // the aborted collective's stream work ends; frees of the buffers kept here come after
      else
        wait();  // NCCL still reads and writes the buffers kept here
    } catch (...) {
    }
  }
  bool test() override {
    if (complete_) return true;
    cuda_backend::DeviceGuard guard(st_->device.index());
    st_->check_async(what_, rank_);
    if (!done_.ready()) return false;
    complete();
    return true;
  }
  void wait_on_device() override {
    if (complete_) return;
    cuda_backend::DeviceGuard guard(st_->device.index());
    st_->check_async(what_, rank_);
    order_after();
    ordered_ = true;
  }
  void wait() override {
    const auto start = std::chrono::steady_clock::now();
    for (int spins = 0; !test(); ++spins) {
      if (std::chrono::steady_clock::now() - start > timeout_) {
        st_->abort();
        order_after();
        MPT_THROW("[dist.nccl] {} on rank {} did not complete within {:.3g} s: another rank died, is stuck, or "
                  "called a different collective; the communicator was aborted (set MPT_DIST_TIMEOUT_S to wait "
                  "longer)", what_, rank_, std::chrono::duration<double>(timeout_).count());
      }
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  void order_after() {
    cuda_backend::DeviceGuard guard(st_->device.index());
    done_.wait(Stream::current(st_->device));  // later work on the compute stream (frees included) comes after
  }
  void complete() {
    complete_ = true;
    order_after();  // the result is visible to later work on the compute stream
    if (finish_) finish_();
    keep_.clear();
  }

  std::shared_ptr<NcclState> st_;
  Event done_;
  std::string what_;
  int rank_;
  std::chrono::milliseconds timeout_;
  std::vector<Tensor> keep_;  // the buffers NCCL uses, alive until it is done
  std::function<void()> finish_;
  bool complete_ = false;
  bool ordered_ = false;  // wait_on_device ran: the compute stream waits for done_
};

class Nccl final : public Communicator {
 public:
  Nccl(Device device, const NcclId& id, int rank, int size) : st_(std::make_shared<NcclState>(device)) {
    MPT_CHECK(device.is_cuda(), "[dist.nccl] {} is not a CUDA device", device);
    MPT_CHECK(size >= 1 && rank >= 0 && rank < size, "[dist.nccl] rank {} of {}", rank, size);
    rank_ = rank;
    size_ = size;
    ncclUniqueId uid;
    static_assert(sizeof(uid.internal) == sizeof(id.bytes));
    std::memcpy(uid.internal, id.bytes.data(), sizeof(uid.internal));
    cuda_backend::DeviceGuard guard(device.index());
    MPT_NCCL_CHECK(ncclCommInitRank(&st_->comm, size, uid, rank));
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  std::unique_ptr<Work> all_reduce(Tensor& t, ReduceOp op) override {
    check(t, "all_reduce", "the tensor");
    const std::string what = describe("all_reduce", t, to_string(op));
    // F32 in place; F16/BF16 through an F32 copy, rounded once at the end (NCCL would round at every step).
    Tensor buf = t.dtype() == DType::F32 ? t : t.to(DType::F32);
    std::function<void()> finish;
    if (!buf.shares_storage(t)) finish = [t, buf]() mutable { t.copy_(buf); };
    return launch(what, {buf}, std::move(finish), [&](cudaStream_t s) {
      return ncclAllReduce(buf.data_ptr(), buf.data_ptr(), static_cast<size_t>(buf.numel()), ncclFloat32,
                           nccl_op(op), st_->comm, s);
    });
  }

  std::unique_ptr<Work> all_reduce_on_wire(Tensor& t, ReduceOp op) override {
    check(t, "all_reduce_on_wire", "the tensor", true);
    const std::string what = describe("all_reduce_on_wire", t, to_string(op));
    return launch(what, {t}, {}, [&](cudaStream_t s) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_dtype(t.dtype()),
                           nccl_op(op), st_->comm, s);
    });
  }

  std::unique_ptr<Work> broadcast(Tensor& t, int root) override {
    check(t, "broadcast", "the tensor");
    MPT_CHECK(root >= 0 && root < size_, "[dist.broadcast] root {} of {} ranks", root, size_);
    const std::string what = describe("broadcast", t, fmt::format("from rank {}", root));
    return launch(what, {t}, {}, [&](cudaStream_t s) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_dtype(t.dtype()), root,
                           st_->comm, s);
    });
  }

  std::unique_ptr<Work> all_gather(const Tensor& in, Tensor& out) override {
    check(in, "all_gather", "the input");
    check(out, "all_gather", "the output");
    detail::check_sizes(in, out, size_, "all_gather");
    const std::string what = describe("all_gather", in, "");
    return launch(what, {in, out}, {}, [&](cudaStream_t s) {
      return ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()), nccl_dtype(in.dtype()),
                           st_->comm, s);
    });
  }

  std::unique_ptr<Work> reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    check(in, "reduce_scatter", "the input");
    check(out, "reduce_scatter", "the output");
    detail::check_sizes(out, in, size_, "reduce_scatter");
    const std::string what = describe("reduce_scatter", in, to_string(op));
    const Tensor src = in.dtype() == DType::F32 ? in : in.to(DType::F32);
    Tensor dst = out.dtype() == DType::F32 ? out : Tensor::empty(out.shape(), DType::F32, out.device());
    std::function<void()> finish;
    if (!dst.shares_storage(out)) finish = [out, dst]() mutable { out.copy_(dst); };
    return launch(what, {src, dst}, std::move(finish), [&](cudaStream_t s) {
      return ncclReduceScatter(src.data_ptr(), dst.data_ptr(), static_cast<size_t>(dst.numel()), ncclFloat32,
                               nccl_op(op), st_->comm, s);
    });
  }

  // NCCL has no uneven collectives: one broadcast (all_gather_v) or reduce (reduce_scatter_v) per rank's part, in
  // one group (a single fused launch).
  std::unique_ptr<Work> all_gather_v(const Tensor& in, Tensor& out, std::span<const int64_t> counts) override {
    check(in, "all_gather_v", "the input");
    check(out, "all_gather_v", "the output");
    detail::check_counts(in, out, counts, rank_, size_, "all_gather_v");
    const std::string what = describe("all_gather_v", out, "");
    const std::vector<int64_t> c(counts.begin(), counts.end());
    return launch(what, {in, out}, {}, [&](cudaStream_t s) {
      ncclResult_t r = ncclGroupStart();
      const size_t bytes = in.element_size();
      auto* base = static_cast<char*>(out.data_ptr());
      int64_t at = 0;
      for (int root = 0; root < size_ && r == ncclSuccess; ++root) {
        const auto n = static_cast<size_t>(c[static_cast<size_t>(root)]);
        if (n > 0)
          r = ncclBroadcast(root == rank_ ? in.data_ptr() : base + at * static_cast<int64_t>(bytes),
                            base + at * static_cast<int64_t>(bytes), n, nccl_dtype(in.dtype()), root, st_->comm, s);
        at += static_cast<int64_t>(n);
      }
      const ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : end;
    });
  }

  std::unique_ptr<Work> reduce_scatter_v(const Tensor& in, Tensor& out, std::span<const int64_t> counts,
                                         ReduceOp op) override {
    check(in, "reduce_scatter_v", "the input");
    check(out, "reduce_scatter_v", "the output");
    detail::check_counts(out, in, counts, rank_, size_, "reduce_scatter_v");
    const std::string what = describe("reduce_scatter_v", in, to_string(op));
    const Tensor src = in.dtype() == DType::F32 ? in : in.to(DType::F32);
    Tensor dst = out.dtype() == DType::F32 ? out : Tensor::empty(out.shape(), DType::F32, out.device());
    std::function<void()> finish;
    if (!dst.shares_storage(out)) finish = [out, dst]() mutable { out.copy_(dst); };
    const std::vector<int64_t> c(counts.begin(), counts.end());
    return launch(what, {src, dst}, std::move(finish), [&](cudaStream_t s) {
      ncclResult_t r = ncclGroupStart();
      const auto* base = static_cast<const float*>(src.data_ptr());
      int64_t at = 0;
      for (int root = 0; root < size_ && r == ncclSuccess; ++root) {
        const auto n = static_cast<size_t>(c[static_cast<size_t>(root)]);
        // The reduced part lands in dst on its root; elsewhere NCCL reads only the send buffer.
        if (n > 0)
          r = ncclReduce(base + at, root == rank_ ? dst.data_ptr() : nullptr, n, ncclFloat32, nccl_op(op), root,
                         st_->comm, s);
        at += static_cast<int64_t>(n);
      }
      const ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : end;
    });
  }

  void barrier() override {  // an all-reduce of one float
    Tensor one = Tensor::zeros({1}, DType::F32, st_->device);
    all_reduce(one, ReduceOp::Sum)->wait();
  }

 private:
  void check(const Tensor& t, const char* op, const char* what, bool allow_fp8 = false) const {
    MPT_CHECK(t.defined() && t.device() == st_->device, "[dist.{}] {} is on {}: this NCCL communicator takes tensors "
              "on {}", op, what, t.defined() ? fmt::format("{}", t.device()) : "nothing", st_->device);
    MPT_CHECK(t.is_contiguous(), "[dist.{}] {} {} is not contiguous", op, what, t.meta_str());
    const bool fp8 = t.dtype() == DType::F8E4M3 || t.dtype() == DType::F8E5M2;
    MPT_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F16 || t.dtype() == DType::BF16 || (allow_fp8 && fp8),
              "[dist.{}] {} is {}: expected f32, f16 or bf16{}", op, what, t.dtype(),
              allow_fp8 ? ", f8e4m3 or f8e5m2" : "");
  }
  std::string describe(const char* op, const Tensor& t, const std::string& extra) {
    return fmt::format("{} #{} ({}{}{})", op, next_sequence(), t.meta_str(), extra.empty() ? "" : ", ", extra);
  }
  // Orders the communication stream after the compute stream, issues the collective there, returns its work.
  template <class Issue>
  std::unique_ptr<Work> launch(const std::string& what, std::vector<Tensor> keep, std::function<void()> finish,
                               Issue&& issue) {
    MPT_CHECK(!st_->aborted, "[dist.nccl] {}: the communicator was aborted after an earlier failure", what);
    cuda_backend::DeviceGuard guard(st_->device.index());
    Event ready(st_->device);
    ready.record(Stream::current(st_->device));
    ready.wait(st_->stream);
    const ncclResult_t r = issue(static_cast<cudaStream_t>(st_->stream.native()));
    if (r != ncclSuccess) {
      MPT_THROW("[dist.nccl] {} on rank {}: {} ({})", what, rank_, cuda_backend::nccl_status_text(r),
                ncclGetLastError(st_->comm));
    }
    return std::make_unique<NcclWork>(st_, what, rank_, timeout(), std::move(keep), std::move(finish));
  }

  std::shared_ptr<NcclState> st_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

NcclId nccl_unique_id() {
  MPT_CHECK(cuda_status().usable, "[dist.nccl] no usable GPU: {}", cuda_status().reason);
  ncclUniqueId uid;
  MPT_NCCL_CHECK(ncclGetUniqueId(&uid));
  NcclId id;
  std::memcpy(id.bytes.data(), uid.internal, sizeof(uid.internal));
  return id;
}

std::shared_ptr<Communicator> nccl_communicator(Device device, const NcclId& id, int rank, int size) {
  return std::make_shared<Nccl>(device, id, rank, size);
}

std::shared_ptr<Communicator> nccl_world() {
  const auto w = world();
  NcclId id;
  if (w->rank() == 0) id = nccl_unique_id();
  if (w->size() > 1) {  // the id's bytes travel as floats' bits (the MPI communicator's broadcast is bytewise)
    Tensor bytes = Tensor::zeros({static_cast<int64_t>(id.bytes.size() / 4)});
    std::memcpy(bytes.data_ptr(), id.bytes.data(), id.bytes.size());
    w->broadcast(bytes, 0)->wait();
    std::memcpy(id.bytes.data(), bytes.data_ptr(), id.bytes.size());
  }
  const CudaStatus& cuda = cuda_status();
  MPT_CHECK(cuda.usable && cuda.device_count > 0, "[dist.nccl] no usable GPU: {}", cuda.reason);
  return nccl_communicator(Device::cuda(w->rank() % cuda.device_count), id, w->rank(), w->size());
}

}  // namespace mpt::dist
