// src/train/data_parallel.cpp: DataParallel: parameter broadcast, gradient buckets reduced from backward's hooks,
// compression, ZeRO-1 ownership.
#include "mpt/train/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "mpt/amp/master_weights.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/autograd/node.h"
#include "mpt/core/error.h"
#include "mpt/core/profile.h"
#include "mpt/ops/cast.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/fp8_wire.h"
#include "mpt/ops/optim.h"
#include "mpt/optim/clip.h"

namespace mpt::train {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The MAX all-reduce of a list of 0-d f32 tensors, in place. One that is already a contiguous f32 on `device` (the
// communicator's) is reduced where it is, the device's later work ordered after the collective without a host wait
// (the usual case: GradScaler's found_inf, one per device). Others go through the host, all in one collective.
void max_reduce_scalars(dist::Communicator& comm, Device device, std::vector<Tensor>& values) {
  if (values.empty()) return;
  if (values.size() == 1 && values[0].device() == device && values[0].dtype() == DType::F32 &&
      values[0].is_contiguous()) {
    comm.all_reduce(values[0], dist::ReduceOp::Max)->wait_on_device();
    return;
  }
  std::vector<float> packed;
  for (const Tensor& v : values) packed.push_back(v.to(DType::F32).item<float>());
  Tensor t = Tensor::from_vector(packed, {static_cast<int64_t>(packed.size())}).to(device);
  comm.all_reduce(t, dist::ReduceOp::Max)->wait();
  const std::vector<float> out = t.to(Device::cpu()).to_vector<float>();
  for (size_t i = 0; i < values.size(); ++i)
    values[i].copy_(Tensor::full({}, out[i], DType::F32).to(values[i].dtype()).to(values[i].device()));
}

}  // namespace

const char* to_string(GradCompression c) {
  switch (c) {
    case GradCompression::None: return "none";
    case GradCompression::BF16: return "bf16";
    case GradCompression::FP8: return "fp8";
  }
  return "?";
}

double DataParallel::StepTiming::hidden_fraction() const {
  int64_t all = 0, hidden = 0;
  for (size_t b = 0; b < bytes.size(); ++b) {
    all += bytes[b];
    if (done_before_finish[b]) hidden += bytes[b];
  }
  return all == 0 ? 0.0 : static_cast<double>(hidden) / static_cast<double>(all);
}

namespace {
// Whether a and b are the same elements of one storage (a gradient that is already its bucket's view).
bool same_view(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.storage() == b.storage() && a.offset() == b.offset() &&
         a.shape() == b.shape() && a.strides() == b.strides() && a.dtype() == b.dtype();
}
}  // namespace

struct DataParallel::Bucket {
  std::vector<size_t> params;    // indices into params_, in flat order: grouped by owner rank
  std::vector<int64_t> offsets;  // of each parameter in flat, then numel (the bounds ops::fp8_wire_amaxes and kin take)
  std::vector<int64_t> counts;   // elements per owner rank (the reduce-scatter split)
  int64_t numel = 0;             // elements of flat
  DType dtype = DType::F32;      // flat's: its parameters' gradient dtype when they share one (BF16: llm.c's), else F32
  // The concatenated gradients (in `dtype`), then the reduced ones. Made when backward makes the first of its
  // gradients (destination(): they are made in it) or at launch(), and let go at finish(), where the gradients are
  // its views: they hold it until they are released (zero_grad), so the buckets take no memory between steps (at the
  // forward's end, where a step peaks) and the step holds no gradient twice.
  Tensor flat;
  std::weak_ptr<Storage> last;   // the previous step's flat, reused while gradients still view it (zero_grad(false))
  Tensor wire;                   // what travels (flat itself, its BF16 or FP8 codes, or this rank's F32 shard)
  Tensor meta;                   // F32 [used flags | amaxes], MAX-reduced (on the parameters' device)
  Tensor used;                   // F32: this rank's used flags on the device, uploaded when used_host changes
  std::vector<float> used_host;
  ops::Fp8WireScales fp8;        // FP8: per parameter, made on the device from the shared amaxes
  size_t ready = 0;
  std::vector<bool> is_ready;
  std::unique_ptr<dist::Work> work, meta_work;
  bool launched = false;
  Tensor part(size_t k, const Tensor& of) const;  // parameter k's slice of flat (`of`: the parameter)
  // flat made when undefined: the previous step's while gradients still view it, else a new one (contents undefined).
  void ensure_flat(Device device) {
    if (flat.defined()) return;
    const std::shared_ptr<Storage> kept = last.lock();
    flat = kept != nullptr ? Tensor(kept, {numel}, {1}, 0, dtype) : Tensor::empty({numel}, dtype, device);
  }
};

DataParallel::DataParallel(nn::Module& module, std::shared_ptr<dist::Communicator> comm,
                           const DataParallelOptions& options)
    : comm_(std::move(comm)), options_(options), alive_(std::make_shared<bool>(true)) {
  MPT_CHECK(comm_ != nullptr, "[DataParallel] no communicator");
  MPT_CHECK(options.bucket_bytes > 0, "[DataParallel] bucket_bytes {} must be positive", options.bucket_bytes);
  MPT_CHECK(!(options.zero1 && options.compression != GradCompression::None),
            "[DataParallel] zero1 with {} compression is not supported: the reduce-scatter travels in F32",
            to_string(options.compression));
  autograd::NoGradGuard no_grad;
  // Rank 0's parameters and buffers everywhere (blocking, in registration order).
  for (auto& [name, t] : module.state_dict()) {
    if (!device_set_) device_ = t.device(), device_set_ = true;
    MPT_CHECK(t.device() == device_ && t.is_contiguous(), "[DataParallel] {} {}: every tensor must be contiguous and "
              "on {} (the module's first tensor's device)", name, t.meta_str(), device_);
    if (t.dtype() == DType::F32 || t.dtype() == DType::F16 || t.dtype() == DType::BF16) {
      Tensor view = t;
      comm_->broadcast(view, 0)->wait();
    }
  }
  amp::invalidate_compute_copies();  // a copy cached before (a forward outside DataParallel) held this rank's values
  std::vector<nn::NamedParameter> named = module.named_parameters();
  std::reverse(named.begin(), named.end());  // backward finishes the last layers first
  for (const nn::NamedParameter& p : named) {
    if (!p.tensor.requires_grad()) continue;
    MPT_CHECK(p.tensor.dtype() == DType::F32, "[DataParallel] parameter {} is {}: F32 masters only", p.name,
              p.tensor.dtype());
    params_.push_back(p.tensor);
    names_.push_back(p.name);
  }
  module_order_.assign(params_.rbegin(), params_.rend());  // optim::clip_grad_norm_(model.parameters())'s sum order
  // Owners: each parameter to the rank with the fewest elements so far (deterministic, the same on every rank).
  const int n = comm_->size();
  std::vector<int64_t> load(static_cast<size_t>(n), 0);
  for (const Tensor& p : params_) {
    const auto r = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    owner_.push_back(options.zero1 ? static_cast<int>(r) : comm_->rank());
    load[r] += p.numel();
  }
  // Buckets of consecutive parameters up to bucket_bytes; inside one, the flat order groups them by owner.
  std::vector<std::vector<size_t>> groups;
  int64_t bytes = options.bucket_bytes;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t b = params_[i].numel() * static_cast<int64_t>(dtype_size(autograd::grad_dtype(params_[i])));
    if (groups.empty() || bytes + b > options.bucket_bytes) groups.emplace_back(), bytes = 0;
    groups.back().push_back(i);
    bytes += b;
  }
  bucket_of_.resize(params_.size());
  for (const auto& g : groups) {
    auto b = std::make_unique<Bucket>();
    b->counts.assign(static_cast<size_t>(n), 0);
    std::vector<size_t> order = g;
    if (options.zero1)
      std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return owner_[x] < owner_[y]; });
    int64_t at = 0;
    for (size_t i : order) {
      b->params.push_back(i);
      b->offsets.push_back(at);
      at += params_[i].numel();
      if (options.zero1) b->counts[static_cast<size_t>(owner_[i])] += params_[i].numel();
      bucket_of_[i] = buckets_.size();
    }
    b->numel = at;
    b->offsets.push_back(at);
    // One gradient dtype for the whole bucket (autograd::grad_dtype, amp::Policy::grads): the bucket holds and
    // reduces the gradients in it, and they stay its views (no copy, no FP32 bucket beside BF16 gradients).
    const DType first = autograd::grad_dtype(params_[order.front()]);
    const bool shared = std::all_of(order.begin(), order.end(),
                                    [&](size_t i) { return autograd::grad_dtype(params_[i]) == first; });
    b->dtype = shared && (first == DType::BF16 || first == DType::F32) ? first : DType::F32;
    b->is_ready.assign(order.size(), false);
    buckets_.push_back(std::move(b));
  }
  timing_.launched_s.assign(buckets_.size(), 0);
  timing_.done_before_finish.assign(buckets_.size(), false);
  timing_.bytes.assign(buckets_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    std::weak_ptr<bool> alive = alive_;
    params_[i].register_post_accumulate_grad_hook([this, i, alive](const Tensor&) {
      if (alive.lock()) on_grad_ready(i);
    });
    // Backward makes the gradients in their bucket's slices (the GEMMs, bias epilogues and norms write them there):
    // launch() copies only the others (a padded head's; PyTorch's gradient_as_bucket_view, from the first step on).
    autograd::set_grad_destination(params_[i], [this, i, alive]() { return alive.lock() ? destination(i) : Tensor{}; });
  }
}

