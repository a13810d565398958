// benchmarks/bench_checkpoint.cpp: size and save/load time of a training-state checkpoint, beside raw write+fsync.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench_util.h"
#include "mpt/mpt.h"

namespace {

namespace fs = std::filesystem;

mpt::nn::GPTConfig preset(const std::string& name) {
  mpt::nn::GPTConfig c;
  if (name == "tiny") {  // train_gpt's default model on tinyshakespeare
    c.vocab_size = 65, c.block_size = 128, c.n_layer = 4, c.n_head = 6, c.n_embd = 192;
  } else if (name == "small") {  // GPT-2 small, 124M
    c.vocab_size = 50257, c.block_size = 1024, c.n_layer = 12, c.n_head = 12, c.n_embd = 768;
  } else if (name == "medium") {  // GPT-2 medium, 350M
    c.vocab_size = 50257, c.block_size = 1024, c.n_layer = 24, c.n_head = 16, c.n_embd = 1024;
  } else {
    MPT_THROW("[bench_checkpoint] unknown --preset '{}': expected tiny, small or medium", name);
  }
  return c;
}

struct Run {
  explicit Run(const mpt::nn::GPTConfig& c, mpt::ops::MomentStorage moments)
      : model(c), opt(mpt::optim::weight_decay_groups(model.named_parameters(), 0.1), {.moments = moments}) {
    // One step on a short batch, so that the optimizer holds its moments.
    std::vector<int64_t> ids(16);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i * 7 % static_cast<size_t>(c.vocab_size));
    const mpt::Tensor x = mpt::Tensor::from_vector(ids, {1, 16});
    model.loss(x, x).backward();
    opt.step();
  }
  mpt::train::TrainingState state(int64_t step) {
    return {.model = &model, .optimizer = &opt, .step = step, .precision = "fp32"};
  }
  mpt::nn::GPT model;
  mpt::optim::AdamW opt;
};

// Seconds to write `bytes` with write() in 1 MiB chunks and fsync: the disk's own speed, the baseline.
double raw_write_seconds(const fs::path& path, uint64_t bytes) {
  std::vector<char> buf(1 << 20, 1);
  const auto t0 = std::chrono::steady_clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  MPT_CHECK(fd >= 0, "[bench_checkpoint] cannot create {}", path.string());
  for (uint64_t done = 0; done < bytes; done += buf.size())
    MPT_CHECK(::write(fd, buf.data(), std::min<uint64_t>(buf.size(), bytes - done)) > 0, "write failed");
  ::fsync(fd);
  ::close(fd);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fs::remove(path);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_checkpoint: size and save/load time of a GPT training-state checkpoint (weights + AdamW)"};
  std::string name = "small", moments = "f32", json_path;
  std::string dir = (fs::temp_directory_path() / "mpt_bench_checkpoint").string();
  int reps = 3;
  app.add_option("--preset", name, "model: tiny (train_gpt's default), small (GPT-2 124M), medium (GPT-2 350M)");
  app.add_option("--moments", moments, "AdamW moments: f32 or int8");
  app.add_option("--dir", dir, "where to write (removed afterwards)");
  app.add_option("--reps", reps, "timed repetitions (median)");
  app.add_option("--json", json_path, "also write the results as JSON");
  CLI11_PARSE(app, argc, argv);
  try {
    const mpt::nn::GPTConfig config = preset(name);
    const auto storage = moments == "int8" ? mpt::ops::MomentStorage::Int8 : mpt::ops::MomentStorage::F32;
    Run source(config, storage), target(config, storage);
    fs::remove_all(dir);
    int64_t step = 0;
    fs::path last;
    const double save_s = mpt::bench::median_seconds(reps, [&] {
      last = mpt::train::save_checkpoint(dir, source.state(++step), {.keep = 1});
    });
    const double load_s = mpt::bench::median_seconds(reps, [&] {
      mpt::train::TrainingState s = target.state(0);
      mpt::train::load_checkpoint(dir, s);
    });
    uint64_t total = 0;
    nlohmann::json files = nlohmann::json::object();
    for (const auto& e : fs::directory_iterator(last)) {
      files[e.path().filename().string()] = e.file_size();
      total += e.file_size();
    }
    const double raw_s = mpt::bench::median_seconds(reps, [&] { raw_write_seconds(fs::path(dir) / "raw.bin", total); });
    fs::remove_all(dir);
    const double gb = static_cast<double>(total) / 1e9;
    std::printf("bench_checkpoint: %s (%.1fM parameters), AdamW moments %s, median of %d, %s\n", name.c_str(),
                static_cast<double>(source.model.num_parameters()) / 1e6, moments.c_str(), reps, dir.c_str());
    std::printf("%-26s %12s\n", "file", "bytes");
    for (const auto& [f, bytes] : files.items())
      std::printf("%-26s %12llu\n", f.c_str(), bytes.get<unsigned long long>());
    std::printf("%-26s %12llu\n\n", "total", static_cast<unsigned long long>(total));
    std::printf("%-40s %9s %9s\n", "operation", "seconds", "GB/s");
    std::printf("%-40s %9.3f %9.2f\n", "save_checkpoint (write, fsync, xxh3)", save_s, gb / save_s);
    std::printf("%-40s %9.3f %9.2f\n", "load_checkpoint (read, verify, copy)", load_s, gb / load_s);
    std::printf("%-40s %9.3f %9.2f\n", "baseline: write + fsync of as many bytes", raw_s, gb / raw_s);
    std::printf("save / baseline: %.2fx the time\n", save_s / raw_s);
    const nlohmann::json j = {{"preset", name},        {"parameters", source.model.num_parameters()},
                              {"moments", moments},    {"files", files},
                              {"bytes", total},        {"save_s", save_s},
                              {"load_s", load_s},      {"raw_write_fsync_s", raw_s}};
    std::printf("%s\n", j.dump().c_str());
    if (!json_path.empty()) std::ofstream(json_path) << j.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_checkpoint: %s\n", e.what());
    return 1;
  }
  return 0;
}
