// tests/gpu/test_loader_gpu.cpp: DataLoader delivering to cuda:0: the CPU loader's batches, each one asynchronous
// copy out of page-locked memory on the current stream, and no synchronisation of the step's stream.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "device_test.h"
#include "io_test_util.h"
#include "mpt/data/loader.h"
#if defined(MPT_CUDA_EMULATION)
#include "cuda_emu/counters.h"
#endif

namespace mpt {
namespace {

TEST(GpuDataLoader, DeliversTheCpuBatchesWithOneAsyncCopyEach) {
  MPT_REQUIRE_GPU(7);
  testing::TempDir dir;
  std::vector<int32_t> ids(30000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 40503u) % 1000);
  data::write_token_file(dir / "d.tok", ids, 1000);
  const auto file = std::make_shared<const data::TokenFile>(dir / "d.tok");
  data::LoaderOptions o{.batch = 4, .seq = 64, .seed = 3, .prefetch = 2};
  data::DataLoader cpu(file, o);
  o.device = Device::cuda(0);
  data::DataLoader gpu(file, o);
  for (int i = 0; i < 12; ++i) {
#if defined(MPT_CUDA_EMULATION)
    cuda_emu::reset_counters();
#endif
    const data::Batch g = gpu.next();
#if defined(MPT_CUDA_EMULATION)
    const cuda_emu::Counters c = cuda_emu::counters();
    EXPECT_EQ(c.h2d, 1u) << "batch " << i;
    EXPECT_EQ(c.h2d_bytes, 2u * 4 * 64 * 8) << "batch " << i;
    EXPECT_EQ(c.pageable_copies + c.sync_copies + c.stream_syncs + c.device_syncs, 0u) << cuda_emu::to_string(c);
#endif
    const data::Batch w = cpu.next();
    ASSERT_TRUE(g.x.device().is_cuda());
    EXPECT_TRUE(testing::same_bits(testing::to_cpu(g.x), w.x)) << "batch " << i;
    EXPECT_TRUE(testing::same_bits(testing::to_cpu(g.y), w.y)) << "batch " << i;
  }
  EXPECT_EQ(gpu.state_json(), cpu.state_json());
}

}  // namespace
}  // namespace mpt
