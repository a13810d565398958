// src/dist/mpi_communicator.cpp: the MPI communicator: non-blocking collectives on CPU tensors, waits with a deadline.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <thread>
#include <vector>

#include "backend/mpi_check.h"
#include "dist/communicator_impl.h"
#include "kernels/math/numerics.h"

namespace mpt::dist::detail {
namespace {

std::atomic<bool> g_broken{false};  // a collective timed out: MPI_Finalize would wait for the dead peers

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !g_broken.load()) MPI_Finalize();
}

// A request and what completes it (copying an F32 staging buffer back, averaging).
class MpiWork final : public Work {
 public:
  MpiWork(MPI_Request request, std::function<void()> finish, std::string what, int rank,
          std::chrono::milliseconds timeout)
      : request_(request), finish_(std::move(finish)), what_(std::move(what)), rank_(rank), timeout_(timeout) {}
  ~MpiWork() override {
    if (!done_ && request_ != MPI_REQUEST_NULL && !g_broken.load()) {
      try {
        wait();  // MPI still writes into the buffers: never leave a request behind
      } catch (...) {
      }
    }
  }

  bool test() override {
    if (done_) return true;
    int flag = 0;
    MPT_MPI_CHECK(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
    if (flag != 0) {
      done_ = true;
      if (finish_) finish_();
    }
    return done_;
  }

  void wait() override {
    const auto start = std::chrono::steady_clock::now();
    for (int spins = 0; !test(); ++spins) {
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited > timeout_) {
        g_broken = true;
        MPT_THROW("[dist] {} on rank {} did not complete within {:.3g} s: another rank died, is stuck, or called a "
                  "different collective (set MPT_DIST_TIMEOUT_S to wait longer)", what_, rank_,
                  std::chrono::duration<double>(timeout_).count());
      }
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));  // progress, without burning
    }
  }

 private:
  MPI_Request request_;
  std::function<void()> finish_;
  std::string what_;
  int rank_;
  std::chrono::milliseconds timeout_;
  bool done_ = false;
};

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

// The low-precision formats all_reduce_on_wire sends as they are: decode to F32, combine, round back.
struct Bf16Wire {
  using Bits = uint16_t;
  static float decode(Bits b) { return bf16_bits_to_float(b); }
  static Bits encode(float x) { return float_to_bf16_bits(x); }
};
struct F16Wire {
  using Bits = uint16_t;
  static float decode(Bits b) { return f16_bits_to_float(b); }
  static Bits encode(float x) { return float_to_f16_bits(x); }
};
struct E4m3Wire {
  using Bits = uint8_t;
  static float decode(Bits b) { return e4m3_bits_to_float(b); }
  static Bits encode(float x) { return float_to_e4m3_bits(x, Fp8Saturation::Saturate); }
};
struct E5m2Wire {
  using Bits = uint8_t;
  static float decode(Bits b) { return e5m2_bits_to_float(b); }
  static Bits encode(float x) { return float_to_e5m2_bits(x, Fp8Saturation::Saturate); }
};

// An MPI user operation: inout[i] = round(in[i] + inout[i]) (or the max, NaN winning) in the wire format.
template <class W, bool IsMax>
void wire_combine(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const typename W::Bits*>(in);
  auto* b = static_cast<typename W::Bits*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = W::decode(a[i]), y = W::decode(b[i]);
    b[i] = W::encode(IsMax ? (std::isnan(x) || x > y ? x : y) : x + y);
  }
}

// The user operations (sum and max per wire format), created once MPI is initialised and freed never (MPI_Finalize
// releases them).
struct WireOps {
  MPI_Op sum[4], max[4];
  WireOps() {
    MPI_User_function* sums[4] = {wire_combine<Bf16Wire, false>, wire_combine<F16Wire, false>,
                                        wire_combine<E4m3Wire, false>, wire_combine<E5m2Wire, false>};
    MPI_User_function* maxes[4] = {wire_combine<Bf16Wire, true>, wire_combine<F16Wire, true>,
                                         wire_combine<E4m3Wire, true>, wire_combine<E5m2Wire, true>};
    for (int i = 0; i < 4; ++i) {
      MPT_MPI_CHECK(MPI_Op_create(sums[i], 1, &sum[i]));
      MPT_MPI_CHECK(MPI_Op_create(maxes[i], 1, &max[i]));
    }
  }
  static int index(DType t) {
    switch (t) {
      case DType::BF16: return 0;
      case DType::F16: return 1;
      case DType::F8E4M3: return 2;
      default: return 3;
    }
  }
};

