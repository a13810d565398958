// src/ops/optim.cpp: multi-tensor AdamW / SGD steps, the AMP unscale check and the multi-tensor scale and add:
// checks, one dtype dispatch per call, then the CPU kernel or the CUDA launcher over the whole list.
#include "mpt/ops/optim.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/optim.h"
#include "mpt/ops/elementwise.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/optim.h"
#include "kernels/cuda/reduction.h"
#endif

namespace mpt::ops {

namespace {

namespace km = kernels::math;

// Calls f(T{}) for the gradient dtypes the optimizer kernels read.
template <class F>
decltype(auto) visit_grad(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::BF16: return f(bf16{});
    case DType::F16: return f(f16{});
    default: break;
  }
  MPT_THROW("[{}] expected f32, bf16 or f16 gradients for f32 parameters, got {}", op, t);
}

void check_in_place(const Tensor& t, Device dev, const char* what, int64_t i, const char* op) {
  MPT_CHECK(t.defined(), "[{}] slot {}: {} is an undefined tensor", op, i, what);
  MPT_CHECK(t.device() == dev, "[{}] slot {}: {} is {}, expected a tensor on {}", op, i, what, t.meta_str(), dev.str());
  MPT_CHECK(t.is_contiguous(), "[{}] slot {}: {} must be contiguous (updated in place), got strides {}", op, i, what,
            shape_str(t.strides()));
}

void check_tensor(const Tensor& t, Device dev, DType dtype, const Shape& shape, const char* what, int64_t i,
                  const char* op) {
  check_in_place(t, dev, what, i, op);
  MPT_CHECK(t.dtype() == dtype, "[{}] slot {}: {} must be {}, got {}", op, i, what, dtype, t.meta_str());
  MPT_CHECK(t.shape() == shape, "[{}] slot {}: {} must have shape {}, got {}", op, i, what, shape_str(shape),
            t.meta_str());
}

void check_scalar(const Tensor& t, Device dev, const char* what, const char* op) {
  MPT_CHECK(t.dtype() == DType::F32 && t.numel() == 1 && t.device() == dev,
            "[{}] {} must be an f32 tensor with one element on {}, got {}", op, what, dev.str(), t.meta_str());
}

km::StepGuards guards_of(const GradScaling& s, Device dev, const char* op) {
  km::StepGuards g;
  if (s.grad_scale_inv.defined()) {
    check_scalar(s.grad_scale_inv, dev, "grad_scale_inv", op);
    g.grad_scale_inv = static_cast<const float*>(s.grad_scale_inv.data_ptr());
  }
  if (s.found_inf.defined()) {
    check_scalar(s.found_inf, dev, "found_inf", op);
    g.found_inf = static_cast<const float*>(s.found_inf.data_ptr());
  }
  return g;
}

void check_hyper(bool ok, const char* what, double value, const char* op) {
  MPT_CHECK(ok && std::isfinite(value), "[{}] invalid {}: {}", op, what, value);
}

// The dtypes of one call, taken from slot 0; every slot must match them.
struct CallTypes {
  Device dev;
  DType param, grad;
};

template <class Slot>
CallTypes call_types(std::span<const Slot> slots, const char* op) {
  const Slot& s = slots[0];
  MPT_CHECK(s.param.defined() && s.grad.defined(), "[{}] slot 0: param and grad must be defined", op);
  const DType p = s.param.dtype();
  MPT_CHECK(p == DType::F32 || (p == DType::F64 && s.param.device().is_cpu()),
            "[{}] parameters must be f32 (or f64 on the CPU), got {}", op, s.param.meta_str());
  return {s.param.device(), p, s.grad.dtype()};
}

template <class Slot>
void check_param_grad(const Slot& s, const CallTypes& types, int64_t i, const char* op) {
  check_in_place(s.param, types.dev, "param", i, op);
  MPT_CHECK(s.param.dtype() == types.param, "[{}] slot {}: param must be {} like slot 0, got {}", op, i, types.param,
            s.param.meta_str());
  MPT_CHECK(s.grad.defined(), "[{}] slot {}: grad is an undefined tensor", op, i);
  MPT_CHECK(s.grad.device() == types.dev, "[{}] slot {}: grad is {}, expected a tensor on {}", op, i,
            s.grad.meta_str(), types.dev.str());
  MPT_CHECK(s.grad.dtype() == types.grad, "[{}] slot {}: grad must be {} like slot 0, got {}", op, i, types.grad,
            s.grad.meta_str());
  MPT_CHECK(s.grad.shape() == s.param.shape(), "[{}] slot {}: grad must have shape {}, got {}", op, i,
            shape_str(s.param.shape()), s.grad.meta_str());
}

int64_t absmax_blocks(int64_t n) { return (n + km::kQuantBlock - 1) / km::kQuantBlock; }

void check_state(const AdamWState& st, const Tensor& param, MomentStorage storage, DType moment_dtype, Device dev,
                 int64_t i, const char* op) {
  MPT_CHECK(st.exp_avg.defined() && moment_storage(st) == storage,
            "[{}] slot {}: all slots must use the moment storage of slot 0", op, i);
  if (storage == MomentStorage::Int8) {
    check_tensor(st.exp_avg, dev, DType::U8, param.shape(), "exp_avg", i, op);
    check_tensor(st.exp_avg_sq, dev, DType::U8, param.shape(), "exp_avg_sq", i, op);
    const Shape blocks{absmax_blocks(param.numel())};
    check_tensor(st.exp_avg_absmax, dev, DType::F32, blocks, "exp_avg_absmax", i, op);
    check_tensor(st.exp_avg_sq_absmax, dev, DType::F32, blocks, "exp_avg_sq_absmax", i, op);
  } else {
    check_tensor(st.exp_avg, dev, moment_dtype, param.shape(), "exp_avg", i, op);
    check_tensor(st.exp_avg_sq, dev, moment_dtype, param.shape(), "exp_avg_sq", i, op);
  }
}

// A slot's FP8 codes (AdamWSlot::Fp8Codes), when it has them.
void check_fp8_codes(const AdamWSlot& s, const CallTypes& types, int64_t i, const char* op) {
  const AdamWSlot::Fp8Codes& f = s.fp8;
  if (!f.codes.defined() && !f.scale.defined() && !f.amax.defined() && !f.scale_inv.defined()) return;
  MPT_CHECK(types.param == DType::F32 && f.codes.defined() && f.codes.dtype() == DType::F8E4M3 &&
                f.codes.device() == types.dev && f.codes.is_contiguous() && f.codes.numel() == s.param.numel(),
            "[{}] parameter {}: FP8 codes must be a contiguous f8e4m3 tensor of the f32 parameter's {} elements on {}, "
            "got {} beside {}", op, i, s.param.numel(), types.dev, f.codes.defined() ? f.codes.meta_str() : "none",
            s.param.meta_str());
  for (const auto& [t, what] : {std::pair{&f.scale, "scale"}, {&f.amax, "amax"}, {&f.scale_inv, "scale_inv"}}) {
    MPT_CHECK(t->defined(), "[{}] parameter {}: FP8 codes need their {} (an f32 tensor with one element)", op, i,
              what);
    check_scalar(*t, types.dev, what, op);
  }
  MPT_CHECK(f.amax.data_ptr() != f.scale.data_ptr() && f.scale_inv.data_ptr() != f.scale.data_ptr() &&
                f.amax.data_ptr() != f.scale_inv.data_ptr(),
            "[{}] parameter {}: the FP8 codes' scale, amax and scale_inv must be three different elements", op, i);
}

// The slots' step counts: all defined (0-d i64 on dev) or none; a null pointer per slot when none.
template <class Slot>
std::vector<int64_t*> step_counts(std::span<const Slot> slots, Device dev, const char* op) {
  const bool with = slots[0].step.defined();
  std::vector<int64_t*> out;
  for (size_t i = 0; i < slots.size(); ++i) {
    const Tensor& t = slots[i].step;
    MPT_CHECK(t.defined() == with, "[{}] slot {}: give every slot a step count or none (slot 0 {})", op, i,
              with ? "has one" : "has none");
    if (with) {
      MPT_CHECK(t.dtype() == DType::I64 && t.numel() == 1 && t.device() == dev,
                "[{}] slot {}: step must be an i64 tensor with one element on {}, got {}", op, i, dev.str(),
                t.meta_str());
    }
    out.push_back(with ? static_cast<int64_t*>(t.data_ptr()) : nullptr);
  }
  return out;
}

template <class P, class G, class M>
void run_adamw(std::span<const AdamWSlot> slots, const std::vector<Tensor>& grads, Device dev,
               const km::AdamWHyper& h, int64_t step, km::StepGuards guards) {
  const std::vector<int64_t*> steps = step_counts(slots, dev, "adamw_step");
  std::vector<km::AdamWTensor<P, G, M>> ts;
  ts.reserve(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    const AdamWSlot& s = slots[i];
    const bool q = std::is_same_v<M, uint8_t>;
    ts.push_back({s.param.data<P>(), grads[i].data<G>(), s.state.exp_avg.data<M>(), s.state.exp_avg_sq.data<M>(),
                  q ? s.state.exp_avg_absmax.data<float>() : nullptr,
                  q ? s.state.exp_avg_sq_absmax.data<float>() : nullptr, s.param.numel(), steps[i]});
    const Tensor& copy = s.compute_copy;
    if (copy.defined() && copy.dtype() == DType::BF16) ts.back().copy_bf16 = copy.data<bf16>();
    if (copy.defined() && copy.dtype() == DType::F16) ts.back().copy_f16 = copy.data<f16>();
    if constexpr (std::is_same_v<P, float>) {
      if (s.fp8.codes.defined()) {
        auto& t = ts.back();
        t.codes = s.fp8.codes.data<f8e4m3>();
        t.code_scale = s.fp8.scale.data<float>();
        t.code_amax = s.fp8.amax.data<float>();
        t.code_scale_inv = s.fp8.scale_inv.data<float>();
      }
    }
  }
  if (dev.is_cpu()) {
    kernels::cpu::adamw_step(ts.data(), static_cast<int64_t>(ts.size()), h, step, guards);
  } else if constexpr (std::is_same_v<P, float>) {
    MPT_CUDA_KERNEL(kernels::cuda::adamw_step(ts.data(), static_cast<int64_t>(ts.size()), h, step, guards,
                                              static_cast<cudaStream_t>(detail::stream_of(dev))));
  }
}

}  // namespace