DataParallel::~DataParallel() {
  for (const Tensor& p : params_) autograd::set_grad_destination(p, nullptr);
  for (auto& b : buckets_) {  // collectives still in flight write into the buckets: let them land first
    try {
      if (b->meta_work) b->meta_work->wait();
      if (b->work) b->work->wait();
    } catch (...) {  // a peer died (the error already reached, or will reach, whoever waits): never throw here
    }
  }
}

int64_t DataParallel::num_buckets() const { return static_cast<int64_t>(buckets_.size()); }

bool DataParallel::owns(const Tensor& param) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].data_ptr() == param.data_ptr()) return owner_[i] == comm_->rank();
  return !options_.zero1;
}

void DataParallel::wait_for(const Bucket& b, dist::Work& work, bool on_device) const {
  try {
    if (on_device) work.wait_on_device(); else work.wait();
  } catch (const Error& e) {
    const size_t index = bucket_of_[b.params.front()];
    MPT_THROW("[DataParallel] gradient bucket {} of {} ({} parameters, {} .. {}): {}", index, buckets_.size(),
              b.params.size(), names_[b.params.front()], names_[b.params.back()], e.what());
  }
}

void DataParallel::on_grad_ready(size_t param) {
  if (!sync_) return;
  if (!step_started_) step_started_ = true, step_t0_ = now_s();
  Bucket& b = *buckets_[bucket_of_[param]];
  const size_t slot = static_cast<size_t>(std::find(b.params.begin(), b.params.end(), param) - b.params.begin());
  // A second gradient for a parameter whose bucket already left: the bucket is in flight and the gradient, its view
  // since launch(), was just added into (PyTorch's "mark a variable ready only once"). A second backward without
  // NoSync, or a parameter used in several checkpointed segments (or inside one and outside), whose hooks fire once
  // per segment's nested pass (autograd/checkpoint.h): the first launch would have sent a partial gradient.
  MPT_CHECK(!b.launched,
            "[DataParallel] parameter {} got a second gradient after its bucket {} was launched: a second backward "
            "before finish() needs DataParallel::NoSync around every backward but the last of the step, and a "
            "parameter may not be used in several activation-checkpointed segments (or inside one and outside it)",
            names_[param], bucket_of_[param]);
  if (!b.is_ready[slot]) {  // else a second backward into a bucket still filling: it accumulates before the launch
    b.is_ready[slot] = true;
    if (++b.ready == b.params.size()) launch_ready();
  }
  progress();
}

