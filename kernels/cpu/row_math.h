// kernels/cpu/row_math.h: vectorised row primitives of softmax-like kernels (max, sum of exp, scaled exp, CE gradient).
#pragma once

#include <cstdint>

namespace mpt::kernels::cpu::rowmath {

// Each primitive exists for float (cloned for AVX-512 and AVX2+FMA, chosen when the library loads) and double
// (the float64 reference path). Elementwise results are the same bits in every clone (the kernels are built
// with -ffp-contract=off and the math uses explicit fma_op); reductions are in a fixed order per clone, so they
// agree across clones to rounding, not bit for bit.

// max_c x[c] (NaN entries are skipped; -inf if every entry is -inf or NaN).
float max(const float* x, int64_t n);
double max(const double* x, int64_t n);

// sum_c exp(x[c] - shift): the float version sums in float, sum_exp_f64 sums float exps in double (so the
// rounding error of a 50k-long vocabulary row stays at float64 level).
float sum_exp(const float* x, int64_t n, float shift);
double sum_exp(const double* x, int64_t n, double shift);
double sum_exp_f64(const float* x, int64_t n, float shift);

// y[c] = exp(x[c] - shift) * mul (y may be x).
void exp_scale(const float* x, float* y, int64_t n, float shift, float mul);
void exp_scale(const double* x, double* y, int64_t n, double shift, double mul);

// Cross-entropy gradient: d[c] = (old ? old[c] : 0) + (exp(x[c] - lse) - [c == target]) * scale; d may alias x or
// old (each element is read before it is written).
void ce_dlogits(const float* x, const float* old, float* d, int64_t n, float lse, int64_t target, float scale);
void ce_dlogits(const double* x, const double* old, double* d, int64_t n, double lse, int64_t target, double scale);

}  // namespace mpt::kernels::cpu::rowmath
