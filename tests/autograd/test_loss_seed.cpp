// tests/autograd/test_loss_seed.cpp: autograd::LossSeed: made once on request, per thread, nested scopes.
#include <gtest/gtest.h>

#include <thread>

#include "mpt/autograd/grad_mode.h"
#include "mpt/autograd/loss_seed.h"
#include "test_util.h"

using namespace mpt;

TEST(LossSeed, MadeOnceOnRequestForOneDtypeAndDevice) {
  EXPECT_FALSE(autograd::LossSeed::request(Device::cpu(), DType::F32).defined()) << "no LossSeed alive";
  int calls = 0;
  bool grad_mode_inside = true;
  autograd::LossSeed seed([&](Device d, DType t) {
    ++calls;
    grad_mode_inside = autograd::is_grad_enabled();
    return Tensor::full({}, 0.125, t, d);
  });
  EXPECT_FALSE(seed.made().defined()) << "nothing asked yet";
  EXPECT_EQ(calls, 0);
  const Tensor a = autograd::LossSeed::request(Device::cpu(), DType::F32);
  const Tensor b = autograd::LossSeed::request(Device::cpu(), DType::F32);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(grad_mode_inside) << "made as a constant";
  ASSERT_TRUE(a.defined());
  EXPECT_EQ(a.item<double>(), 0.125);
  EXPECT_TRUE(a.shares_storage(b) && a.shares_storage(seed.made()));
  EXPECT_FALSE(autograd::LossSeed::request(Device::cpu(), DType::F64).defined()) << "one seed per scope";
  EXPECT_EQ(calls, 1);
}

TEST(LossSeed, InnermostAnswersAndEachThreadHasItsOwn) {
  autograd::LossSeed outer([](Device d, DType t) { return Tensor::full({}, 1.0, t, d); });
  {
    autograd::LossSeed inner([](Device d, DType t) { return Tensor::full({}, 2.0, t, d); });
    EXPECT_EQ(autograd::LossSeed::request(Device::cpu(), DType::F32).item<double>(), 2.0);
    EXPECT_FALSE(outer.made().defined());
    bool other_thread_sees_one = true;
    std::thread([&] { other_thread_sees_one = autograd::LossSeed::request(Device::cpu(), DType::F32).defined(); })
        .join();
    EXPECT_FALSE(other_thread_sees_one);
  }
  EXPECT_EQ(autograd::LossSeed::request(Device::cpu(), DType::F32).item<double>(), 1.0) << "outer restored";
}

TEST(LossSeed, RejectsABadFactory) {
  EXPECT_MPT_ERROR(autograd::LossSeed(autograd::LossSeed::Factory{}), "[LossSeed] the seed factory is empty");
  autograd::LossSeed two([](Device d, DType t) { return Tensor::ones({2}, t, d); });
  EXPECT_MPT_ERROR(autograd::LossSeed::request(Device::cpu(), DType::F32),
                   "[LossSeed] the factory must make one element of f32 on cpu, got");
}