MomentStorage moment_storage(const AdamWState& state) {
  MPT_CHECK(state.exp_avg.defined(), "[adamw_state] the state has no exp_avg tensor");
  switch (state.exp_avg.dtype()) {
    case DType::U8: return MomentStorage::Int8;
    case DType::BF16: return MomentStorage::BF16;
    default: return MomentStorage::F32;
  }
}

AdamWState adamw_state(const Tensor& param, MomentStorage storage) {
  MPT_CHECK(param.defined(), "[adamw_state] param is an undefined tensor");
  const Device dev = param.device();
  if (param.dtype() == DType::F64) {
    MPT_CHECK(storage == MomentStorage::F32, "[adamw_state] f64 parameters keep f64 moments; bf16 and 8-bit moments "
              "need f32 parameters, got {}", param.meta_str());
    return {Tensor::zeros(param.shape(), DType::F64, dev), Tensor::zeros(param.shape(), DType::F64, dev), {}, {}};
  }
  MPT_CHECK(param.dtype() == DType::F32, "[adamw_state] parameters must be f32 (or f64), got {}", param.meta_str());
  switch (storage) {
    case MomentStorage::F32:
    case MomentStorage::BF16: {
      const DType dt = storage == MomentStorage::F32 ? DType::F32 : DType::BF16;
      return {Tensor::zeros(param.shape(), dt, dev), Tensor::zeros(param.shape(), dt, dev), {}, {}};
    }
    case MomentStorage::Int8: {
      const Shape blocks{absmax_blocks(param.numel())};
      return {Tensor::zeros(param.shape(), DType::U8, dev), Tensor::zeros(param.shape(), DType::U8, dev),
              Tensor::zeros(blocks, DType::F32, dev), Tensor::zeros(blocks, DType::F32, dev)};
    }
  }
  MPT_THROW("[adamw_state] unknown moment storage");
}

