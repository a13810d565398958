// src/data/sampler_state.h: reading a sampler's saved state: its kind and version, the fields that must match, where.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "mpt/core/error.h"
#include "mpt/data/sampler.h"

namespace mpt::data::detail {

// Parses a state written by a sampler's state_json() ({"sampler": kind, "version": 1, ..., "epoch", "index"}), checks
// its kind and version, lets `fields` compare the saved run's settings with this one's through
// check(key, mine, hint) (each mismatch an mpt::Error "[op] the saved state has KEY SAVED, this run MINE: HINT"), and
// returns the saved position. Malformed JSON or a missing key is an mpt::Error naming the problem.
template <class Fields>
SamplerPosition read_sampler_state(std::string_view text, std::string_view kind, const char* op, Fields&& fields) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    MPT_CHECK(j.at("sampler").get<std::string>() == kind && j.at("version").get<int>() == 1,
              "[{}] the saved state is of sampler '{}' version {}; expected '{}' version 1", op,
              j.at("sampler").get<std::string>(), j.at("version").get<int>(), kind);
    const auto check = [&](const char* key, auto mine, const char* hint) {
      const auto saved = j.at(key).get<decltype(mine)>();
      MPT_CHECK(saved == mine, "[{}] the saved state has {} {}, this run {}: {}", op, key, saved, mine, hint);
    };
    fields(check);
    return {j.at("epoch").get<int64_t>(), j.at("index").get<int64_t>()};
  } catch (const nlohmann::json::exception& e) {
    MPT_THROW("[{}] the saved state is not valid: {}", op, e.what());
  }
}

}  // namespace mpt::data::detail