Tensor DataParallel::destination(size_t param) {
  Bucket& b = *buckets_[bucket_of_[param]];
  const Tensor& p = params_[param];
  // In flight: a second gradient is refused by on_grad_ready. A bucket of mixed gradient dtypes holds F32: theirs are
  // made apart and converted at launch().
  if (b.launched || autograd::grad_dtype(p) != b.dtype) return {};
  b.ensure_flat(device_);
  const size_t k = static_cast<size_t>(std::find(b.params.begin(), b.params.end(), param) - b.params.begin());
  return b.part(k, p).view(p.shape());
}

void DataParallel::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->ready == buckets_[next_launch_]->params.size()) {
    timing_.launched_s[next_launch_] = now_s() - step_t0_;
    launch(*buckets_[next_launch_++]);
    ++started_in_backward_;
  }
}

void DataParallel::progress() {
  for (auto& b : buckets_)
    if (b->work) b->work->test();
}

Tensor DataParallel::Bucket::part(size_t k, const Tensor& of) const {
  const int64_t n = of.numel();
  return flat.slice(0, offsets[k], offsets[k] + n);
}

void DataParallel::launch(Bucket& b) {
  const profile::Range range("communication/bucket {}", bucket_of_[b.params.front()]);
  autograd::NoGradGuard no_grad;
  const size_t np = b.params.size();
  b.ensure_flat(device_);  // every part is written below (a gradient, or zeros), unless backward made it there
  std::vector<float> used(np, 0.0f);
  for (size_t k = 0; k < np; ++k) {
    const Tensor& p = params_[b.params[k]];
    const Tensor g = p.grad();
    Tensor dst = b.part(k, p);
    used[k] = g.defined() ? 1.0f : 0.0f;
    if (!g.defined()) {
      dst.zero_();
      continue;
    }
    if (same_view(g.reshape({-1}), dst)) continue;  // it accumulated in the bucket
    dst.copy_(g.reshape({-1}));
    // The local gradient now lives in the bucket: the gradient becomes its view here, not at finish(), so the
    // autograd buffer is freed as its bucket leaves (PyTorch's Reducer with gradient_as_bucket_view), and the
    // step's peak does not hold every gradient twice.
    if (g.dtype() == dst.dtype()) p.set_grad(dst.view(p.shape()));
  }
  // meta = [used flags | amaxes], made on the device: the flags are uploaded only when they change (a copy from
  // host memory waits for the device), and copied on the device into meta, which the MAX all-reduce overwrites.
  const int64_t n_p = static_cast<int64_t>(np);
  if (!b.meta.defined()) b.meta = Tensor::zeros({2 * n_p}, DType::F32, device_);
  if (used != b.used_host) {
    b.used = Tensor::from_vector(used, {n_p}).to(device_);
    b.used_host = used;
  }
  b.meta.slice(0, 0, n_p).copy_(b.used);
  if (options_.compression == GradCompression::FP8) {
    // The amaxes go straight into meta's slots, one pass over the bucket (an unused parameter's zeros give 0); a NaN
    // travels as inf: MAX keeps it on every rank.
    ops::fp8_wire_amaxes(b.flat, b.offsets, b.meta.slice(0, n_p, 2 * n_p));
  }
  b.meta_work = comm_->all_reduce(b.meta, dist::ReduceOp::Max);
  const int64_t numel = b.numel;
  switch (options_.compression) {
    case GradCompression::None:
      if (options_.zero1) {
        b.wire = Tensor::empty({b.counts[static_cast<size_t>(comm_->rank())]}, b.dtype, device_);
        b.work = comm_->reduce_scatter_v(b.flat, b.wire, b.counts, dist::ReduceOp::Avg);
      } else {
        b.work = comm_->all_reduce(b.flat, dist::ReduceOp::Avg);
      }
      break;
    case GradCompression::BF16:
      b.wire = b.flat.dtype() == DType::BF16 ? b.flat : b.flat.to(DType::BF16);  // BF16 gradients travel as they are
      b.work = comm_->all_reduce_on_wire(b.wire, dist::ReduceOp::Sum);
      break;
    case GradCompression::FP8: {
      // The shared amaxes set the scales (MS-AMP waits here too): on a device stream the scale kernel waits for the
      // MAX all-reduce, the host does not.
      wait_for(b, *b.meta_work, /*on_device=*/true);
      b.fp8 = ops::fp8_wire_scales(b.meta.slice(0, static_cast<int64_t>(np), static_cast<int64_t>(2 * np)),
                                   comm_->size());
      b.wire = Tensor::empty({numel}, DType::F8E4M3, device_);
      ops::fp8_wire_quantize(b.flat, b.offsets, b.fp8.scale, b.wire);  // codes = saturate(g * s), s per parameter
      b.work = comm_->all_reduce_on_wire(b.wire, dist::ReduceOp::Sum);
      break;
    }
  }
  timing_.bytes[bucket_of_[b.params[0]]] =
      numel * (options_.compression == GradCompression::BF16  ? 2
               : options_.compression == GradCompression::FP8 ? 1
                                                              : static_cast<int64_t>(dtype_size(b.dtype)));
  b.launched = true;
}