void adamw_step(std::span<const AdamWSlot> slots, const AdamWParams& hp, const GradScaling& scaling) {
  constexpr const char* op = "adamw_step";
  check_hyper(hp.lr >= 0, "learning rate", hp.lr, op);
  check_hyper(hp.eps >= 0, "epsilon", hp.eps, op);
  check_hyper(hp.beta1 >= 0 && hp.beta1 < 1, "beta1", hp.beta1, op);
  check_hyper(hp.beta2 >= 0 && hp.beta2 < 1, "beta2", hp.beta2, op);
  check_hyper(hp.weight_decay >= 0, "weight_decay", hp.weight_decay, op);
  MPT_CHECK(hp.step >= 1, "[{}] step counts from 1, got {}", op, hp.step);
  if (slots.empty()) return;
  const CallTypes types = call_types(slots, op);
  const MomentStorage storage = moment_storage(slots[0].state);
  MPT_CHECK(types.param == DType::F32 || storage == MomentStorage::F32,
            "[{}] f64 parameters keep f64 moments (bf16 and 8-bit moments need f32 parameters)", op);
  const DType moment_dtype = types.param == DType::F64 ? DType::F64
                             : storage == MomentStorage::BF16 ? DType::BF16 : DType::F32;
  std::vector<Tensor> grads;
  grads.reserve(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    check_param_grad(slots[i], types, static_cast<int64_t>(i), op);
    check_state(slots[i].state, slots[i].param, storage, moment_dtype, types.dev, static_cast<int64_t>(i), op);
    if (const Tensor& c = slots[i].compute_copy; c.defined()) {
      MPT_CHECK(types.param == DType::F32 && (c.dtype() == DType::BF16 || c.dtype() == DType::F16) &&
                    c.device() == types.dev && c.is_contiguous() && c.numel() >= slots[i].param.numel() &&
                    !c.shares_storage(slots[i].param),
                "[{}] parameter {}: a compute copy must be a contiguous bf16/f16 tensor of at least the f32 "
                "parameter's {} elements on {}, got {} beside {}", op, i, slots[i].param.numel(), types.dev,
                c.meta_str(), slots[i].param.meta_str());
    }
    check_fp8_codes(slots[i], types, static_cast<int64_t>(i), op);
    grads.push_back(slots[i].grad.contiguous());
  }
  const km::StepGuards guards = guards_of(scaling, types.dev, op);
  MPT_CHECK(hp.lr_wd_device == nullptr || types.dev.is_cuda(), "[{}] lr_wd_device is for CUDA parameters, these are "
            "on {}", op, types.dev);
  const km::AdamWHyper h{hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, hp.lr_wd_device};
  const int64_t st = hp.step;
  if (types.param == DType::F64) {
    MPT_CHECK(types.grad == DType::F64, "[{}] f64 parameters need f64 gradients, got {}", op, types.grad);
    return run_adamw<double, double, double>(slots, grads, types.dev, h, st, guards);
  }
  visit_grad(types.grad, op, [&](auto tag) {
    using G = decltype(tag);
    switch (storage) {
      case MomentStorage::F32: return run_adamw<float, G, float>(slots, grads, types.dev, h, st, guards);
      case MomentStorage::BF16: return run_adamw<float, G, bf16>(slots, grads, types.dev, h, st, guards);
      case MomentStorage::Int8: return run_adamw<float, G, uint8_t>(slots, grads, types.dev, h, st, guards);
    }
  });
}

