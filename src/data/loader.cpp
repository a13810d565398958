// src/data/loader.cpp: the prefetching loader: a worker thread reads sampled windows; next() hands them to the step.
#include "mpt/data/loader.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "mpt/core/error.h"
#include "mpt/core/memory.h"
#include "mpt/core/stream.h"

namespace mpt::data {

namespace {

// One batch's ids on the host: x then y, [2, batch, seq] int64.
struct HostBuffer {
  std::shared_ptr<int64_t> ids;
  std::optional<Event> in_flight;  // CUDA: the copy still reading `ids`
};

struct Ready {
  size_t buffer = 0;
  Tensor cpu;              // CPU loaders: the batch itself, made by the worker
  std::string state_after;  // the sampler's position after this batch
  std::exception_ptr error;
};

}  // namespace

struct DataLoader::Impl {
  std::shared_ptr<const TokenSource> data;
  LoaderOptions o;
  WindowSampler sampler;  // the worker's while it runs
  std::vector<HostBuffer> buffers;

  mutable std::mutex m;
  std::condition_variable cv;
  std::deque<Ready> ready;
  std::deque<size_t> free;
  bool stop = false;
  std::thread worker;

  std::string state;  // after the last batch next() returned
  int64_t per_epoch = 0;
  double wait_total = 0, wait_window = 0;
  int64_t returned = 0;

  Impl(std::shared_ptr<const TokenSource> d, const LoaderOptions& opt)
      : data(std::move(d)), o(opt),
        sampler(SamplerOptions{data ? data->size() : 0, opt.seq + 1, opt.batch, opt.rank, opt.world, opt.seed}) {}

  bool cuda() const { return o.device.is_cuda(); }
  size_t ids_per_batch() const { return static_cast<size_t>(2 * o.batch * o.seq); }

  // Reads this batch's windows: x[b] = w[0, seq), y[b] = w[1, seq + 1).
  void fill(int64_t* out) {
    const std::vector<int64_t> starts = sampler.next();
    std::vector<int64_t> w(static_cast<size_t>(o.seq + 1));
    int64_t* x = out;
    int64_t* y = out + o.batch * o.seq;
    for (int64_t b = 0; b < o.batch; ++b) {
      data->read(starts[static_cast<size_t>(b)], o.seq + 1, w.data());
      std::memcpy(x + b * o.seq, w.data(), sizeof(int64_t) * static_cast<size_t>(o.seq));
      std::memcpy(y + b * o.seq, w.data() + 1, sizeof(int64_t) * static_cast<size_t>(o.seq));
    }
  }

  void run() {
    for (;;) {
      size_t buf = 0;
      {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return stop || (!free.empty() && ready.size() < static_cast<size_t>(o.prefetch)); });
        if (stop) return;
        buf = free.front();
        free.pop_front();
      }
      Ready r;
      r.buffer = buf;
      try {
        if (cuda()) {
          HostBuffer& hb = buffers[buf];
          if (hb.in_flight) {  // the previous copy out of this buffer must be done before it is refilled
            hb.in_flight->synchronize();
            hb.in_flight.reset();
          }
          fill(hb.ids.get());
        } else {
          r.cpu = Tensor::empty({2, o.batch, o.seq}, DType::I64, Device::cpu());
          fill(r.cpu.data<int64_t>());
        }
        r.state_after = sampler.state_json();
      } catch (...) {
        r.error = std::current_exception();
      }
      const bool failed = static_cast<bool>(r.error);
      {
        std::lock_guard<std::mutex> lock(m);
        ready.push_back(std::move(r));
      }
      cv.notify_all();
      if (failed) {  // nothing after a failed batch: wait to be stopped (a restore restarts the worker)
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return stop; });
        return;
      }
    }
  }

  void start() {
    stop = false;
    worker = std::thread([this] { run(); });
  }

  void halt() {
    {
      std::lock_guard<std::mutex> lock(m);
      stop = true;
    }
    cv.notify_all();
    if (worker.joinable()) worker.join();
  }
};

