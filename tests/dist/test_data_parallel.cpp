// tests/dist/test_data_parallel.cpp: DataParallel over the ranks equals one process on the whole batch (run alone
// and under mpirun -np 2 and 4): gradients, parameters after several steps, no_sync, ZeRO-1, compression, unused
// parameters, and the ranks' agreement on found_inf and FP8 amaxes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "mpt/train/data_parallel.h"
#include "mpt/train/trainer.h"
#include "mpt/mpt.h"
#include "test_util.h"

using namespace mpt;

namespace {

nn::GPTConfig tiny(uint64_t seed) {
  nn::GPTConfig c;
  c.vocab_size = 32, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32, c.seed = seed;
  return c;
}

// The global batch of step `step`: 2 sequences per rank, the same on every rank.
std::pair<Tensor, Tensor> global_batch(int ranks, int step = 0) {
  std::mt19937 rng(5 + static_cast<unsigned>(step));
  const int64_t B = 2 * ranks, T = 16;
  std::vector<int64_t> ids(static_cast<size_t>(B * (T + 1)));
  for (auto& v : ids) v = static_cast<int64_t>(rng() % 32);
  const Tensor all = Tensor::from_vector(ids, {B, T + 1});
  return {all.slice(1, 0, T).contiguous(), all.slice(1, 1, T + 1).contiguous()};
}

Tensor pick_rows(const Tensor& t, const std::vector<int64_t>& rows) {
  const std::vector<int64_t> v = t.to_vector<int64_t>();
  const int64_t T = t.shape()[1];
  std::vector<int64_t> out;
  for (int64_t r : rows) out.insert(out.end(), v.begin() + r * T, v.begin() + (r + 1) * T);
  return Tensor::from_vector(out, {static_cast<int64_t>(rows.size()), T});
}

// max |a - b| / max |b|.
double normwise(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  double err = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(x[i]) - y[i]));
    scale = std::max(scale, std::abs(static_cast<double>(y[i])));
  }
  return err / std::max(scale, 1e-30);
}

// grads: compare gradients (with zero1, only those this rank owns: `ours` lacks the others).
double worst_difference(const std::vector<mpt::NamedParameter>& ours, const std::vector<mpt::NamedParameter>& theirs,
                        bool grads, double tol, bool only_ours = false) {
  double worst = 0;
  EXPECT_EQ(ours.size(), theirs.size());
  for (size_t i = 0; i < ours.size() && i < theirs.size(); ++i) {
    const Tensor a = grads ? ours[i].tensor.grad() : ours[i].tensor;
    const Tensor b = grads ? theirs[i].tensor.grad() : theirs[i].tensor;
    if (only_ours && !a.defined()) continue;
    if (!a.defined() || !b.defined()) {
      ADD_FAILURE() << ours[i].name << ": gradient defined on one side only";
      continue;
    }
    const double e = normwise(a, b);
    worst = std::max(worst, e);
    EXPECT_LE(e, tol) << ours[i].name << (grads ? " gradient" : " parameter");
  }
  return worst;
}

struct RunOptions {
  train::DataParallelOptions dp;
  bool adamw = false;
  int steps = 3;
};

// AdamW (eps 1e-4: no sign flips of near-zero gradients between reduction orders) or SGD with momentum.
std::unique_ptr<optim::Optimizer> make_optimizer(std::vector<optim::ParamGroup> groups, bool adamw) {
  if (adamw) return std::make_unique<optim::AdamW>(std::move(groups), optim::AdamWOptions{.lr = 1e-2, .eps = 1e-4});
  return std::make_unique<optim::SGD>(std::move(groups), optim::SgdOptions{.lr = 0.1, .momentum = 0.9});
}

