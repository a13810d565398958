// tests/tools/dist_timeout.cpp: under mpirun, rank 0 all-reduces while the others never do (MODE=mismatch) or die
// (MODE=killed): rank 0's wait() must end with an mpt::Error naming the collective and the rank, within its timeout.
// MODE=debug (MPT_DIST_DEBUG=1): rank 1 all-reduces a smaller tensor; both ranks name the disagreement at once.
// MODE=dp: rank 1 skips a DataParallel backward: rank 0's finish() names the bucket, the collective and the rank.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "mpt/train/data_parallel.h"
#include "mpt/nn/gpt.h"

int main(int argc, char** argv) {
  const bool killed = argc > 1 && std::strcmp(argv[1], "killed") == 0;
  const bool debug = argc > 1 && std::strcmp(argv[1], "debug") == 0;
  const auto w = mpt::dist::world();
  w->set_timeout(std::chrono::milliseconds(1500));
  mpt::Tensor t = mpt::Tensor::ones({1024});
  w->all_reduce(t, mpt::dist::ReduceOp::Sum)->wait();  // one that completes: the job is set up
  if (argc > 1 && std::strcmp(argv[1], "dp") == 0) {
    mpt::nn::GPTConfig c;
    c.vocab_size = 16, c.block_size = 8, c.n_layer = 1, c.n_head = 2, c.n_embd = 16;
    mpt::nn::GPT model(c);
    mpt::train::DataParallel dp(model, w);
    if (w->rank() == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(4));  // never runs the step
      std::_Exit(0);
    }
    const mpt::Tensor x = mpt::Tensor::zeros({1, 8}, mpt::DType::I64);
    try {
      model.loss(x, x).backward();
      dp.finish();
      std::printf("rank 0: finish() returned without rank 1\n");
      std::_Exit(1);
    } catch (const std::exception& e) {
      std::printf("rank 0: %s\n", e.what());
      std::fflush(stdout);
      std::_Exit(0);
    }
  }
  if (debug) {
    mpt::Tensor mine = mpt::Tensor::ones({w->rank() == 1 ? 512 : 1024});
    try {
      w->all_reduce(mine, mpt::dist::ReduceOp::Sum)->wait();
      std::printf("rank %d: the mismatched all_reduce was not caught\n", w->rank());
      std::_Exit(1);
    } catch (const std::exception& e) {
      std::printf("rank %d: %s\n", w->rank(), e.what());
      std::fflush(stdout);
      std::_Exit(0);
    }
  }
  if (w->rank() != 0) {
    if (killed) ::kill(::getpid(), SIGKILL);
    std::this_thread::sleep_for(std::chrono::seconds(4));  // never joins the second all_reduce
    std::_Exit(0);
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    w->all_reduce(t, mpt::dist::ReduceOp::Sum)->wait();
    std::printf("rank 0: the second all_reduce completed, which it cannot\n");
    std::_Exit(1);
  } catch (const std::exception& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("rank 0 after %.1f s: %s\n", s, e.what());
    std::fflush(stdout);
    std::_Exit(s < 10 ? 0 : 1);
  }
}