DataLoader::DataLoader(std::shared_ptr<const TokenSource> data, const LoaderOptions& o) {
  MPT_CHECK(data != nullptr, "[DataLoader] no token source given");
  MPT_CHECK(o.seq >= 1 && o.batch >= 1 && o.prefetch >= 1,
            "[DataLoader] batch {}, seq {} and prefetch {} must be positive", o.batch, o.seq, o.prefetch);
  impl_ = std::make_unique<Impl>(std::move(data), o);
  Impl& s = *impl_;
  s.state = s.sampler.state_json();
  s.per_epoch = s.sampler.batches_per_epoch();
  // The worker's buffers: prefetch ready ones, one being filled, one the consumer's copy may still read.
  const size_t n = static_cast<size_t>(o.prefetch) + 2;
  for (size_t i = 0; i < n; ++i) {
    if (s.cuda()) {
      const size_t bytes = s.ids_per_batch() * sizeof(int64_t);
      s.buffers.push_back({std::shared_ptr<int64_t>(static_cast<int64_t*>(cuda_backend::host_alloc_pinned(bytes)),
                                                    [](int64_t* p) { cuda_backend::host_free_pinned(p); }),
                           std::nullopt});
    } else {
      s.buffers.push_back({});
    }
    s.free.push_back(i);
  }
  s.start();
}

DataLoader::~DataLoader() {
  impl_->halt();
  for (HostBuffer& b : impl_->buffers)
    if (b.in_flight) b.in_flight->synchronize();
}

Batch DataLoader::next() {
  Impl& s = *impl_;
  Ready r;
  {
    std::unique_lock<std::mutex> lock(s.m);
    const auto t0 = std::chrono::steady_clock::now();
    s.cv.wait(lock, [&] { return !s.ready.empty(); });
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    s.wait_total += waited;
    s.wait_window += waited;
    if (s.ready.front().error) std::rethrow_exception(s.ready.front().error);  // kept: later calls throw it too
    r = std::move(s.ready.front());
    s.ready.pop_front();
  }
  Tensor t = r.cpu;
  if (s.cuda()) {
    t = Tensor::empty({2, s.o.batch, s.o.seq}, DType::I64, s.o.device);
    const Stream stream = Stream::current(s.o.device);
    HostBuffer& hb = s.buffers[r.buffer];
    copy_bytes(t.data_ptr(), s.o.device, hb.ids.get(), Device::cpu(), s.ids_per_batch() * sizeof(int64_t), stream);
    hb.in_flight.emplace(s.o.device);
    hb.in_flight->record(stream);
  }
  {
    std::lock_guard<std::mutex> lock(s.m);
    s.free.push_back(r.buffer);
    s.state = std::move(r.state_after);
    ++s.returned;
  }
  s.cv.notify_all();
  return {t.select(0, 0), t.select(0, 1)};
}

double DataLoader::wait_seconds() const {
  std::lock_guard<std::mutex> lock(impl_->m);
  return impl_->wait_total;
}

double DataLoader::take_wait_seconds() {
  std::lock_guard<std::mutex> lock(impl_->m);
  return std::exchange(impl_->wait_window, 0.0);
}

int64_t DataLoader::batches() const {
  std::lock_guard<std::mutex> lock(impl_->m);
  return impl_->returned;
}

std::string DataLoader::state_json() const {
  std::lock_guard<std::mutex> lock(impl_->m);
  return impl_->state;
}

void DataLoader::load_state_json(std::string_view json) {
  Impl& s = *impl_;
  s.halt();
  // The prefetched batches are discarded; their buffers go back to the free list.
  for (Ready& r : s.ready) s.free.push_back(r.buffer);
  s.ready.clear();
  std::exception_ptr error;
  try {
    s.sampler.load_state_json(json);
    s.state = s.sampler.state_json();
  } catch (...) {
    error = std::current_exception();
    s.sampler.load_state_json(s.state);  // back to where the consumer stood (the worker had run ahead)
  }
  s.start();
  if (error) std::rethrow_exception(error);
}

const LoaderOptions& DataLoader::options() const { return impl_->o; }

int64_t DataLoader::batches_per_epoch() const { return impl_->per_epoch; }

}  // namespace mpt::data