// `steps` optimizer steps with clipping, data parallel here; returns the model.
std::unique_ptr<nn::GPT> train_parallel(const RunOptions& o, const std::shared_ptr<dist::Communicator>& comm,
                                        int64_t* optimizer_bytes = nullptr) {
  const int n = comm->size(), me = comm->rank();
  auto model = std::make_unique<nn::GPT>(tiny(100 + static_cast<uint64_t>(me)));  // rank 0's after the broadcast
  train::DataParallel dp(*model, comm, o.dp);
  const auto opt = make_optimizer(dp.shard(optim::weight_decay_groups(model->named_parameters(), 0.1)), o.adamw);
  for (int s = 0; s < std::max(o.steps, 1); ++s) {
    const auto [x, y] = global_batch(n, s);
    model->loss(x.slice(0, 2 * me, 2 * me + 2), y.slice(0, 2 * me, 2 * me + 2)).backward();
    dp.finish();
    if (o.steps == 0) break;  // the first step's averaged gradients
    dp.clip_grad_norm_(1.0);
    opt->step();
    dp.sync_parameters();
    opt->zero_grad();
  }
  if (optimizer_bytes != nullptr) {
    *optimizer_bytes = 0;
    for (const auto& [k, t] : opt->state_dict())
      if (k.find(".exp_avg") != std::string::npos || k.find(".momentum_buffer") != std::string::npos)
        *optimizer_bytes += static_cast<int64_t>(t.nbytes());
  }
  return model;
}

std::unique_ptr<nn::GPT> train_alone(const RunOptions& o, int n) {
  auto model = std::make_unique<nn::GPT>(tiny(100));
  const auto opt = make_optimizer(optim::weight_decay_groups(model->named_parameters(), 0.1), o.adamw);
  for (int s = 0; s < std::max(o.steps, 1); ++s) {
    const auto [x, y] = global_batch(n, s);
    model->loss(x, y).backward();
    if (o.steps == 0) break;
    optim::clip_grad_norm_([&] {
      std::vector<Tensor> ps;
      for (const auto& p : model->named_parameters()) ps.push_back(p.tensor);
      return ps;
    }(), 1.0);
    opt->step();
    opt->zero_grad();
  }
  return model;
}

}  // namespace

TEST(DataParallel, ShardedGradientsAveragedEqualTheWholeBatchsGradients) {
  const auto comm = dist::world();
  const int n = comm->size(), me = comm->rank();
  nn::GPT model(tiny(100 + static_cast<uint64_t>(me)));  // different weights until the broadcast
  train::DataParallel dp(model, comm, {.bucket_bytes = 16 << 10});  // several buckets
  ASSERT_GT(dp.num_buckets(), 2);
  nn::GPT reference(tiny(100));  // rank 0's initial weights
  for (const auto& [k, t] : reference.state_dict()) {
    const Tensor mine = model.state_dict().at(k);
    ASSERT_EQ(normwise(mine, t), 0.0) << k << ": the broadcast should give rank 0's weights";
  }

  const auto [x, y] = global_batch(n);
  model.loss(x.slice(0, 2 * me, 2 * me + 2), y.slice(0, 2 * me, 2 * me + 2)).backward();
  const int64_t overlapped = dp.buckets_started_in_backward();
  dp.finish();
  reference.loss(x, y).backward();
  const double worst = worst_difference(model.named_parameters(), reference.named_parameters(), true, 1e-5);
  std::printf("rank %d of %d: worst normwise gradient difference %.3g; %lld of %lld buckets started in backward\n", me,
              n, worst, static_cast<long long>(overlapped), static_cast<long long>(dp.num_buckets()));
  EXPECT_EQ(overlapped, dp.num_buckets()) << "every bucket starts during backward";
  const auto& t = dp.last_step();
  for (int64_t b = 0; b < dp.num_buckets(); ++b)
    EXPECT_LE(t.launched_s[static_cast<size_t>(b)], t.finish_called_s) << "bucket " << b << " started after backward";
}

