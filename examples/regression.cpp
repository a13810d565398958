// examples/regression.cpp: an MLP fits a synthetic nonlinear function in bf16 with FP32 master weights, written with
// the general ops and Tensor operators only (no GPT code): proof that the library trains arbitrary models.
#include <mpt/mpt.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using mpt::DType;
using mpt::Tensor;
namespace ops = mpt::ops;

// The task: 8 inputs uniform in [-1, 1]; y = tanh(3 x0) x1 + x2^2 - |x3| + 0.5 x4 x5 + noise(0.05). x6 and x7 are
// distractors. A linear fit explains almost none of it (the products and kinks are invisible to it).
struct Batch {
  Tensor x;  // (n, 8) f32
  Tensor y;  // (n, 1) f32
};

Batch make_batch(int64_t n, mpt::Generator& gen, mpt::Device device) {
  const Tensor x = Tensor::uniform({n, 8}, -1, 1, DType::F32, mpt::Device::cpu(), gen);
  const auto c = [&](int64_t j) { return x.slice(1, j, j + 1); };
  const Tensor y = ops::tanh(3.0 * c(0)) * c(1) + c(2) * c(2) - ops::abs(c(3)) + 0.5 * c(4) * c(5) +
                   Tensor::normal({n, 1}, 0, 0.05, DType::F32, mpt::Device::cpu(), gen);
  return {x.to(device), y.to(device)};
}

// A parameter: an FP32 leaf (the master copy the optimizer updates).
Tensor parameter(const mpt::Shape& shape, double std, mpt::Device device, mpt::Generator& gen) {
  return Tensor::normal(shape, 0, std, DType::F32, device, gen).requires_grad_();
}

// An nn::Module, so the Trainer can own its step: it finds the parameters through named_parameters().
class Mlp : public mpt::nn::Module {
 public:
  Mlp(const std::vector<int64_t>& widths, mpt::Device device, mpt::Generator& gen) : Module("Mlp") {
    for (size_t i = 0; i + 1 < widths.size(); ++i) {
      const double std = 1.0 / std::sqrt(static_cast<double>(widths[i]));
      w_.push_back(register_parameter(fmt::format("w{}", i), parameter({widths[i + 1], widths[i]}, std, device, gen)));
      b_.push_back(register_parameter(fmt::format("b{}", i),
                                      Tensor::zeros({widths[i + 1]}, DType::F32, device).requires_grad_(), false));
    }
  }

  // x (n, in) in the compute dtype: every layer x W^T + b, SiLU between layers. amp::compute_copy gives the cached
  // low-precision copy of each master, whose gradient is added into the master's FP32 gradient.
  Tensor operator()(Tensor h, DType dtype) const {
    for (size_t i = 0; i < w_.size(); ++i) {
      h = ops::matmul(h, mpt::amp::compute_copy(w_[i], dtype), {.trans_b = true}) +
          mpt::amp::compute_copy(b_[i], dtype);
      if (i + 1 < w_.size()) h = ops::silu(h);
    }
    return h;
  }

 private:
  std::vector<Tensor> w_, b_;  // layer i: w[i] (out, in), b[i] (out); handles sharing the registered parameters
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Fit an MLP to a synthetic nonlinear function with the general ops, in mixed precision."};
  int64_t steps = 1500, batch = 256, hidden = 64, seed = 1;
  double lr = 3e-3, min_r2 = 0;
  std::string dtype_name = "bf16", device_name = "auto";
  app.add_option("--steps", steps, "optimizer steps")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--batch", batch, "samples per step")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--hidden", hidden, "width of the two hidden layers")->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--lr", lr, "AdamW learning rate (cosine decay to 10%)")->check(CLI::PositiveNumber);
  app.add_option("--dtype", dtype_name, "compute dtype (masters stay FP32)")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  app.add_option("--device", device_name, "auto, cpu or cuda");
  app.add_option("--seed", seed, "data and initialisation seed");
  app.add_option("--min-r2", min_r2, "exit with status 1 when the held-out R^2 ends below this (for tests)");
  CLI11_PARSE(app, argc, argv);
  try {
    const mpt::Device device = device_name == "auto" ? mpt::Device::best() : mpt::Device::parse(device_name);
    const DType dtype = dtype_name == "bf16" ? DType::BF16 : dtype_name == "fp16" ? DType::F16 : DType::F32;
    mpt::Generator gen(static_cast<uint64_t>(seed));
    const Batch held_out = make_batch(4096, gen, device);
    Mlp model({8, hidden, hidden, 1}, device, gen);
    // The Trainer owns the step: BF16/FP16 autocast with FP32 masters, the loss scaler FP16 needs (its gradients
    // underflow; BF16 and FP32 get none), AdamW and a cosine decay to 10% of the learning rate.
    mpt::train::Trainer trainer(model, mpt::train::adamw({.lr = lr, .weight_decay = 0.0}),
                                {.policy = mpt::amp::Policy::named(dtype_name, 0, device), .clip = 0,
                                 .schedule = mpt::train::warmup_cosine(
                                     {.max_lr = lr, .min_lr = lr / 10, .warmup_steps = 0, .total_steps = steps})});
    const double variance = ops::var(held_out.y, 0, false, 0).item<double>();
    const auto held_out_mse = [&] {
      return trainer.evaluate(
          [&] { return ops::mse_loss(model(held_out.x.to(dtype), dtype), held_out.y).item<double>(); });
    };
    std::printf("regression: MLP 8 -> %lld -> %lld -> 1 (SiLU), %s compute, FP32 masters, AdamW, %s\n",
                static_cast<long long>(hidden), static_cast<long long>(hidden), dtype_name.c_str(),
                device.str().c_str());
    std::printf("held-out target variance %.4f (the MSE of predicting the mean)\n", variance);
    for (int64_t step = 0; step < steps; ++step) {
      const Batch b = make_batch(batch, gen, device);
      const mpt::train::StepMetrics m = trainer.step([&](int64_t) {
        return ops::mse_loss(model(b.x.to(dtype), dtype), b.y);  // computed in f32
      });
      if (step % (steps / 10 > 0 ? steps / 10 : 1) == 0 || step + 1 == steps) {
        std::printf("step %5lld | train mse %.4f | held-out mse %.4f\n", static_cast<long long>(step),
                    m.loss.item<double>(), held_out_mse());
      }
    }
    const double mse = held_out_mse();
    const double r2 = 1 - mse / variance;
    std::printf("final held-out mse %.4f, R^2 %.3f (noise floor mse %.4f)\n", mse, r2, 0.05 * 0.05);
    if (r2 < min_r2) {
      std::fprintf(stderr, "regression: R^2 %.3f is below --min-r2 %.3f\n", r2, min_r2);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "regression: %s\n", e.what());
    return 1;
  }
  return 0;
}
