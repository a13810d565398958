// tests/gpu/test_tensor_gpu.cpp: tensors on cuda:0: copies in every direction (strided, broadcast, overlapping, converting), factories, streams and events ordering side-stream work, memory statistics (skipped without a GPU).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "device_test.h"
#include "mpt/core/memory_peak.h"
#include "mpt/mpt.h"
#include "op_test.h"

namespace mpt {
namespace {

using testing::random_tensor;
using testing::same_bits;
using testing::to_cpu;
using testing::to_gpu;

Device gpu() { return Device::cuda(0); }

// Copies move bytes or convert with the CPU's encoder (device conversions: the same rounding): exact everywhere.
void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  EXPECT_TRUE(same_bits(got, want)) << what << ": got " << to_cpu(got).str() << "\nwant " << want.str();
}

TEST(GpuTensor, CopiesInEveryDirectionMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::F8E4M3, DType::I64, DType::U8}) {
    const std::string n(dtype_name(dt));
    const Tensor x = random_tensor({5, 6, 7}, DType::F32, 1, 20.0).to(dt);
    const Tensor g = x.to(gpu());
    ASSERT_TRUE(g.device().is_cuda());
    expect_same(g, x, n + " host to device");
    expect_same(g.clone(), x, n + " device to device clone");
    expect_same(to_cpu(g), x, n + " device to host");
    Tensor d = Tensor::empty({5, 6, 7}, dt, gpu());
    d.copy_(g);
    expect_same(d, x, n + " copy_ device to device");
    // Strided sources on the device: transpose, stepped slice, select, permute; and their contiguous copies.
    expect_same(g.transpose(0, 2).contiguous(), x.transpose(0, 2).contiguous(), n + " transposed");
    expect_same(g.slice(1, 1, 6, 2).contiguous(), x.slice(1, 1, 6, 2).contiguous(), n + " stepped slice");
    expect_same(g.select(2, 3).contiguous(), x.select(2, 3).contiguous(), n + " select");
    expect_same(g.permute({2, 0, 1}).to(Device::cpu()), x.permute({2, 0, 1}).contiguous(), n + " permuted to host");
    // Strided destination on the device, from host and device sources.
    Tensor dc = Tensor::zeros({5, 6, 7}, dt), dg = Tensor::zeros({5, 6, 7}, dt, gpu());
    dc.slice(1, 0, 6, 3).copy_(x.slice(1, 1, 3));
    dg.slice(1, 0, 6, 3).copy_(x.slice(1, 1, 3));
    expect_same(dg, dc, n + " host into a strided device view");
    dg.select(0, 4).copy_(g.select(0, 1).transpose(0, 1).contiguous().transpose(0, 1));
    dc.select(0, 4).copy_(x.select(0, 1));
    expect_same(dg, dc, n + " device into a strided device view");
    // Broadcast sources: a row expanded over a device tensor, from either device.
    Tensor bc = Tensor::empty({5, 6, 7}, dt), bg = Tensor::empty({5, 6, 7}, dt, gpu());
    bc.copy_(x.select(0, 2).select(0, 3));
    bg.copy_(g.select(0, 2).select(0, 3));
    expect_same(bg, bc, n + " broadcast device row");
    bg.copy_(x.select(0, 2).select(0, 3));
    expect_same(bg, bc, n + " broadcast host row");
    // Overlapping views of one device storage (the source is read first).
    Tensor oc = x.clone(), og = g.clone();
    oc.slice(0, 1, 5).copy_(oc.slice(0, 0, 4));
    og.slice(0, 1, 5).copy_(og.slice(0, 0, 4));
    expect_same(og, oc, n + " overlapping shift");
  }
}

