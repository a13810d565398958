// tests/io/test_checkpoint_crash.cpp: a save SIGKILLed at every crash point leaves a loadable latest checkpoint.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fcntl.h>

#include <csignal>
#include <set>

#include "crash_child_model.h"
#include "io_test_util.h"
#include "mpt/train/checkpoint.h"
#include "test_util.h"

extern char** environ;

using namespace mpt;
using namespace mpt::testing;
namespace fs = std::filesystem;

namespace {

struct ChildResult {
  int status = 0;
  std::string output;
};

// Runs the crash child on `dir` with stdout captured in a file.
ChildResult run_child(const fs::path& dir, int64_t step, int64_t kill_at, int64_t keep, const fs::path& out) {
  const std::vector<std::string> args = {MPT_CRASH_CHILD, dir.string(), std::to_string(step),
                                         std::to_string(kill_at), std::to_string(keep)};
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, MPT_CRASH_CHILD, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "cannot start " << MPT_CRASH_CHILD;
  ChildResult r;
  if (rc == 0) ::waitpid(pid, &r.status, 0);
  r.output = read_bytes(out);
  return r;
}

// The bytes of model.safetensors of a checkpoint.
std::string model_bytes(const fs::path& ckpt) { return read_bytes(ckpt / "model.safetensors"); }

}  // namespace

TEST(CheckpointCrash, KilledAtEverySavePointTheLatestCheckpointStillLoads) {
  TempDir work;
  // References: the complete checkpoints of step 1 and step 2.
  const fs::path ref1 = work / "ref1", ref2 = work / "ref2";
  ASSERT_EQ(run_child(ref1, 1, -1, 0, work / "out").status, 0);
  const ChildResult full = run_child(ref2, 2, -1, 0, work / "out");
  ASSERT_EQ(full.status, 0);
  ASSERT_EQ(full.output.rfind("points ", 0), 0u) << full.output;
  const int64_t points = std::stoll(full.output.substr(7));
  ASSERT_GE(points, 20) << "the model and optimizer files should take several 1 MiB writes each";
  const std::string step1 = model_bytes(ref1 / "step-00000001"), step2 = model_bytes(ref2 / "step-00000002");
  ASSERT_NE(step1, step2);

  std::set<int64_t> latest_steps;
  for (int64_t k = 0; k < points; ++k) {
    SCOPED_TRACE("killed at save point " + std::to_string(k));
    const fs::path dir = work / fmt::format("kill{}", k);
    fs::copy(ref1, dir, fs::copy_options::recursive);
    const ChildResult r = run_child(dir, 2, k, /*keep=*/1, work / "out");
    ASSERT_TRUE(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL) << "status " << r.status << ": " << r.output;

    // latest names a complete checkpoint: step 1, or step 2 once its directory was renamed into place.
    CrashChildRun fresh(0);
    train::TrainingState state = fresh.state();
    const train::CheckpointInfo info = train::load_checkpoint(dir, state);
    ASSERT_TRUE(info.step == 1 || info.step == 2) << info.step;
    latest_steps.insert(info.step);
    EXPECT_EQ(model_bytes(info.path), info.step == 1 ? step1 : step2);
    // Every step-* directory left behind is complete; nothing else but latest and temporaries is there.
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name == "latest" || name.starts_with(".")) continue;
      ASSERT_TRUE(name == "step-00000001" || name == "step-00000002") << name;
      CrashChildRun check(0);
      train::TrainingState s = check.state();
      EXPECT_NO_THROW(train::load_checkpoint(e.path(), s)) << name;
    }
    // The next save cleans up after the killed one.
    ASSERT_EQ(run_child(dir, 3, -1, 1, work / "out").status, 0);
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-00000003"}));
    fs::remove_all(dir);
  }
  EXPECT_EQ(latest_steps, (std::set<int64_t>{1, 2})) << "kills before and after the rename should both occur";
}
