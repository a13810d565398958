// tests/data/test_loader.cpp: DataLoader's batches against the windows its sampler names, read from the ids written
// (not through the loader), whatever the prefetch depth; its checkpoint position; errors from the worker.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "io_test_util.h"
#include "mpt/data/loader.h"
#include "test_util.h"

namespace mpt {
namespace {

using data::DataLoader;
using data::LoaderOptions;
using testing::TempDir;

std::vector<int32_t> make_ids(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 2654435761u) % vocab);
  return ids;
}

// x[b] = ids[s, s + T) and y[b] = ids[s + 1, s + T + 1) for the sampler's starts s.
void expect_batch(const data::Batch& got, const std::vector<int32_t>& ids, const std::vector<int64_t>& starts,
                  int64_t T, const std::string& what) {
  ASSERT_EQ(got.x.shape(), (Shape{static_cast<int64_t>(starts.size()), T})) << what;
  ASSERT_EQ(got.x.dtype(), DType::I64) << what;
  const std::vector<int64_t> x = got.x.contiguous().to_vector<int64_t>(), y = got.y.contiguous().to_vector<int64_t>();
  for (size_t b = 0; b < starts.size(); ++b)
    for (int64_t t = 0; t < T; ++t) {
      const size_t i = b * static_cast<size_t>(T) + static_cast<size_t>(t);
      ASSERT_EQ(x[i], ids[static_cast<size_t>(starts[b] + t)]) << what << " x[" << b << "][" << t << "]";
      ASSERT_EQ(y[i], ids[static_cast<size_t>(starts[b] + t + 1)]) << what << " y[" << b << "][" << t << "]";
    }
}

TEST(DataLoader, BatchesAreTheSamplersWindowsAtAnyPrefetchDepth) {
  TempDir dir;
  const std::vector<int32_t> ids = make_ids(20000, 50257);
  data::write_token_file(dir / "d.tok", ids, 50257);
  const auto file = std::make_shared<const data::TokenFile>(dir / "d.tok");
  for (int prefetch : {1, 4}) {
    const LoaderOptions o{.batch = 3, .seq = 31, .rank = 1, .world = 2, .seed = 5, .prefetch = prefetch};
    DataLoader loader(file, o);
    data::WindowSampler reference({.tokens = 20000, .window = 32, .batch = 3, .rank = 1, .world = 2, .seed = 5});
    const int64_t n = 2 * loader.batches_per_epoch() + 5;  // past two epoch ends
    for (int64_t i = 0; i < n; ++i) {
      const data::Batch b = loader.next();
      expect_batch(b, ids, reference.next(), 31, "prefetch " + std::to_string(prefetch) + " batch " + std::to_string(i));
      EXPECT_EQ(loader.state_json(), reference.state_json()) << "the position of the batches returned, not fetched";
    }
    EXPECT_EQ(loader.batches(), n);
    EXPECT_GE(loader.wait_seconds(), 0.0);
    EXPECT_GE(loader.take_wait_seconds(), 0.0);
    EXPECT_EQ(loader.take_wait_seconds(), 0.0);
  }
}

TEST(DataLoader, ResumesFromItsStateDiscardingPrefetchedBatches) {
  TempDir dir;
  const std::vector<int32_t> ids = make_ids(5000, 300);
  data::write_token_file(dir / "d.tok", ids, 300);
  const auto file = std::make_shared<const data::TokenFile>(dir / "d.tok");
  const LoaderOptions o{.batch = 2, .seq = 16, .seed = 1, .prefetch = 3};
  DataLoader a(file, o);
  for (int i = 0; i < 7; ++i) a.next();
  const std::string saved = a.state_json();
  std::vector<std::vector<int64_t>> rest;
  for (int i = 0; i < 5; ++i) rest.push_back(a.next().x.to_vector<int64_t>());
  DataLoader b(file, o);
  b.next();  // somewhere else, with batches prefetched
  b.load_state_json(saved);
  EXPECT_EQ(b.state_json(), saved);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(b.next().x.to_vector<int64_t>(), rest[static_cast<size_t>(i)]) << i;
  // A state from another configuration is refused, and the loader goes on from where it stood.
  const std::string before = b.state_json();
  DataLoader other(file, {.batch = 2, .seq = 17, .seed = 1});
  EXPECT_MPT_ERROR(b.load_state_json(other.state_json()), "give the saved run's --seq");
  EXPECT_EQ(b.state_json(), before);
  DataLoader c(file, o);
  c.load_state_json(before);
  EXPECT_EQ(b.next().x.to_vector<int64_t>(), c.next().x.to_vector<int64_t>());
}

TEST(DataLoader, ACorruptIdIsThrownByNext) {
  TempDir dir;
  data::write_token_file(dir / "d.tok", std::vector<int32_t>(400, 1), 5);
  std::string bytes = testing::read_bytes(dir / "d.tok");
  for (size_t i = 32; i < bytes.size(); i += 2) bytes[i] = 9;  // every id becomes 9, outside the vocabulary of 5
  testing::write_bytes(dir / "d.tok", bytes);
  DataLoader loader(std::make_shared<const data::TokenFile>(dir / "d.tok"), {.batch = 2, .seq = 8});
  EXPECT_MPT_ERROR(loader.next(), "is outside the vocabulary [0, 5): the file is corrupt");
  EXPECT_MPT_ERROR(loader.next(), "the file is corrupt");  // and again: the loader does not skip it
}

TEST(DataLoader, ReadsIdsHeldInMemoryAsFromAFile) {
  TempDir dir;
  const std::vector<int32_t> ids = make_ids(3000, 65);
  data::write_token_file(dir / "d.tok", ids, 65);
  const LoaderOptions o{.batch = 4, .seq = 20, .seed = 8};
  DataLoader from_file(std::make_shared<const data::TokenFile>(dir / "d.tok"), o);
  DataLoader from_memory(std::make_shared<const data::TokenVector>(ids, 65), o);
  for (int i = 0; i < 40; ++i) {
    const data::Batch a = from_file.next(), b = from_memory.next();
    EXPECT_EQ(a.x.to_vector<int64_t>(), b.x.to_vector<int64_t>()) << i;
    EXPECT_EQ(a.y.to_vector<int64_t>(), b.y.to_vector<int64_t>()) << i;
  }
  EXPECT_MPT_ERROR(data::TokenVector({1, 65}, 65), "[tokens] id 65 at position 1 is outside [0, 65)");
}

TEST(DataLoader, Errors) {
  TempDir dir;
  data::write_token_file(dir / "d.tok", make_ids(100, 7), 7);
  const auto file = std::make_shared<const data::TokenFile>(dir / "d.tok");
  EXPECT_MPT_ERROR(DataLoader(nullptr, {.batch = 1, .seq = 4}), "no token source given");
  EXPECT_MPT_ERROR(DataLoader(file, {.batch = 1, .seq = 0}), "must be positive");
  EXPECT_MPT_ERROR(DataLoader(file, {.batch = 20, .seq = 9}), "100 tokens hold 10 windows of 10");
}

}  // namespace
}  // namespace mpt
