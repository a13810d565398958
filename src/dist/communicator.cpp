// src/dist/communicator.cpp: argument checks shared by the backends, the single-process communicator, world().
#include "dist/communicator_impl.h"

#include <cstdlib>
#include <cstring>
#include <span>

namespace mpt::dist {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

Communicator::Communicator() : timeout_(std::chrono::seconds(300)) {
  if (const char* s = std::getenv("MPT_DIST_TIMEOUT_S"); s != nullptr && *s != '\0') {
    char* end = nullptr;
    const double seconds = std::strtod(s, &end);
    MPT_CHECK(end != s && *end == '\0' && seconds > 0, "[dist] MPT_DIST_TIMEOUT_S='{}': expected a positive number of "
              "seconds", s);
    timeout_ = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  }
}

namespace detail {

void check_tensor(const Tensor& t, const char* op, const char* what, bool allow_fp8, bool cpu_only) {
  MPT_CHECK(t.defined(), "[dist.{}] {} is undefined", op, what);
  MPT_CHECK(!cpu_only || t.device().is_cpu(), "[dist.{}] {} is on {}: the MPI communicator takes CPU tensors", op, what,
            t.device());
  MPT_CHECK(t.is_contiguous(), "[dist.{}] {} {} is not contiguous", op, what, t.meta_str());
  const bool fp8 = t.dtype() == DType::F8E4M3 || t.dtype() == DType::F8E5M2;
  MPT_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F16 || t.dtype() == DType::BF16 || (allow_fp8 && fp8),
            "[dist.{}] {} is {}: expected f32, f16 or bf16{}", op, what, t.dtype(),
            allow_fp8 ? ", f8e4m3 or f8e5m2" : "");
}

void check_counts(const Tensor& small, const Tensor& large, std::span<const int64_t> counts, int rank, int size,
                  const char* op) {
  MPT_CHECK(static_cast<int>(counts.size()) == size, "[dist.{}] {} counts for {} ranks", op, counts.size(), size);
  MPT_CHECK(small.dtype() == large.dtype(), "[dist.{}] {} and {} differ in dtype", op, small.meta_str(),
            large.meta_str());
  int64_t total = 0;
  for (int64_t c : counts) {
    MPT_CHECK(c >= 0, "[dist.{}] negative count {}", op, c);
    total += c;
  }
  MPT_CHECK(small.numel() == counts[static_cast<size_t>(rank)] && large.numel() == total,
            "[dist.{}] rank {}'s part {} should hold {} elements and the whole {} the sum {}", op, rank,
            small.meta_str(), counts[static_cast<size_t>(rank)], large.meta_str(), total);
}

void check_sizes(const Tensor& small, const Tensor& large, int size, const char* op) {
  MPT_CHECK(small.dtype() == large.dtype(), "[dist.{}] input {} and output {} differ in dtype", op, small.meta_str(),
            large.meta_str());
  MPT_CHECK(large.numel() == small.numel() * size, "[dist.{}] expected {} = {} ranks x {} elements, got {}", op,
            large.meta_str(), size, small.numel(), large.numel());
}

}  // namespace detail

namespace {

// Size 1: every collective is (at most) a copy, complete when it returns (on the device's stream for device
// tensors). Tensors on any device: a one-process job on a GPU (train_gpt without mpirun) goes through here.
void check_any(const Tensor& t, const char* op, const char* what, bool allow_fp8 = false) {
  detail::check_tensor(t, op, what, allow_fp8, /*cpu_only=*/false);
}

// out = in, both with the same element count (the collective's own checks ran first).
void copy_whole(const Tensor& in, Tensor& out, const char* op) {
  MPT_CHECK(in.device() == out.device(), "[dist.{}] input {} and output {} are on different devices", op,
            in.meta_str(), out.meta_str());
  if (in.shares_storage(out) || in.numel() == 0) return;
  Tensor flat = out.view({-1});
  flat.copy_(in.view({-1}));
}

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }
  std::unique_ptr<Work> all_reduce(Tensor& t, ReduceOp) override {
    check_any(t, "all_reduce", "the tensor");
    return std::make_unique<detail::DoneWork>();
  }
  std::unique_ptr<Work> broadcast(Tensor& t, int root) override {
    check_any(t, "broadcast", "the tensor");
    MPT_CHECK(root == 0, "[dist.broadcast] root {} of a single-process job", root);
    return std::make_unique<detail::DoneWork>();
  }
  std::unique_ptr<Work> all_gather(const Tensor& in, Tensor& out) override {
    check_any(in, "all_gather", "the input");
    check_any(out, "all_gather", "the output");
    detail::check_sizes(in, out, 1, "all_gather");
    copy_whole(in, out, "all_gather");
    return std::make_unique<detail::DoneWork>();
  }
  std::unique_ptr<Work> reduce_scatter(const Tensor& in, Tensor& out, ReduceOp) override {
    check_any(in, "reduce_scatter", "the input");
    check_any(out, "reduce_scatter", "the output");
    detail::check_sizes(out, in, 1, "reduce_scatter");
    copy_whole(in, out, "reduce_scatter");
    return std::make_unique<detail::DoneWork>();
  }
  std::unique_ptr<Work> all_gather_v(const Tensor& in, Tensor& out, std::span<const int64_t> counts) override {
    check_any(in, "all_gather_v", "the input");
    check_any(out, "all_gather_v", "the output");
    detail::check_counts(in, out, counts, 0, 1, "all_gather_v");
    copy_whole(in, out, "all_gather_v");
    return std::make_unique<detail::DoneWork>();
  }
  std::unique_ptr<Work> reduce_scatter_v(const Tensor& in, Tensor& out, std::span<const int64_t> counts,
                                         ReduceOp) override {
    check_any(in, "reduce_scatter_v", "the input");
    check_any(out, "reduce_scatter_v", "the output");
    detail::check_counts(out, in, counts, 0, 1, "reduce_scatter_v");
    copy_whole(in, out, "reduce_scatter_v");
    return std::make_unique<detail::DoneWork>();
  }
  std::unique_ptr<Work> all_reduce_on_wire(Tensor& t, ReduceOp) override {
    check_any(t, "all_reduce_on_wire", "the tensor", true);
    return std::make_unique<detail::DoneWork>();
  }
  void barrier() override {}
};

bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (const char* s = std::getenv(v); s != nullptr && *s != '\0') return true;
  return false;
}

}  // namespace

std::shared_ptr<Communicator> single_process() { return std::make_shared<SingleProcess>(); }

std::shared_ptr<Communicator> world() {
  static const std::shared_ptr<Communicator> w =
      launched_by_mpirun() ? detail::mpi_world() : std::shared_ptr<Communicator>(single_process());
  return w;
}

}  // namespace mpt::dist