TEST(GpuTensor, ConvertingCopiesAndFactoriesMatchCpu) {
  MPT_REQUIRE_GPU(8);
  const Tensor x = random_tensor({4, 33}, DType::F32, 2, 50.0);
  for (DType from : {DType::F32, DType::BF16, DType::F16, DType::I32}) {
    for (DType to : {DType::F32, DType::BF16, DType::F16, DType::F8E5M2, DType::I64}) {
      const std::string n = std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to));
      const Tensor src = x.to(from), want = src.to(to);
      expect_same(src.to(gpu()).to(to), want, n + " on the device");
      expect_same(src.to(gpu(), to), want, n + " host to device");
      expect_same(src.to(gpu()).to(Device::cpu(), to), want, n + " device to host");
      Tensor strided = Tensor::empty({33, 4}, to, gpu()).t();  // poisoned: every element must be written
      strided.copy_(src.to(gpu()));
      expect_same(strided, want, n + " into a transposed device view");
    }
  }
  for (DType dt : {DType::F32, DType::BF16, DType::I64}) {
    const std::string n(dtype_name(dt));
    expect_same(Tensor::zeros({3, 5}, dt, gpu()), Tensor::zeros({3, 5}, dt), n + " zeros");
    expect_same(Tensor::ones({3, 5}, dt, gpu()), Tensor::ones({3, 5}, dt), n + " ones");
    expect_same(Tensor::full({3, 5}, -2.5, dt, gpu()), Tensor::full({3, 5}, -2.5, dt), n + " full");
    expect_same(Tensor::arange(0, 7, 0.5, dt, gpu()), Tensor::arange(0, 7, 0.5, dt), n + " arange");
    Tensor fc = Tensor::zeros({4, 6}, dt), fg = Tensor::zeros({4, 6}, dt, gpu());
    fc.slice(1, 1, 6, 2).fill_(3);
    fg.slice(1, 1, 6, 2).fill_(3);
    expect_same(fg, fc, n + " fill_ of a strided device view");
  }
  const Tensor g = Tensor::from_vector(std::vector<float>{1.5f, -2.0f, 3.25f}, {3}, gpu());
  EXPECT_TRUE(g.device().is_cuda());
  EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  EXPECT_EQ(g.select(0, 2).item<double>(), 3.25);
  EXPECT_EQ(g.reshape({1, 3}).to_vector<double>(), (std::vector<double>{1.5, -2.0, 3.25}));
}

// Device copies and fills stage nothing through the host: no CPU storage is allocated while they run.
int64_t cpu_allocations() { return memory_stats(Device::cpu()).allocations; }

// copy_ between views of cuda:0 (transposed, stepped slice, broadcast row, overlapping) for every pair of dtypes the
// device converts (f64 excluded: a CPU reference dtype), against the same copy on the CPU, bit for bit. Destinations
// are poisoned (0xFF) device memory, so an element the kernels skip shows.
TEST(GpuTensor, DeviceCopiesOfViewsBetweenDtypesMatchCpu) {
  MPT_REQUIRE_GPU(8);
  const DType dtypes[] = {DType::F32, DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2,
                          DType::I32, DType::I64, DType::U8,   DType::U16};
  const Tensor base = random_tensor({6, 9, 5}, DType::F32, 4, 30.0);
  for (DType from : dtypes) {
    const Tensor x = base.to(from), g = x.to(gpu());
    for (DType to : dtypes) {
      const std::string n = std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to));
      SCOPED_TRACE(n);
      const int64_t allocations = cpu_allocations();
      const Tensor transposed = g.transpose(0, 2).to(to);
      const Tensor sliced = g.slice(1, 1, 8, 3).to(to);
      Tensor expanded = Tensor::empty({6, 9, 5}, to, gpu());
      expanded.copy_(g.select(0, 2).select(0, 3));  // (5) -> (6,9,5)
      Tensor into_transposed = Tensor::empty({5, 9, 6}, to, gpu()).transpose(0, 2);
      into_transposed.copy_(g.slice(1, 0, 9));
      Tensor into_slice = Tensor::full({6, 9, 5}, 7, to, gpu());
      into_slice.slice(2, 0, 5, 2).copy_(g.slice(2, 2, 5));
      Tensor overlapping = g.to(to).clone();  // (to() of the same dtype returns g itself)
      overlapping.slice(0, 1, 6).copy_(overlapping.slice(0, 0, 5));
      EXPECT_EQ(cpu_allocations(), allocations) << n << ": a device copy allocated host memory";
      expect_same(transposed, x.transpose(0, 2).to(to), n + " transposed");
      expect_same(sliced, x.slice(1, 1, 8, 3).to(to), n + " stepped slice");
      Tensor ec = Tensor::empty({6, 9, 5}, to);
      ec.copy_(x.select(0, 2).select(0, 3));
      expect_same(expanded, ec, n + " expanded row");
      expect_same(into_transposed, x.to(to), n + " into a transposed view");
      Tensor sc = Tensor::full({6, 9, 5}, 7, to);
      sc.slice(2, 0, 5, 2).copy_(x.slice(2, 2, 5));
      expect_same(into_slice, sc, n + " into a stepped slice");
      Tensor oc = x.to(to).clone();
      oc.slice(0, 1, 6).copy_(oc.slice(0, 0, 5));
      expect_same(overlapping, oc, n + " overlapping");
    }
  }
}