void DataParallel::finish() {
  const profile::Range range("communication/finish");
  autograd::NoGradGuard no_grad;
  const double t_finish = now_s();
  if (!step_started_) step_t0_ = t_finish;
  timing_.finish_called_s = t_finish - step_t0_;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = *buckets_[i];
    timing_.done_before_finish[i] = b.launched && b.work && b.work->test();
  }
  while (next_launch_ < buckets_.size()) {  // buckets a parameter without a gradient left incomplete, in order
    timing_.launched_s[next_launch_] = t_finish - step_t0_;
    launch(*buckets_[next_launch_++]);
  }
  const int me = comm_->rank(), n = comm_->size();
  for (auto& bp : buckets_) {
    Bucket& b = *bp;
    if (b.meta_work) wait_for(b, *b.meta_work);
    wait_for(b, *b.work);
    const size_t np = b.params.size();
    // Which parameters got a gradient on some rank: when this rank used them all, the MAX is all ones and its own
    // flags say so; only otherwise are the reduced flags read back (a wait for the device).
    const bool all_used = std::all_of(b.used_host.begin(), b.used_host.end(), [](float u) { return u != 0.0f; });
    const std::vector<float> meta =
        all_used ? b.used_host : b.meta.slice(0, 0, static_cast<int64_t>(np)).to(Device::cpu()).to_vector<float>();
    if (options_.compression == GradCompression::BF16) {
      // The BF16 sum, averaged in F32 (a BF16 bucket: the same float product, rounded once into it).
      b.flat.copy_(ops::scale(b.flat.dtype() == DType::BF16 ? b.wire : b.wire.to(DType::F32), 1.0 / n));
    } else if (options_.compression == GradCompression::FP8) {
      // g = sum * 1 / (s * n) per parameter; a non-finite shared amax gives NaN everywhere in it.
      ops::fp8_wire_dequantize(b.wire, b.offsets, b.fp8.inv, b.flat);
    }
    // With zero1 this rank's shard starts at the offset of its first parameter in the bucket.
    int64_t shard_start = 0;
    for (int r = 0; r < me && options_.zero1; ++r) shard_start += b.counts[static_cast<size_t>(r)];
    for (size_t k = 0; k < np; ++k) {
      const Tensor& p = params_[b.params[k]];
      const bool mine = owner_[b.params[k]] == me;
      if (meta[k] == 0.0f || !mine) {  // used on no rank, or (zero1) another rank's: no gradient here
        if (options_.zero1 && !mine) p.set_grad(Tensor());
        continue;
      }
      const Tensor avg = (options_.zero1 ? b.wire.slice(0, b.offsets[k] - shard_start,
                                                        b.offsets[k] - shard_start + p.numel())
                                         : b.part(k, p))
                             .view(p.shape());
      // The gradient becomes a view of the bucket (PyTorch DDP's gradient_as_bucket_view): no copy out and no
      // second buffer per gradient, until the next step's launch() refills the bucket (a gradient kept from this
      // step is then overwritten, as in DDP).
      if (!same_view(p.grad(), avg)) p.set_grad(avg);
    }
    b.work.reset();
    // The gradients hold the buffers from here (flat's views, or ZeRO-1's shard in wire): let go of them.
    b.last = b.flat.storage();
    b.flat = Tensor{};
    b.wire = Tensor{};
    b.ready = 0;
    b.launched = false;
    std::fill(b.is_ready.begin(), b.is_ready.end(), false);
  }
  next_launch_ = 0;
  step_started_ = false;
  timing_.finish_wait_s = now_s() - t_finish;
}

