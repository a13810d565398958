// tests/tools/hf_export_model.cpp: writes the test GPT in Hugging Face layout, for tools/make_hf_goldens.py --ours.
#include <cstdio>
#include <exception>

#include "hf_test_model.h"
#include "mpt/nn/hf_gpt2.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: hf_export_model DIR (writes DIR/model.safetensors and DIR/config.json)\n");
    return 2;
  }
  try {
    mpt::nn::save_hf_gpt2(argv[1], *mpt::testing::make_hf_test_model());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_export_model: %s\n", e.what());
    return 1;
  }
  std::printf("wrote %s/model.safetensors and %s/config.json\n", argv[1], argv[1]);
  return 0;
}