// Strided views crossing between host and device: the host side is packed (and converted) first, one dense transfer.
TEST(GpuTensor, StridedHostDeviceTransfersMatchCpu) {
  MPT_REQUIRE_GPU(8);
  const Tensor x = random_tensor({7, 4, 6}, DType::F32, 5, 10.0);
  for (DType to : {DType::F32, DType::BF16, DType::F8E5M2, DType::I64, DType::F64}) {
    const std::string n(dtype_name(to));
    Tensor into_view = Tensor::full({6, 4, 7}, 3, to, gpu());
    into_view.slice(0, 0, 6, 2).transpose(0, 2).copy_(x.slice(2, 1, 4));
    Tensor want = Tensor::full({6, 4, 7}, 3, to);
    want.slice(0, 0, 6, 2).transpose(0, 2).copy_(x.slice(2, 1, 4));
    expect_same(into_view, want, n + " host view into a device view");
    const Tensor g = x.to(gpu());
    Tensor host = Tensor::full({4, 7, 6}, 1, to);
    host.transpose(0, 1).copy_(g.slice(1, 0, 4));
    Tensor host_want = Tensor::full({4, 7, 6}, 1, to);
    host_want.transpose(0, 1).copy_(x);
    expect_same(host, host_want, n + " device view into a host view");
    Tensor row = Tensor::empty({7, 4, 6}, to, gpu());
    row.copy_(x.select(0, 1).select(0, 2));
    Tensor row_want = Tensor::empty({7, 4, 6}, to);
    row_want.copy_(x.select(0, 1).select(0, 2));
    expect_same(row, row_want, n + " broadcast host row");
  }
}

// zeros / ones / full of every dtype on cuda:0 and fill_ of strided views, against the CPU bit for bit, with no
// host allocation (the value's bits are converted on the host and written by a kernel).
TEST(GpuTensor, FillsOfEveryDtypeAndLayoutMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kAllDTypes) {
    const std::string n(dtype_name(dt));
    SCOPED_TRACE(n);
    for (double v : {0.0, 1.0, -2.5, 300.7, -1e9}) {
      const int64_t allocations = cpu_allocations();
      const Tensor full = Tensor::full({3, 17}, v, dt, gpu()), odd = Tensor::full({5}, v, dt, gpu());
      const Tensor scalar = Tensor::full({}, v, dt, gpu());
      Tensor strided = Tensor::empty({6, 10}, dt, gpu());
      strided.slice(1, 0, 10, 2).fill_(v);
      strided.slice(1, 1, 10, 2).fill_(-v);
      Tensor transposed = Tensor::empty({9, 4}, dt, gpu()).t();
      transposed.fill_(v);
      Tensor picked = Tensor::zeros({4, 6, 3}, dt, gpu());
      picked.select(1, 2).slice(0, 1, 4, 2).fill_(v);
      EXPECT_EQ(cpu_allocations(), allocations) << n << ": a device fill allocated host memory";
      const std::string w = n + " value " + std::to_string(v);
      expect_same(full, Tensor::full({3, 17}, v, dt), w + " full");
      expect_same(odd, Tensor::full({5}, v, dt), w + " full of 5");
      expect_same(scalar, Tensor::full({}, v, dt), w + " 0-d full");
      Tensor sc = Tensor::empty({6, 10}, dt);
      sc.slice(1, 0, 10, 2).fill_(v);
      sc.slice(1, 1, 10, 2).fill_(-v);
      expect_same(strided, sc, w + " fill_ of interleaved columns");
      expect_same(transposed, Tensor::full({4, 9}, v, dt), w + " fill_ of a transposed view");
      Tensor pc = Tensor::zeros({4, 6, 3}, dt);
      pc.select(1, 2).slice(0, 1, 4, 2).fill_(v);
      expect_same(picked, pc, w + " fill_ of a selected, stepped view");
    }
    expect_same(Tensor::zeros({2, 3}, dt, gpu()), Tensor::zeros({2, 3}, dt), n + " zeros");
    expect_same(Tensor::ones({2, 3}, dt, gpu()), Tensor::ones({2, 3}, dt), n + " ones");
  }
}