TEST(DataParallel, NoSyncAccumulationEqualsTheWholeBatch) {
  const auto comm = dist::world();
  const int n = comm->size(), me = comm->rank();
  nn::GPT model(tiny(100 + static_cast<uint64_t>(me)));
  train::DataParallel dp(model, comm, {.bucket_bytes = 16 << 10});
  nn::GPT reference(tiny(100));
  // Two micro-batches per rank (one sequence each); the reference sees the same two global micro-batches.
  const auto [x, y] = global_batch(n);
  for (int micro = 0; micro < 2; ++micro) {
    const int64_t row = 2 * me + micro;
    if (micro == 0) {
      train::DataParallel::NoSync no_sync(dp);
      model.loss(x.slice(0, row, row + 1), y.slice(0, row, row + 1)).backward();
      EXPECT_EQ(dp.buckets_started_in_backward(), 0) << "no collective inside no_sync";
    } else {
      model.loss(x.slice(0, row, row + 1), y.slice(0, row, row + 1)).backward();
    }
  }
  dp.finish();
  for (int micro = 0; micro < 2; ++micro) {
    std::vector<int64_t> rows;
    for (int r = 0; r < n; ++r) rows.push_back(2 * r + micro);
    reference.loss(pick_rows(x, rows), pick_rows(y, rows)).backward();
  }
  const double worst = worst_difference(model.named_parameters(), reference.named_parameters(), true, 1e-5);
  std::printf("rank %d of %d: no_sync x2, worst normwise gradient difference %.3g\n", me, n, worst);
}

// Backward makes each gradient in its bucket (autograd::set_grad_destination: the weight-gradient GEMMs, the bias
// epilogues, the norms and the embedding write there; the tiny GPT's head is unpadded, so the tied table's gradient
// is written there too), so launch() copies nothing: inside NoSync, where nothing is launched, the
// first micro-batch's gradients already share one storage per bucket, the second adds into them there, and the
// averaged gradients equal the whole batch's. Without the destinations each gradient had its own storage until its
// bucket was launched.
TEST(DataParallel, BackwardMakesTheGradientsInTheirBuckets) {
  const auto comm = dist::world();
  const int n = comm->size(), me = comm->rank();
  nn::GPT model(tiny(100 + static_cast<uint64_t>(me)));
  train::DataParallel dp(model, comm, {.bucket_bytes = 16 << 10});
  ASSERT_GT(dp.num_buckets(), 2);
  nn::GPT reference(tiny(100));
  const auto [x, y] = global_batch(n);
  std::vector<const void*> first;
  for (int micro = 0; micro < 2; ++micro) {
    const int64_t row = 2 * me + micro;
    if (micro == 0) {
      train::DataParallel::NoSync no_sync(dp);
      model.loss(x.slice(0, row, row + 1), y.slice(0, row, row + 1)).backward();
      std::set<const void*> storages;
      for (const auto& p : model.named_parameters()) {
        ASSERT_TRUE(p.tensor.grad().defined()) << p.name;
        storages.insert(p.tensor.grad().storage().get());
        first.push_back(p.tensor.grad().data_ptr());
      }
      EXPECT_EQ(static_cast<int64_t>(storages.size()), dp.num_buckets()) << "inside NoSync, before any launch";
    } else {
      model.loss(x.slice(0, row, row + 1), y.slice(0, row, row + 1)).backward();
    }
  }
  dp.finish();
  size_t i = 0;
  for (const auto& p : model.named_parameters())
    EXPECT_EQ(p.tensor.grad().data_ptr(), first[i++]) << p.name << ": the averaged gradient moved";
  for (int micro = 0; micro < 2; ++micro) {
    std::vector<int64_t> rows;
    for (int r = 0; r < n; ++r) rows.push_back(2 * r + micro);
    reference.loss(pick_rows(x, rows), pick_rows(y, rows)).backward();
  }
  const double worst = worst_difference(model.named_parameters(), reference.named_parameters(), true, 1e-5);
  std::printf("rank %d of %d: gradients made in their buckets, worst normwise gradient difference %.3g\n", me, n,
              worst);
}