// Byte counts and displacements of an uneven collective; alive until the request completes.
struct Layout {
  std::vector<int> counts, displs;
  Layout(std::span<const int64_t> elements, size_t element_bytes, const char* op) {
    int64_t at = 0;
    for (int64_t c : elements) {
      const int64_t bytes = c * static_cast<int64_t>(element_bytes);
      MPT_CHECK(at + bytes <= std::numeric_limits<int>::max(), "[dist.{}] {} bytes: MPI counts are int", op,
                at + bytes);
      counts.push_back(static_cast<int>(bytes));
      displs.push_back(static_cast<int>(at));
      at += bytes;
    }
  }
};

int count_of(int64_t n, const char* op) {
  MPT_CHECK(n <= std::numeric_limits<int>::max(), "[dist.{}] {} elements: MPI counts are int, split the tensor", op, n);
  return static_cast<int>(n);
}

class Mpi final : public Communicator {
 public:
  Mpi() {
    int initialized = 0;
    MPT_MPI_CHECK(MPI_Initialized(&initialized));
    if (initialized == 0) {
      int provided = 0;
      MPT_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
      MPT_CHECK(provided >= MPI_THREAD_SERIALIZED, "[dist] MPI provides thread level {}, mptrain needs "
                "MPI_THREAD_SERIALIZED or more", provided);
      std::atexit(finalize_at_exit);
    }
    MPT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    MPT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
    wire_ops_ = std::make_unique<WireOps>();
    const char* debug = std::getenv("MPT_DIST_DEBUG");
    debug_ = debug != nullptr && *debug != '\0' && std::strcmp(debug, "0") != 0;
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  std::unique_ptr<Work> all_reduce(Tensor& t, ReduceOp op) override {
    check_tensor(t, "all_reduce", "the tensor");
    const std::string what = describe("all_reduce", t, to_string(op));
    // F32 in place; F16/BF16 through an F32 copy, rounded once at the end.
    Tensor buf = t.dtype() == DType::F32 ? t : t.to(DType::F32);
    MPI_Request req = MPI_REQUEST_NULL;
    MPT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf.data_ptr(), count_of(t.numel(), "all_reduce"), MPI_FLOAT,
                                 mpi_op(op), MPI_COMM_WORLD, &req));
    const float inv = 1.0f / static_cast<float>(size_);
    return make_work(req, what, [t, buf, op, inv]() mutable {
      if (op == ReduceOp::Avg) {
        auto* p = buf.data<float>();
        for (int64_t i = 0; i < buf.numel(); ++i) p[i] *= inv;
      }
      if (!buf.shares_storage(t)) t.copy_(buf);
    });
  }

  std::unique_ptr<Work> broadcast(Tensor& t, int root) override {
    check_tensor(t, "broadcast", "the tensor");
    MPT_CHECK(root >= 0 && root < size_, "[dist.broadcast] root {} of {} ranks", root, size_);
    const std::string what = describe("broadcast", t, fmt::format("from rank {}", root));
    MPI_Request req = MPI_REQUEST_NULL;
    MPT_MPI_CHECK(MPI_Ibcast(t.data_ptr(), count_of(static_cast<int64_t>(t.nbytes()), "broadcast"), MPI_BYTE, root,
                             MPI_COMM_WORLD, &req));
    return make_work(req, what, {});
  }

  std::unique_ptr<Work> all_gather(const Tensor& in, Tensor& out) override {
    check_tensor(in, "all_gather", "the input");
    check_tensor(out, "all_gather", "the output");
    check_sizes(in, out, size_, "all_gather");
    const std::string what = describe("all_gather", in, "");
    MPI_Request req = MPI_REQUEST_NULL;
    const int bytes = count_of(static_cast<int64_t>(in.nbytes()), "all_gather");
    MPT_MPI_CHECK(MPI_Iallgather(in.data_ptr(), bytes, MPI_BYTE, out.data_ptr(), bytes, MPI_BYTE, MPI_COMM_WORLD,
                                 &req));
    return make_work(req, what, {});
  }

  std::unique_ptr<Work> reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    check_tensor(in, "reduce_scatter", "the input");
    check_tensor(out, "reduce_scatter", "the output");
    check_sizes(out, in, size_, "reduce_scatter");
    const std::string what = describe("reduce_scatter", in, to_string(op));
    const Tensor src = in.dtype() == DType::F32 ? in : in.to(DType::F32);
    Tensor dst = out.dtype() == DType::F32 ? out : Tensor::empty(out.shape(), DType::F32);
    MPI_Request req = MPI_REQUEST_NULL;
    MPT_MPI_CHECK(MPI_Ireduce_scatter_block(src.data_ptr(), dst.data_ptr(), count_of(out.numel(), "reduce_scatter"),
                                            MPI_FLOAT, mpi_op(op), MPI_COMM_WORLD, &req));
    const float inv = 1.0f / static_cast<float>(size_);
    return make_work(req, what, [out, src, dst, op, inv]() mutable {
      if (op == ReduceOp::Avg) {
        auto* p = dst.data<float>();
        for (int64_t i = 0; i < dst.numel(); ++i) p[i] *= inv;
      }
      if (!dst.shares_storage(out)) out.copy_(dst);
    });
  }

  std::unique_ptr<Work> all_gather_v(const Tensor& in, Tensor& out, std::span<const int64_t> counts) override {
    check_tensor(in, "all_gather_v", "the input");
    check_tensor(out, "all_gather_v", "the output");
    check_counts(in, out, counts, rank_, size_, "all_gather_v");
    const std::string what = describe("all_gather_v", out, "");
    auto layout = std::make_shared<Layout>(counts, in.element_size(), "all_gather_v");
    MPI_Request req = MPI_REQUEST_NULL;
    MPT_MPI_CHECK(MPI_Iallgatherv(in.data_ptr(), layout->counts[static_cast<size_t>(rank_)], MPI_BYTE, out.data_ptr(),
                                  layout->counts.data(), layout->displs.data(), MPI_BYTE, MPI_COMM_WORLD, &req));
    return make_work(req, what, [layout] {});
  }

  std::unique_ptr<Work> reduce_scatter_v(const Tensor& in, Tensor& out, std::span<const int64_t> counts,
                                         ReduceOp op) override {
    check_tensor(in, "reduce_scatter_v", "the input");
    check_tensor(out, "reduce_scatter_v", "the output");
    check_counts(out, in, counts, rank_, size_, "reduce_scatter_v");
    const std::string what = describe("reduce_scatter_v", in, to_string(op));
    const Tensor src = in.dtype() == DType::F32 ? in : in.to(DType::F32);
    Tensor dst = out.dtype() == DType::F32 ? out : Tensor::empty(out.shape(), DType::F32);
    auto recv = std::make_shared<std::vector<int>>();
    for (int64_t c : counts) recv->push_back(count_of(c, "reduce_scatter_v"));
    count_of(in.numel(), "reduce_scatter_v");
    MPI_Request req = MPI_REQUEST_NULL;
    MPT_MPI_CHECK(MPI_Ireduce_scatter(src.data_ptr(), dst.data_ptr(), recv->data(), MPI_FLOAT, mpi_op(op),
                                      MPI_COMM_WORLD, &req));
    const float inv = 1.0f / static_cast<float>(size_);
    return make_work(req, what, [out, src, dst, op, inv, recv]() mutable {
      if (op == ReduceOp::Avg) {
        auto* p = dst.data<float>();
        for (int64_t i = 0; i < dst.numel(); ++i) p[i] *= inv;
      }
      if (!dst.shares_storage(out)) out.copy_(dst);
    });
  }

  std::unique_ptr<Work> all_reduce_on_wire(Tensor& t, ReduceOp op) override {
    check_tensor(t, "all_reduce_on_wire", "the tensor", true);
    if (t.dtype() == DType::F32) return all_reduce(t, op);
    const std::string what = describe("all_reduce_on_wire", t, to_string(op));
    const int f = WireOps::index(t.dtype());
    const bool one_byte = t.element_size() == 1;
    MPI_Request req = MPI_REQUEST_NULL;
    MPT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), count_of(t.numel(), "all_reduce_on_wire"),
                                 one_byte ? MPI_UINT8_T : MPI_UINT16_T,
                                 op == ReduceOp::Max ? wire_ops_->max[f] : wire_ops_->sum[f], MPI_COMM_WORLD, &req));
    if (op != ReduceOp::Avg) return make_work(req, what, {});
    const double inv = 1.0 / size_;
    return make_work(req, what, [t, inv]() mutable { t.copy_(ops_scale_in_f32(t, inv)); });
  }

  void barrier() override {
    MPI_Request req = MPI_REQUEST_NULL;
    const int64_t seq = next_sequence();
    if (debug_) verify_same_call("barrier", seq);
    const std::string what = fmt::format("barrier #{}", seq);
    MPT_MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &req));
    MpiWork(req, {}, what, rank_, timeout()).wait();
  }

 private:
  // "op #seq (tensor, extra)" for errors; with MPT_DIST_DEBUG set, first checks that every rank calls the same
  // collective on the same whole tensor (`t`: the same size on every rank) and names the first disagreement.
  std::string describe(const char* op, const Tensor& t, const std::string& extra) {
    const std::string call = fmt::format("{} ({}{}{})", op, t.meta_str(), extra.empty() ? "" : ", ", extra);
    const int64_t seq = next_sequence();
    if (debug_) verify_same_call(call, seq);
    return fmt::format("{} #{} ({}{}{})", op, seq, t.meta_str(), extra.empty() ? "" : ", ", extra);
  }
  void verify_same_call(const std::string& call, int64_t seq) {
    constexpr int kWidth = 192;
    std::vector<char> mine(kWidth, '\0'), all(static_cast<size_t>(kWidth) * static_cast<size_t>(size_), '\0');
    std::memcpy(mine.data(), call.data(), std::min<size_t>(call.size(), kWidth - 1));
    MPI_Request req = MPI_REQUEST_NULL;
    MPT_MPI_CHECK(MPI_Iallgather(mine.data(), kWidth, MPI_CHAR, all.data(), kWidth, MPI_CHAR, MPI_COMM_WORLD, &req));
    MpiWork(req, {}, fmt::format("the MPT_DIST_DEBUG check of collective #{} ({})", seq, call), rank_, timeout())
        .wait();
    for (int r = 0; r < size_; ++r) {
      const std::string other(all.data() + static_cast<size_t>(r) * kWidth);
      if (other != mine.data())
        MPT_THROW("[dist] collective #{} differs between ranks (MPT_DIST_DEBUG): rank {} calls {}, rank {} calls {}",
                  seq, rank_, call, r, other);
    }
  }
  std::unique_ptr<Work> make_work(MPI_Request req, const std::string& what, std::function<void()> finish) {
    return std::make_unique<MpiWork>(req, std::move(finish), what, rank_, timeout());
  }

  // t * s computed in F32, rounded once back to t's dtype.
  static Tensor ops_scale_in_f32(const Tensor& t, double s) {
    Tensor f = t.to(DType::F32);
    auto* p = f.data<float>();
    for (int64_t i = 0; i < f.numel(); ++i) p[i] = static_cast<float>(p[i] * s);
    return f.to(t.dtype());
  }

  int rank_ = 0, size_ = 1;
  bool debug_ = false;
  std::unique_ptr<WireOps> wire_ops_;  // made once MPI is initialised
};

}  // namespace

std::shared_ptr<Communicator> mpi_world() { return std::make_shared<Mpi>(); }

}  // namespace mpt::dist::detail
