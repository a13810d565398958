// benchmarks/bench_comm.cpp: all-reduce time, algorithm and bus bandwidth (nccl-tests' definitions) from 4 KB to
// 256 MB over the job's communicator (run under mpirun), beside the machine's memory-copy bandwidth.
#include <mpt/mpt.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <omp.h>

#include "bench_util.h"
#include "mpt/dist/communicator.h"

namespace {

using mpt::DType;
using mpt::Tensor;
namespace dist = mpt::dist;

// Seconds per collective: the slowest rank's mean over `iters` back-to-back calls, after a barrier.
double time_collective(dist::Communicator& comm, int iters, const std::function<void()>& once) {
  once();  // warm-up (buffers, connections)
  comm.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) once();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  Tensor t = Tensor::full({1}, s, DType::F32);
  comm.all_reduce(t, dist::ReduceOp::Max)->wait();
  return t.to_vector<float>()[0];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_comm: all-reduce bandwidth over the communicator (mpirun -np N bench_comm)"};
  int64_t min_bytes = 4 << 10, max_bytes = int64_t{256} << 20;
  std::string json_path, wire = "f32", backend = "mpi";
  app.add_option("--min-bytes", min_bytes, "smallest message (default 4 KB)")->check(CLI::PositiveNumber);
  app.add_option("--max-bytes", max_bytes, "largest message (default 256 MB)")->check(CLI::PositiveNumber);
  app.add_option("--wire", wire, "f32 (all_reduce), bf16 or fp8 (all_reduce_on_wire: compressed gradients)");
  app.add_option("--json", json_path, "write the rows as JSON here (rank 0)");
  app.add_option("--backend", backend, "mpi (CPU tensors; single without mpirun) or nccl (GPU tensors, one per rank)");
  CLI11_PARSE(app, argc, argv);
  try {
    MPT_CHECK(backend == "mpi" || backend == "nccl", "[bench_comm] unknown --backend '{}': expected mpi or nccl",
              backend);
    const auto host = dist::world();  // timing agreement (CPU scalars)
    const auto comm = backend == "nccl" ? dist::nccl_world() : host;
    const mpt::Device device = backend == "nccl" ? mpt::Device::cuda(host->rank() % mpt::cuda_status().device_count)
                                                 : mpt::Device::cpu();
    const int n = comm->size(), me = comm->rank();
    const DType dtype = wire == "f32" ? DType::F32 : wire == "bf16" ? DType::BF16 : wire == "fp8" ? DType::F8E4M3
                                                                                                   : DType::I64;
    MPT_CHECK(dtype != DType::I64, "[bench_comm] unknown --wire '{}': expected f32, bf16 or fp8", wire);
    double copy_gbps = 0;
    if (device.is_cpu()) {
      copy_gbps = mpt::bench::memcpy_gbps(size_t{256} << 20, 5);
    } else {  // device-to-device copy of 256 MB, read + write
      const Tensor src = Tensor::zeros({int64_t{64} << 20}, DType::F32, device);
      Tensor dst = Tensor::empty({int64_t{64} << 20}, DType::F32, device);
      const double s = mpt::bench::median_seconds(5, [&] {
        dst.copy_(src);
        mpt::Stream::current(device).synchronize();
      });
      copy_gbps = 2.0 * (256 << 20) / s / 1e9;
    }
    if (me == 0) {
      std::printf("bench_comm: %d ranks, backend %s on %s, sum all-reduce in %s; copy (read + write%s) %.1f GB/s\n", n,
                  comm->backend().c_str(), fmt::format("{}", device).c_str(), wire.c_str(),
                  device.is_cpu() ? fmt::format(", {} threads", omp_get_max_threads()).c_str() : ", device to device",
                  copy_gbps);
      std::printf("busbw = algbw * 2(n-1)/n (nccl-tests); a shared-memory all-reduce moves about 2(n-1)/n of the "
                  "bytes through memory twice, so the copy bandwidth bounds busbw\n");
      std::printf("%12s %8s %12s %12s %12s\n", "bytes", "iters", "time (us)", "algbw GB/s", "busbw GB/s");
    }
    nlohmann::json rows = nlohmann::json::array();
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
      const int64_t elements = bytes / static_cast<int64_t>(mpt::dtype_size(dtype));
      Tensor t = Tensor::zeros({elements}).to(dtype).to(device);
      const int iters = static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / bytes, 3, 200));
      const double s = time_collective(*host, iters, [&] {
        (dtype == DType::F32 ? comm->all_reduce(t, dist::ReduceOp::Sum) : comm->all_reduce_on_wire(t, dist::ReduceOp::Sum))
            ->wait();
        if (device.is_cuda()) mpt::Stream::current(device).synchronize();
      });
      const double algbw = static_cast<double>(bytes) / s / 1e9;
      const double busbw = algbw * 2.0 * (n - 1) / n;  // nccl-tests: 0 for one rank (nothing crosses a link)
      if (me == 0) std::printf("%12lld %8d %12.1f %12.2f %12.2f\n", static_cast<long long>(bytes), iters, s * 1e6,
                               algbw, busbw);
      rows.push_back({{"bytes", bytes}, {"iters", iters}, {"time_us", s * 1e6}, {"algbw_gbs", algbw},
                      {"busbw_gbs", busbw}});
    }
    if (me == 0 && !json_path.empty()) {
      std::ofstream(json_path) << nlohmann::json{{"ranks", n}, {"backend", comm->backend()}, {"wire", wire},
                                                 {"device", fmt::format("{}", device)},
                                                 {"copy_gbs", copy_gbps}, {"rows", rows}}
                                      .dump(2)
                               << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_comm: %s\n", e.what());
    return 1;
  }
  return 0;
}