// After finish() every gradient is a view of its bucket (PyTorch DDP's gradient_as_bucket_view: no copy out of the
// bucket, no second buffer per gradient): one storage per bucket. Zeroed in place (zero_grad without set_to_none),
// the next backward accumulates into the views and launch() finds them in place; the averaged gradients still equal
// the whole batch's, and stay views.
TEST(DataParallel, GradientsAreViewsOfTheirBucketsAndAccumulateThere) {
  const auto comm = dist::world();
  const int n = comm->size(), me = comm->rank();
  nn::GPT model(tiny(100 + static_cast<uint64_t>(me)));
  train::DataParallel dp(model, comm, {.bucket_bytes = 16 << 10});
  ASSERT_GT(dp.num_buckets(), 2);
  auto storages = [&] {
    std::set<const void*> s;
    for (const auto& p : model.named_parameters()) {
      EXPECT_TRUE(p.tensor.grad().defined()) << p.name;
      if (p.tensor.grad().defined()) s.insert(p.tensor.grad().storage().get());
    }
    return static_cast<int64_t>(s.size());
  };
  nn::GPT reference(tiny(100));
  for (int step = 0; step < 2; ++step) {
    const auto [x, y] = global_batch(n, step);
    model.zero_grad(/*set_to_none=*/false);  // the first step: no gradient yet, nothing to zero
    model.loss(x.slice(0, 2 * me, 2 * me + 2), y.slice(0, 2 * me, 2 * me + 2)).backward();
    dp.finish();
    EXPECT_EQ(storages(), dp.num_buckets()) << "step " << step;
    reference.zero_grad();
    reference.loss(x, y).backward();
    const double worst = worst_difference(model.named_parameters(), reference.named_parameters(), true, 1e-5);
    std::printf("rank %d of %d, step %d: gradients as bucket views, worst normwise difference %.3g\n", me, n, step,
                worst);
  }
}

// A gradient becomes its bucket's view as the bucket leaves, during backward (PyTorch's Reducer with
// gradient_as_bucket_view), so that the autograd buffer is freed then and not at finish(): one storage per bucket
// before finish() too. A second backward into launched buckets without NoSync is refused with the parameter's name
// (its gradient is the in-flight bucket); finish() then still completes the step's collectives.
TEST(DataParallel, AGradientBecomesItsBucketsViewWhenTheBucketLeaves) {
  const auto comm = dist::world();
  const int n = comm->size(), me = comm->rank();
  nn::GPT model(tiny(100 + static_cast<uint64_t>(me)));
  train::DataParallel dp(model, comm, {.bucket_bytes = 16 << 10});
  ASSERT_GT(dp.num_buckets(), 2);
  const auto [x, y] = global_batch(n, 0);
  const Tensor xs = x.slice(0, 2 * me, 2 * me + 2), ys = y.slice(0, 2 * me, 2 * me + 2);
  model.loss(xs, ys).backward();
  ASSERT_EQ(dp.buckets_started_in_backward(), dp.num_buckets());
  std::set<const void*> storages;
  for (const auto& p : model.named_parameters()) {
    ASSERT_TRUE(p.tensor.grad().defined()) << p.name;
    storages.insert(p.tensor.grad().storage().get());
  }
  EXPECT_EQ(static_cast<int64_t>(storages.size()), dp.num_buckets()) << "before finish()";
  EXPECT_MPT_ERROR(model.loss(xs, ys).backward(), "got a second gradient after its bucket");
  dp.finish();
  nn::GPT reference(tiny(100));
  model.zero_grad();
  model.loss(xs, ys).backward();
  dp.finish();
  reference.loss(x, y).backward();
  const double worst = worst_difference(model.named_parameters(), reference.named_parameters(), true, 1e-5);
  std::printf("rank %d of %d: the step after the refused backward, worst normwise difference %.3g\n", me, n, worst);
}