std::vector<optim::ParamGroup> DataParallel::shard(std::vector<optim::ParamGroup> groups) const {
  if (!options_.zero1) return groups;
  std::vector<optim::ParamGroup> mine;
  for (optim::ParamGroup& g : groups) {
    optim::ParamGroup kept = g;
    kept.params.clear();
    kept.names.clear();
    for (size_t i = 0; i < g.params.size(); ++i) {
      if (!owns(g.params[i])) continue;
      kept.params.push_back(g.params[i]);
      if (!g.names.empty()) kept.names.push_back(g.names[i]);
    }
    mine.push_back(std::move(kept));  // kept when empty: every rank numbers the groups alike (checkpoints)
  }
  return mine;
}

void DataParallel::sync_parameters() {
  if (!options_.zero1) return;
  const profile::Range range("communication/sync_parameters");
  autograd::NoGradGuard no_grad;
  const int me = comm_->rank();
  std::vector<std::unique_ptr<dist::Work>> works;
  std::vector<Tensor> sends, gathered;  // per bucket (the gradient buckets are the gradients' by now)
  for (auto& bp : buckets_) {  // every bucket in flight at once, then unpacked
    Bucket& b = *bp;
    Tensor send = Tensor::empty({b.counts[static_cast<size_t>(me)]}, DType::F32, device_);
    int64_t at = 0;
    for (size_t k = 0; k < b.params.size(); ++k) {
      if (owner_[b.params[k]] != me) continue;
      const Tensor& p = params_[b.params[k]];
      send.slice(0, at, at + p.numel()).copy_(p.detach().reshape({-1}));
      at += p.numel();
    }
    sends.push_back(send);
    gathered.push_back(Tensor::empty({b.numel}, DType::F32, device_));
    works.push_back(comm_->all_gather_v(sends.back(), gathered.back(), b.counts));
  }
  for (size_t i = 0; i < buckets_.size(); ++i) {
    works[i]->wait();
    Bucket& b = *buckets_[i];
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = params_[b.params[k]];
      if (owner_[b.params[k]] == me) continue;
      p.detach().copy_(gathered[i].slice(0, b.offsets[k], b.offsets[k] + p.numel()).view(p.shape()));
      amp::invalidate_compute_copies(p);  // its cached FP16/BF16/FP8 copies held the old values
    }
  }
}