// A side stream (non-blocking) ordered against the default stream by events: upload on the side stream, record,
// make the default stream wait, compute there; then the reverse direction for a download.
TEST(GpuStream, SideStreamWorkOrderedByEvents) {
  MPT_REQUIRE_GPU(8);
  Stream side(gpu());
  ASSERT_NE(side.native(), nullptr);
  const Stream current = Stream::current(gpu());
  const Tensor x = random_tensor({257, 129}, DType::F32, 3);
  // Storage allocated on the side stream; an upload there.
  auto storage = Storage::allocate(x.nbytes(), side);
  EXPECT_EQ(storage->stream(), side.native());
  Tensor d(storage, x.shape(), contiguous_strides(x.shape()), 0, DType::F32);
  copy_bytes(d.data_ptr(), gpu(), x.data_ptr(), Device::cpu(), x.nbytes(), side);
  Event uploaded(gpu());
  uploaded.record(side);
  uploaded.wait(current);
  const Tensor y = ops::gelu(d);  // on the current stream, after the upload
  Event computed(gpu());
  computed.record(current);
  computed.wait(side);
  std::vector<float> host(static_cast<size_t>(y.numel()));
  copy_bytes(host.data(), Device::cpu(), y.data_ptr(), gpu(), y.nbytes(), side);
  side.synchronize();
  EXPECT_TRUE(computed.ready());
  EXPECT_TRUE(uploaded.ready());
  const std::vector<float> want = ops::gelu(x).to_vector<float>();
  EXPECT_EQ(std::memcmp(host.data(), want.data(), host.size() * sizeof(float)), 0) << "side-stream round trip";
  // Timing events on the default stream.
  Event start(gpu(), true), stop(gpu(), true);
  start.record(current);
  const Tensor z = ops::add(y, y);
  stop.record(current);
  stop.synchronize();
  EXPECT_GE(start.elapsed_ms(stop), 0.0f);
  EXPECT_TRUE(same_bits(z, ops::add(ops::gelu(x), ops::gelu(x))));
  // A device-to-device copy on the side stream after the default stream's work (w's stream-ordered allocation on
  // the default stream included: the event is recorded after it).
  Tensor w = Tensor::empty(x.shape(), DType::F32, gpu());
  Event done(gpu());
  done.record(current);
  done.wait(side);
  copy_bytes(w.data_ptr(), gpu(), z.data_ptr(), gpu(), z.nbytes(), side);
  side.synchronize();
  EXPECT_TRUE(same_bits(w, z));
}

TEST(GpuMemory, StatisticsFollowAllocationsAndFrees) {
  MPT_REQUIRE_GPU(8);
  Stream::current(gpu()).synchronize();
  const MemoryStats before = memory_stats(gpu());
  reset_peak_memory_stats(gpu());
  EXPECT_EQ(memory_stats(gpu()).peak_bytes, before.current_bytes);
  const int64_t n = 1 << 20;
  {
    Tensor a = Tensor::empty({n}, DType::F32, gpu());
    const MemoryStats with = memory_stats(gpu());
    EXPECT_EQ(with.current_bytes, before.current_bytes + 4 * n);
    EXPECT_GE(with.peak_bytes, with.current_bytes);
    EXPECT_EQ(with.allocations, before.allocations + 1);
    EXPECT_GE(with.reserved_bytes, with.current_bytes);
    {
      Tensor b = Tensor::empty({n / 2}, DType::BF16, gpu());
      EXPECT_EQ(memory_stats(gpu()).current_bytes, before.current_bytes + 4 * n + n);
    }
    EXPECT_EQ(memory_stats(gpu()).current_bytes, before.current_bytes + 4 * n);
    EXPECT_EQ(memory_stats(gpu()).peak_bytes, before.current_bytes + 5 * n);
  }
  Stream::current(gpu()).synchronize();
  const MemoryStats after = memory_stats(gpu());
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_EQ(after.peak_bytes, before.current_bytes + 5 * n);
  EXPECT_GE(after.cached_bytes, 0);
  // The pool serves a same-size request again without growing (reused counts it), and empty_cache trims it.
  {
    Tensor c = Tensor::empty({n}, DType::F32, gpu());
    EXPECT_EQ(memory_stats(gpu()).reused, after.reused + 1);
  }
  // The reserve's high-water mark (cudaMemPoolAttrReservedMemHigh) covers the most held since the reset, and a reset
  // starts it again at the current reserve.
  EXPECT_GE(reserved_peak_bytes(gpu()), memory_stats(gpu()).reserved_bytes);
  EXPECT_GE(reserved_peak_bytes(gpu()), before.current_bytes + 5 * n);
  empty_cache(gpu());
  const MemoryStats trimmed = memory_stats(gpu());
  EXPECT_EQ(trimmed.current_bytes, before.current_bytes);
  EXPECT_LE(trimmed.reserved_bytes, after.reserved_bytes);
  reset_peak_memory_stats(gpu());
  EXPECT_EQ(reserved_peak_bytes(gpu()), trimmed.reserved_bytes);
  // The CPU's statistics are separate.
  const MemoryStats cpu_before = memory_stats(Device::cpu());
  { Tensor g = Tensor::empty({n}, DType::F32, gpu()); }
  EXPECT_EQ(memory_stats(Device::cpu()).allocations, cpu_before.allocations);
}

}  // namespace
}  // namespace mpt