// The buckets take memory only from their launch until the gradients that view them are released: between steps
// (where a step peaks, at the forward's end) a DataParallel holds only its small "used" flags, and no step holds a
// gradient twice. Uncompressed, ZeRO-1 and BF16-compressed; zero_grad(false) keeps the views (and their buckets),
// which the next step reuses.
TEST(DataParallel, BucketsTakeNoMemoryBetweenSteps) {
  const auto comm = dist::world();
  const int n = comm->size(), me = comm->rank();
  for (const train::DataParallelOptions& o :
       {train::DataParallelOptions{.bucket_bytes = 16 << 10}, {.bucket_bytes = 16 << 10, .zero1 = true},
        {.bucket_bytes = 16 << 10, .compression = train::GradCompression::BF16}}) {
    nn::GPT model(tiny(100 + static_cast<uint64_t>(me)));
    int64_t param_bytes = 0;
    for (const auto& p : model.named_parameters()) param_bytes += p.tensor.numel() * 4;
    const int64_t before = memory_stats(Device::cpu()).current_bytes;
    train::DataParallel dp(model, comm, o);
    for (int step = 0; step < 2; ++step) {
      const auto [x, y] = global_batch(n, step);
      model.loss(x.slice(0, 2 * me, 2 * me + 2), y.slice(0, 2 * me, 2 * me + 2)).backward();
      dp.finish();
      model.zero_grad();
      EXPECT_LT(memory_stats(Device::cpu()).current_bytes - before, param_bytes / 16)
          << "step " << step << (o.zero1 ? " zero1" : "") << ": the buckets stayed";
    }
    const auto [x, y] = global_batch(n, 2);
    model.loss(x.slice(0, 2 * me, 2 * me + 2), y.slice(0, 2 * me, 2 * me + 2)).backward();
    dp.finish();
    std::set<const void*> kept;
    for (const auto& p : model.named_parameters())
      if (p.tensor.grad().defined()) kept.insert(p.tensor.grad().storage().get());
    model.zero_grad(/*set_to_none=*/false);
    model.loss(x.slice(0, 2 * me, 2 * me + 2), y.slice(0, 2 * me, 2 * me + 2)).backward();
    dp.finish();
    for (const auto& p : model.named_parameters())
      if (p.tensor.grad().defined() && !o.zero1) {
        EXPECT_TRUE(kept.count(p.tensor.grad().storage().get()) == 1) << p.name << ": the kept bucket was reused";
      }
  }
}

// BF16 gradients of the FP32 masters (autograd::set_grad_dtype, amp::Policy::grads): the buckets are BF16 and the
// reduced gradients stay BF16 views of them (one storage per bucket, no FP32 bucket beside them), uncompressed (a
// BF16 all-reduce, llm.c's), with ZeRO-1 and compressed. Against one process's FP32 gradients on the whole batch,
// within ParametersAfterStepsMatchOneProcess's budget for the wire format (BF16 for the uncompressed and ZeRO-1
// reductions: each rank's gradient is rounded once to BF16, the reduction rounds again) plus one BF16 rounding.
TEST(DataParallel, Bf16GradientsStayInBf16BucketsAndMatchOneProcess) {
  const auto comm = dist::world();
  const int n = comm->size(), me = comm->rank();
  const double nd = n, bf16_budget = 2 * nd * 0x1p-8 + 0x1p-8;
  struct Case {
    const char* name;
    train::DataParallelOptions dp;
    double tol;
  };
  for (const Case& c :
       {Case{"none", {.bucket_bytes = 8 << 10}, bf16_budget},
        Case{"zero1", {.bucket_bytes = 8 << 10, .zero1 = true}, bf16_budget},
        Case{"bf16", {.bucket_bytes = 8 << 10, .compression = train::GradCompression::BF16}, bf16_budget},
        Case{"fp8", {.bucket_bytes = 8 << 10, .compression = train::GradCompression::FP8}, 2 * nd * 0x1p-4 + 0x1p-8}}) {
    SCOPED_TRACE(c.name);
    nn::GPT model(tiny(100 + static_cast<uint64_t>(me)));
    for (const auto& p : model.named_parameters()) autograd::set_grad_dtype(p.tensor, DType::BF16);
    train::DataParallel dp(model, comm, c.dp);
    ASSERT_GT(dp.num_buckets(), 2);
    const auto [x, y] = global_batch(n, 0);
    model.loss(x.slice(0, 2 * me, 2 * me + 2), y.slice(0, 2 * me, 2 * me + 2)).backward();
    dp.finish();
    std::set<const void*> storages;
    for (const auto& p : model.named_parameters()) {
      const Tensor g = p.tensor.grad();
      if (!g.defined()) {
        EXPECT_TRUE(c.dp.zero1) << p.name << ": no gradient";
        continue;
      }
      EXPECT_EQ(g.dtype(), DType::BF16) << p.name;
      storages.insert(g.storage().get());
    }
    if (!c.dp.zero1) {
      EXPECT_EQ(static_cast<int64_t>(storages.size()), dp.num_buckets()) << "views of the buckets";
    }
    nn::GPT reference(tiny(100));
    reference.loss(x, y).backward();
    const double worst =
        worst_difference(model.named_parameters(), reference.named_parameters(), true, c.tol, c.dp.zero1);
    std::printf("rank %d of %d: BF16 gradients, %s: worst normwise difference %.3g (bound %.3g)\n", me, n, c.name,
                worst, c.tol);
  }
}