Tensor DataParallel::clip_grad_norm_(double max_norm) {
  if (!options_.zero1) return optim::clip_grad_norm_(module_order_, max_norm);
  autograd::NoGradGuard no_grad;
  const optim::ClipCoefficient c = clip_coefficient(max_norm);
  std::vector<Tensor> grads;  // this rank's shard
  for (const Tensor& p : params_)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (!grads.empty()) ops::mul_(grads, c.coefficient);  // a coefficient of 1 keeps the bits
  return c.total_norm;
}

optim::ClipCoefficient DataParallel::clip_coefficient(double max_norm) {
  if (!options_.zero1) return optim::clip_coefficient(module_order_, max_norm);
  // ZeRO-1: each rank holds its shard's gradients; their squared norms are summed across ranks on the device.
  return optim::clip_coefficient_on_device(params_, max_norm, device_, [this](Tensor& sum_of_squares) {
    comm_->all_reduce(sum_of_squares, dist::ReduceOp::Sum)->wait_on_device();
  });
}

void DataParallel::attach(train::GradScaler& scaler) {
  auto comm = comm_;
  scaler.set_found_inf_reduction(
      [comm, d = device_](std::vector<Tensor>& found) { max_reduce_scalars(*comm, d, found); });
}

void DataParallel::attach(fp8::Fp8ScalingState& fp8) {
  auto comm = comm_;
  // The state hands its amaxes over as one vector on its device: one MAX all-reduce there, no host read (a state on
  // another device than the communicator's goes through the host).
  fp8.set_amax_reduction([comm, d = device_](Tensor& amaxes) {
    if (amaxes.device() == d) {
      comm->all_reduce(amaxes, dist::ReduceOp::Max)->wait_on_device();
      return;
    }
    Tensor here = amaxes.to(d);
    comm->all_reduce(here, dist::ReduceOp::Max)->wait();
    amaxes.copy_(here);
  });
}

}  // namespace mpt::train
