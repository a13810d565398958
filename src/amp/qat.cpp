// src/amp/qat.cpp: the named QAT schemes and the per-module QAT lookup.
#include "mpt/amp/qat.h"

#include <fmt/format.h>

#include "amp/module_path.h"
#include "mpt/core/error.h"

namespace mpt::amp {

using ops::QuantFormat;
using ops::QuantGranularity;

QatScheme QatScheme::named(std::string_view name, int64_t group_size) {
  if (name == "int8") {
    return {"int8", ops::QuantSpec{QuantFormat::Int8, QuantGranularity::PerChannel, 0, true},
            ops::QuantSpec{QuantFormat::Int8, QuantGranularity::PerToken, 0, false}};
  }
  if (name == "int4") {
    MPT_CHECK(group_size > 0, "[qat] int4 needs a positive group size, got {}", group_size);
    return {fmt::format("int4-g{}", group_size),
            ops::QuantSpec{QuantFormat::Int4, QuantGranularity::PerGroup, group_size, true}, std::nullopt};
  }
  if (name == "fp8") {
    return {"fp8", ops::QuantSpec{QuantFormat::FP8, QuantGranularity::PerChannel, 0, false},
            ops::QuantSpec{QuantFormat::FP8, QuantGranularity::PerToken, 0, false}};
  }
  MPT_THROW("[qat] unknown scheme '{}': expected int8, int4 or fp8", name);
}

std::optional<QatScheme::Recorded> QatScheme::from_precision(std::string_view precision) {
  const size_t at = precision.find("+qat-");
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = precision.substr(at + 5);
  const size_t plus = rest.find('+');
  const std::string_view name = rest.substr(0, plus);
  const bool lsq = plus != std::string_view::npos && rest.substr(plus) == "+lsq";
  MPT_CHECK(plus == std::string_view::npos || lsq, "[qat] unknown suffix '{}' in the precision '{}'",
            rest.substr(plus), precision);
  if (name.substr(0, 6) == "int4-g") {
    int64_t group = 0;
    for (const char c : name.substr(6)) {
      MPT_CHECK(c >= '0' && c <= '9' && group < (int64_t{1} << 40), "[qat] bad group size in the precision '{}'",
                precision);
      group = group * 10 + (c - '0');
    }
    return Recorded{named("int4", group), lsq};
  }
  return Recorded{named(name), lsq};
}

const QatScheme* QatPolicy::at(std::string_view path) const {
  const std::optional<QatScheme>* best = &all;
  size_t best_len = 0;
  bool found = false;
  for (const auto& [prefix, s] : overrides) {
    if (detail::component_prefix(prefix, path) && (!found || prefix.size() >= best_len)) {
      best = &s, best_len = prefix.size(), found = true;
    }
  }
  return best->has_value() ? &**best : nullptr;
}

QatPolicy QatPolicy::linears_but_head(QatScheme scheme) {
  QatPolicy p{std::move(scheme), {}};
  p.overrides["lm_head"] = std::nullopt;
  return p;
}

}  // namespace mpt::amp