// Several SGD (momentum) steps with clipping: the parameters match one process on the whole batch, uncompressed,
// with ZeRO-1, and compressed within the compression's rounding.
TEST(DataParallel, ParametersAfterStepsMatchOneProcess) {
  const auto comm = dist::world();
  const int n = comm->size();
  struct Case {
    const char* name;
    train::DataParallelOptions dp;
    double grad_tol;  // the gradient's normwise error, which the parameters' error follows
  };
  // The compressed ones' budgets (normwise, per parameter): each rank's gradient rounds once to the wire format and
  // each of the n - 1 hops rounds a partial sum again, unit roundoff 2^-8 (BF16) or 2^-4 (E4M3, relative to the
  // shared amax): about n roundings, with a factor 2 for cancellation in the average. Measured worst: docs/distributed.md.
  const double nd = n;
  for (const Case& c : {Case{"f32", {.bucket_bytes = 16 << 10}, 1e-5},
                        Case{"zero1", {.bucket_bytes = 16 << 10, .zero1 = true}, 1e-5},
                        Case{"bf16", {.bucket_bytes = 16 << 10, .compression = train::GradCompression::BF16},
                             2 * nd * 0x1p-8},
                        Case{"fp8", {.bucket_bytes = 16 << 10, .compression = train::GradCompression::FP8},
                             2 * nd * 0x1p-4}}) {
    SCOPED_TRACE(c.name);
    const RunOptions first{.dp = c.dp, .steps = 0};
    const double worst_grad = worst_difference(train_parallel(first, comm)->named_parameters(),
                                               train_alone(first, n)->named_parameters(), true, c.grad_tol,
                                               c.dp.zero1);
    // Three momentum-0.9 steps apply 1 + 1.9 + 2.71 = 5.61 gradients, each with the error above, to parameters
    // larger than the updates: their normwise error stays within 3x the gradient's (measured: 1.1x to 2x).
    const RunOptions o{.dp = c.dp, .steps = 3};
    const double worst = worst_difference(train_parallel(o, comm)->named_parameters(),
                                          train_alone(o, n)->named_parameters(), false, 3 * c.grad_tol);
    std::printf("rank %d of %d: %s: worst normwise gradient difference %.3g (bound %.3g), parameters after 3 SGD "
                "steps %.3g (bound %.3g)\n", comm->rank(), n, c.name, worst_grad, c.grad_tol, worst,
                3 * c.grad_tol);
  }
}

