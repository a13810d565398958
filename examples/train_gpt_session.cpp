// examples/train_gpt_session.cpp: signal handlers that request a stop, and the JSONL log cut back to a checkpoint.
#include "train_gpt_session.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mpt/core/error.h"

namespace mpt_examples {
namespace {

volatile std::sig_atomic_t g_stop = 0;

extern "C" void on_stop_signal(int) {
  g_stop = 1;
  static const char msg[] = "\ntrain_gpt: stopping at the end of this step (press Ctrl-C again to quit at once)\n";
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESETHAND;  // the second signal quits
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

bool stop_requested() { return g_stop != 0; }

void truncate_log_for_resume(const std::string& path, int64_t next_step) {
  if (path.empty() || !std::filesystem::exists(path)) return;
  std::ifstream in(path);
  MPT_CHECK(in, "[train_gpt] cannot read the log '{}' to continue it", path);
  std::string kept, line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j.at("step").is_number_integer() && !j.contains("final") &&
        j.at("step").get<int64_t>() < next_step)
      kept += line + "\n";
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    out.flush();
    MPT_CHECK(out, "[train_gpt] cannot write '{}'", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  MPT_CHECK(!ec, "[train_gpt] cannot replace the log '{}': {}", path, ec.message());
}

uint64_t text_fingerprint(std::string_view text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace mpt_examples