void sgd_step(std::span<const SgdSlot> slots, const SgdParams& hp, const GradScaling& scaling) {
  constexpr const char* op = "sgd_step";
  check_hyper(hp.lr >= 0, "learning rate", hp.lr, op);
  check_hyper(hp.momentum >= 0, "momentum", hp.momentum, op);
  check_hyper(true, "dampening", hp.dampening, op);
  check_hyper(hp.weight_decay >= 0, "weight_decay", hp.weight_decay, op);
  MPT_CHECK(!hp.nesterov || (hp.momentum > 0 && hp.dampening == 0),
            "[{}] nesterov momentum requires a momentum and zero dampening", op);
  if (slots.empty()) return;
  const CallTypes types = call_types(slots, op);
  const bool with_buffer = hp.momentum != 0;
  std::vector<Tensor> grads;
  grads.reserve(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    const auto k = static_cast<int64_t>(i);
    check_param_grad(slots[i], types, k, op);
    if (with_buffer) {
      check_tensor(slots[i].momentum_buffer, types.dev, types.param, slots[i].param.shape(), "momentum_buffer", k, op);
    }
    grads.push_back(slots[i].grad.contiguous());
  }
  const km::StepGuards guards = guards_of(scaling, types.dev, op);
  const km::SgdCoefficients<double> c{hp.lr, hp.momentum, 1 - hp.dampening, hp.weight_decay, hp.nesterov,
                                      hp.first_step};
  const std::vector<int64_t*> steps = step_counts(slots, types.dev, op);
  auto run = [&](auto ptag, auto gtag) {
    using P = decltype(ptag);
    using G = decltype(gtag);
    std::vector<km::SgdTensor<P, G>> ts;
    ts.reserve(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) {
      ts.push_back({slots[i].param.data<P>(), grads[i].data<G>(),
                    with_buffer ? slots[i].momentum_buffer.data<P>() : nullptr, slots[i].param.numel(), steps[i]});
    }
    if (types.dev.is_cpu()) {
      kernels::cpu::sgd_step(ts.data(), static_cast<int64_t>(ts.size()), c, guards);
    } else if constexpr (std::is_same_v<P, float>) {
      MPT_CUDA_KERNEL(kernels::cuda::sgd_step(ts.data(), static_cast<int64_t>(ts.size()), c, guards,
                                              static_cast<cudaStream_t>(detail::stream_of(types.dev))));
    }
  };
  if (types.param == DType::F64) {
    MPT_CHECK(types.grad == DType::F64, "[{}] f64 parameters need f64 gradients, got {}", op, types.grad);
    return run(double{}, double{});
  }
  visit_grad(types.grad, op, [&](auto gtag) { run(float{}, gtag); });
}