// The Trainer with data parallelism clips through the optimizer (the coefficient applied as each gradient is read,
// no pass rewriting the gradients): its steps are the hand-ordered loop's with DataParallel::clip_grad_norm_, bit for
// bit without ZeRO-1 (both take optim::clip_coefficient's f32 coefficient on the device) and with ZeRO-1 within the
// f32 rounding of the coefficient (the loop scales by the host's double): a relative 2^-24 on each gradient, which
// AdamW's m / (sqrt(v) + eps) turns into at most lr * 2^-24 |g| / eps per step, far below 1e-6 of the weights.
// clip 0.05 makes every step clip.
TEST(DataParallel, TrainerClipsInTheOptimizerAsClipGradNormDoes) {
  const auto comm = dist::world();
  const int n = comm->size(), me = comm->rank();
  for (const bool zero1 : {false, true}) {
    SCOPED_TRACE(zero1 ? "zero1" : "replicated");
    const train::DataParallelOptions dp_options{.bucket_bytes = 16 << 10, .zero1 = zero1};
    const optim::AdamWOptions adamw{.lr = 1e-2, .eps = 1e-4};
    nn::GPT by_hand(tiny(100 + static_cast<uint64_t>(me))), by_trainer(tiny(100 + static_cast<uint64_t>(me)));
    train::DataParallel dp(by_hand, comm, dp_options);
    optim::AdamW opt(dp.shard(optim::weight_decay_groups(by_hand.named_parameters(), 0.0)), adamw);
    train::Trainer trainer(by_trainer, train::adamw(adamw),
                           {.clip = 0.05, .comm = comm, .data_parallel = dp_options});
    for (int s = 0; s < 3; ++s) {
      const auto [x, y] = global_batch(n, s);
      const Tensor xs = x.slice(0, 2 * me, 2 * me + 2).contiguous(), ys = y.slice(0, 2 * me, 2 * me + 2).contiguous();
      by_hand.loss(xs, ys).backward();
      dp.finish();
      // Replicated, every rank holds the averaged gradients whole and the Trainer clips them as without data
      // parallelism, summing the norm in its optimizer's order; ZeRO-1 goes through DataParallel (module order).
      std::vector<Tensor> in_optimizer_order;
      for (const auto& g : opt.param_groups())
        in_optimizer_order.insert(in_optimizer_order.end(), g.params.begin(), g.params.end());
      const double hand_norm = (zero1 ? dp.clip_grad_norm_(0.05) : optim::clip_grad_norm_(in_optimizer_order, 0.05))
                                   .item<double>();
      opt.step();
      dp.sync_parameters();
      opt.zero_grad();
      const train::StepMetrics m = trainer.step([&](int64_t) { return by_trainer.loss(xs, ys); });
      ASSERT_GT(hand_norm, 0.05) << "step " << s << ": a step that does not clip tests nothing";
      EXPECT_EQ(m.grad_norm.item<double>(), hand_norm) << "step " << s;
      if (!zero1) {
        const auto a = by_trainer.named_parameters(), b = by_hand.named_parameters();
        for (size_t i = 0; i < a.size(); ++i)
          EXPECT_EQ(a[i].tensor.to_vector<float>(), b[i].tensor.to_vector<float>()) << a[i].name << " step " << s;
      }
    }
    if (zero1) worst_difference(by_trainer.named_parameters(), by_hand.named_parameters(), false, 1e-6);
  }
}

TEST(DataParallel, Zero1AdamWMatchesAndShardsTheOptimizerState) {
  const auto comm = dist::world();
  const int n = comm->size();
  const RunOptions sharded{.dp = {.zero1 = true}, .adamw = true};
  const RunOptions replicated{.dp = {}, .adamw = true};
  int64_t mine = 0, full = 0;
  const auto a = train_parallel(sharded, comm, &mine);
  const auto b = train_parallel(replicated, comm, &full);
  const auto c = train_alone(replicated, n);
  const double worst = worst_difference(a->named_parameters(), c->named_parameters(), false, 1e-5);
  worst_difference(b->named_parameters(), c->named_parameters(), false, 1e-5);
  std::printf("rank %d of %d: ZeRO-1 AdamW: moments %lld of %lld bytes (%.3f); worst parameter difference %.3g\n",
              comm->rank(), n, static_cast<long long>(mine), static_cast<long long>(full),
              static_cast<double>(mine) / static_cast<double>(full), worst);
  // Greedy balance by size: within the largest parameter's share of 1/n.
  const double largest = 32.0 * 32 * 4 / static_cast<double>(full / 8);  // c_fc / all moment elements
  EXPECT_LE(static_cast<double>(mine) / static_cast<double>(full), 1.0 / n + largest);
  int64_t total = mine;
  Tensor t = Tensor::full({1}, static_cast<double>(mine), DType::F32);
  comm->all_reduce(t, dist::ReduceOp::Sum)->wait();
  total = static_cast<int64_t>(t.to_vector<float>()[0]);
  EXPECT_EQ(total, full) << "every parameter's state on exactly one rank";
}

// A module whose second parameter only rank 0 uses, and a third nobody uses.
class Partly : public nn::Module {
 public:
  Partly() : nn::Module("Partly") {
    a_ = &register_parameter("a", Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}));
    b_ = &register_parameter("b", Tensor::from_vector(std::vector<float>{4, 5}, {2}));
    c_ = &register_parameter("c", Tensor::from_vector(std::vector<float>{6}, {1}));
  }
  Tensor loss(int rank) const {
    Tensor l = ops::sum(ops::scale(*a_, rank + 1.0));
    return rank == 0 ? ops::add(l, ops::sum(ops::mul(*b_, *b_))) : l;
  }
  Tensor *a_, *b_, *c_;
};

