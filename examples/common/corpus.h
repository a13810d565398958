// examples/common/corpus.h: the token streams a GPT run trains and validates on, their tokenizer, validation loss,
// sampling, and the data position a checkpoint records.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "mpt/core/device.h"
#include "mpt/data/loader.h"
#include "mpt/data/tokenizer.h"
#include "mpt/nn/language_model.h"
#include "run_options.h"

namespace mpt_examples {

struct Corpus {
  std::unique_ptr<mpt::data::Tokenizer> tokenizer;
  std::shared_ptr<const mpt::data::TokenSource> train, val;
  std::string description;  // for the "data:" line
  nlohmann::json identity;  // what a checkpoint records of the data: a resumed run refuses other data
};

// --tokens DIR: mpt-tokenize's files, mapped. Otherwise the text (--data, or the built-in tinyshakespeare) tokenized
// here: by bytes, or by a BPE model trained on its first nine tenths; the last tenth is the validation split.
Corpus load_corpus(const Options& o);

// The mean loss over --eval-batches batches of the validation split: the same windows at every evaluation (a sampler
// seeded with --seed + 1, from its start), the same on every rank. Call it without gradients (Trainer::evaluate).
double validation_loss(const mpt::nn::LanguageModel& model, const Corpus& corpus, const Options& o,
                       mpt::Device device);

// `n` tokens sampled after a newline (temperature 1), decoded. Call it without gradients (Trainer::evaluate).
std::string sample(const mpt::nn::LanguageModel& model, const mpt::data::Tokenizer& tokenizer, int64_t n,
                   mpt::Device device, uint64_t seed);

// A checkpoint's data JSON: the loader's position (of the batches trained on, not the prefetched ones) and the
// corpus's identity. restore_data_state refuses a checkpoint of other data, then moves the loader there.
nlohmann::json data_state(const mpt::data::DataLoader& loader, const Corpus& corpus);
void restore_data_state(const std::string& data_json, const std::string& where, const Corpus& corpus,
                        const Options& o, mpt::data::DataLoader& loader);

}  // namespace mpt_examples