void non_finite_check_and_unscale_(std::span<const Tensor> grads, const Tensor& found_inf, const Tensor& inv_scale) {
  constexpr const char* op = "non_finite_check_and_unscale_";
  MPT_CHECK(found_inf.defined() && inv_scale.defined(), "[{}] found_inf and inv_scale must be defined", op);
  const Device dev = found_inf.device();
  check_scalar(found_inf, dev, "found_inf", op);
  check_scalar(inv_scale, dev, "inv_scale", op);
  if (grads.empty()) return;
  const DType dt = grads[0].defined() ? grads[0].dtype() : DType::F32;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < grads.size(); ++i) {
    check_in_place(grads[i], dev, "grad", static_cast<int64_t>(i), op);
    MPT_CHECK(grads[i].dtype() == dt, "[{}] slot {}: grad must be {} like slot 0, got {}", op, i, dt,
              grads[i].meta_str());
    sizes.push_back(grads[i].numel());
  }
  detail::visit_float(dt, op, [&](auto tag) {
    using G = decltype(tag);
    std::vector<G*> ptrs;
    for (const Tensor& g : grads) ptrs.push_back(g.data<G>());
    const auto* inv = static_cast<const float*>(inv_scale.data_ptr());
    auto* found = static_cast<float*>(found_inf.data_ptr());
    if (dev.is_cpu()) {
      kernels::cpu::unscale_check(ptrs.data(), sizes.data(), static_cast<int64_t>(ptrs.size()), inv, found);
    } else if constexpr (!std::is_same_v<G, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::unscale_check(ptrs.data(), sizes.data(), static_cast<int64_t>(ptrs.size()), inv,
                                                   found, static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  });
}

void amp_update_scale_(const Tensor& scale, const Tensor& inv, const Tensor& trackers,
                       std::span<const Tensor> found_infs, const ScaleUpdateParams& p) {
  constexpr const char* op = "amp_update_scale_";
  MPT_CHECK(scale.defined() && inv.defined() && trackers.defined(), "[{}] scale, inv and trackers must be defined", op);
  const Device dev = scale.device();
  check_scalar(scale, dev, "scale", op);
  check_scalar(inv, dev, "inv", op);
  MPT_CHECK(trackers.dtype() == DType::I32 && trackers.numel() == 3 && trackers.device() == dev &&
                trackers.is_contiguous(),
            "[{}] trackers must be a contiguous i32 tensor of 3 elements on {}, got {}", op, dev.str(),
            trackers.meta_str());
  MPT_CHECK(!found_infs.empty() && found_infs.size() <= 8, "[{}] expected 1 to 8 found_inf flags, got {}", op,
            found_infs.size());
  std::vector<const float*> found;
  for (const Tensor& f : found_infs) {
    check_scalar(f, dev, "found_inf", op);
    found.push_back(static_cast<const float*>(f.data_ptr()));
  }
  const km::ScalerUpdate u{p.growth_factor, p.backoff_factor, p.min_scale, static_cast<int32_t>(p.growth_interval),
                           static_cast<int32_t>(p.hysteresis)};
  auto* s = static_cast<float*>(scale.data_ptr());
  auto* i = static_cast<float*>(inv.data_ptr());
  auto* t = static_cast<int32_t*>(trackers.data_ptr());
  if (dev.is_cpu()) {
    kernels::cpu::grad_scaler_update(u, found.data(), static_cast<int64_t>(found.size()), s, i, t);
    return;
  }
  MPT_CUDA_KERNEL(kernels::cuda::grad_scaler_update(u, found.data(), static_cast<int64_t>(found.size()), s, i, t,
                                                    static_cast<cudaStream_t>(detail::stream_of(dev))));
}

Tensor clip_coefficient(const Tensor& total, double max_norm) {
  constexpr const char* op = "clip_coefficient";
  MPT_CHECK(total.defined() && total.numel() == 1 && (total.dtype() == DType::F32 || total.dtype() == DType::F64),
            "[{}] the norm must be an f32 or f64 tensor with one element, got {}", op,
            total.defined() ? total.meta_str() : std::string("undefined"));
  MPT_CHECK(max_norm >= 0, "[{}] max_norm must be >= 0, got {}", op, max_norm);
  const Device dev = total.device();
  if (dev.is_cpu()) {
    const Tensor t = total.contiguous();
    if (t.dtype() == DType::F64) return Tensor::full({}, km::clip_coefficient(*t.data<double>(), max_norm), DType::F64);
    return Tensor::full({}, km::clip_coefficient(*t.data<float>(), static_cast<float>(max_norm)), DType::F32);
  }
  MPT_CHECK(total.dtype() == DType::F32, "[{}] f64 is CPU-only, got {}", op, total.meta_str());
  Tensor coef = Tensor::empty({}, DType::F32, dev);
  MPT_CUDA_KERNEL(kernels::cuda::clip_coefficient(static_cast<const float*>(total.contiguous().data_ptr()),
                                                  static_cast<float>(max_norm), coef.data<float>(),
                                                  static_cast<cudaStream_t>(detail::stream_of(dev))));
  return coef;
}

void mul_(std::span<const Tensor> tensors, const Tensor& factor) {
  constexpr const char* op = "mul_";
  MPT_CHECK(factor.defined(), "[{}] the factor is undefined", op);
  if (tensors.empty()) return;
  if (factor.dtype() == DType::F64) {  // the CPU reference path
    const double f = factor.item<double>();
    for (size_t i = 0; i < tensors.size(); ++i) {
      check_in_place(tensors[i], Device::cpu(), "tensor", static_cast<int64_t>(i), op);
      MPT_CHECK(tensors[i].dtype() == DType::F64, "[{}] an f64 factor scales f64 tensors, got {}", op,
                tensors[i].meta_str());
      if (f != 1.0) Tensor(tensors[i]).copy_(scale(tensors[i], f));
    }
    return;
  }
  // The fused unscale kernel multiplies by a device scalar and keeps the bits for 1; its inf flag is not needed.
  // One launch per gradient dtype.
  const Tensor unused = Tensor::zeros({}, DType::F32, factor.device());
  std::vector<std::pair<DType, std::vector<Tensor>>> by_dtype;
  for (const Tensor& t : tensors) {
    MPT_CHECK(t.defined(), "[{}] an undefined tensor", op);
    auto it = std::find_if(by_dtype.begin(), by_dtype.end(), [&](const auto& b) { return b.first == t.dtype(); });
    if (it == by_dtype.end()) it = by_dtype.insert(by_dtype.end(), {t.dtype(), {}});
    it->second.push_back(t);
  }
  for (const auto& [dtype, list] : by_dtype) non_finite_check_and_unscale_(list, unused, factor);
}

void add_(std::span<const Tensor> dst, std::span<const Tensor> src) {
  constexpr const char* op = "foreach add_";
  MPT_CHECK(dst.size() == src.size(), "[{}] {} tensors to add into but {} to add", op, dst.size(), src.size());
  if (dst.empty()) return;
  MPT_CHECK(dst[0].defined(), "[{}] slot 0: dst is an undefined tensor", op);
  const Device dev = dst[0].device();
  std::vector<Tensor> sources;
  sources.reserve(src.size());
  // Byte ranges, to refuse a write that overlaps any other range (the launch runs every pair at once): a dst another
  // pair writes or reads. Sources may overlap each other.
  struct Range {
    uintptr_t begin, end;
    bool write;
    size_t slot;
  };
  std::vector<Range> ranges;
  for (size_t i = 0; i < dst.size(); ++i) {
    const auto k = static_cast<int64_t>(i);
    check_in_place(dst[i], dev, "dst", k, op);
    MPT_CHECK(src[i].defined(), "[{}] slot {}: src is an undefined tensor", op, k);
    sources.push_back(src[i].contiguous());
    check_tensor(sources.back(), dev, dst[i].dtype(), dst[i].shape(), "src", k, op);
    MPT_CHECK(!autograd::any_requires_grad({&dst[i], &src[i]}),
              "[{}] slot {}: in-place updates are not recorded by autograd, and {} or {} requires grad", op, k,
              dst[i].meta_str(), src[i].meta_str());
    MPT_CHECK(dev.is_cpu() || dst[i].dtype() != DType::F64, "[{}] slot {}: f64 is CPU-only, got {}", op, k,
              dst[i].meta_str());
    if (dst[i].numel() == 0) continue;
    const auto d = reinterpret_cast<uintptr_t>(dst[i].data_ptr());
    const auto s = reinterpret_cast<uintptr_t>(sources.back().data_ptr());
    ranges.push_back({d, d + dst[i].nbytes(), true, i});
    ranges.push_back({s, s + sources.back().nbytes(), false, i});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  const Range* reach = nullptr;        // the range reaching furthest so far
  const Range* write_reach = nullptr;  // the written range reaching furthest so far
  for (const Range& r : ranges) {
    const Range* hit = r.write ? (reach != nullptr && r.begin < reach->end ? reach : nullptr)
                               : (write_reach != nullptr && r.begin < write_reach->end ? write_reach : nullptr);
    MPT_CHECK(hit == nullptr, "[{}] slot {}'s {} overlaps slot {}'s {}: each dst must be memory no other tensor of the "
              "call reads or writes", op, r.slot, r.write ? "dst" : "src", hit->slot, hit->write ? "dst" : "src");
    if (reach == nullptr || r.end > reach->end) reach = &r;
    if (r.write && (write_reach == nullptr || r.end > write_reach->end)) write_reach = &r;
  }
  // One launch per dtype, the pairs of each in order.
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
    std::vector<void*> ds;
    std::vector<const void*> ss;
    std::vector<int64_t> ns;
    for (size_t i = 0; i < dst.size(); ++i) {
      if (dst[i].dtype() != dt) continue;
      ds.push_back(dst[i].data_ptr()), ss.push_back(sources[i].data_ptr()), ns.push_back(dst[i].numel());
    }
    if (ds.empty()) continue;
    detail::visit_float(dt, op, [&](auto tag) {
      using G = decltype(tag);
      auto* d = reinterpret_cast<G* const*>(ds.data());
      auto* s = reinterpret_cast<const G* const*>(ss.data());
      const auto m = static_cast<int64_t>(ds.size());
      if (dev.is_cpu()) {
        kernels::cpu::add_multi(d, s, ns.data(), m);
      } else if constexpr (!std::is_same_v<G, double>) {
        MPT_CUDA_KERNEL(
            kernels::cuda::add_multi(d, s, ns.data(), m, static_cast<cudaStream_t>(detail::stream_of(dev))));
      }
    });
  }
}

Tensor dynamic_quantization_map(bool is_signed) {
  const float* code = is_signed ? km::kDynamicMapSigned : km::kDynamicMapUnsigned;
  return Tensor::from_vector(std::vector<float>(code, code + 256), {256});
}

}  // namespace mpt::ops