TEST(DataParallel, ParametersWithoutAGradientOnSomeRanksNeitherHangNorDiverge) {
  const auto comm = dist::world();
  const int n = comm->size(), me = comm->rank();
  for (bool zero1 : {false, true}) {
    if (zero1 && n > 3) continue;  // three parameters: a fourth rank would own none
    Partly m;
    train::DataParallel dp(m, comm, {.bucket_bytes = 8, .zero1 = zero1});  // one bucket per parameter
    m.loss(me).backward();
    dp.finish();
    // a: mean over ranks of (r + 1); b: 2 b on rank 0, nothing elsewhere, averaged: 2 b / n; c: unused everywhere.
    const bool own_a = dp.owns(*m.a_), own_b = dp.owns(*m.b_);
    if (own_a) {
      ASSERT_TRUE(m.a_->grad().defined());
      EXPECT_FLOAT_EQ(m.a_->grad().to_vector<float>()[0], static_cast<float>((n + 1) / 2.0));
    }
    if (own_b) {
      ASSERT_TRUE(m.b_->grad().defined()) << "used on rank 0, so every rank holds its gradient";
      EXPECT_FLOAT_EQ(m.b_->grad().to_vector<float>()[1], 10.0f / static_cast<float>(n));
    }
    EXPECT_FALSE(m.c_->grad().defined()) << "unused on every rank: no gradient anywhere";
  }
}

// ZeRO-1: only the owner unscales a gradient, so an inf on one rank must skip the step everywhere.
TEST(DataParallel, GradScalerFoundInfIsAgreedAcrossRanks) {
  const auto comm = dist::world();
  const int n = comm->size(), me = comm->rank();
  nn::GPT model(tiny(100 + static_cast<uint64_t>(me)));
  train::DataParallel dp(model, comm, {.bucket_bytes = 16 << 10, .zero1 = n > 1});
  optim::SGD opt(dp.shard(optim::weight_decay_groups(model.named_parameters(), 0.0)), {.lr = 0.1});
  train::GradScaler scaler(train::GradScalerOptions{.init_scale = 1024});
  dp.attach(scaler);
  const auto [x, y] = global_batch(n);
  scaler.scale(model.loss(x.slice(0, 2 * me, 2 * me + 2), y.slice(0, 2 * me, 2 * me + 2))).backward();
  dp.finish();
  // Poison one gradient on the last rank only (after the all-reduce: only that rank sees it).
  if (me == n - 1) {
    for (const auto& p : model.named_parameters())
      if (p.tensor.grad().defined()) {
        p.tensor.grad().copy_(Tensor::full(p.tensor.shape(), INFINITY));
        break;
      }
  }
  const bool stepped = scaler.step(opt);
  scaler.update();
  EXPECT_FALSE(stepped) << "rank " << me << " stepped although rank " << n - 1 << " found an inf";
  EXPECT_EQ(scaler.get_scale(), 512.0);
}

TEST(DataParallel, Fp8DelayedScalingAmaxesAreAgreedAcrossRanks) {
  const auto comm = dist::world();
  const int n = comm->size(), me = comm->rank();
  Partly m;
  train::DataParallel dp(m, comm);
  fp8::Fp8ScalingState fp8(fp8::DelayedScaling{});
  dp.attach(fp8);
  const auto meta = fp8.register_tensor("x", fp8::Fp8Role::Input);
  // Each rank saw a different amax; every rank's scale must follow the largest, 2 n, as one process's would.
  meta->record_amax(static_cast<float>(2 * (me + 1)));
  fp8.update();
  fp8::Fp8ScalingState alone(fp8::DelayedScaling{});
  const auto want = alone.register_tensor("x", fp8::Fp8Role::Input);
  want->record_amax(static_cast<float>(2 * n));
  alone.update();
  EXPECT_EQ(meta->scale.to(DType::F32).item<float>(), want->scale.to(DType::F32).item<float>()) << "rank " << me;
  EXPECT_NE(want->scale.to(DType::F32).item<float>(), 1.0f);
}
