// tests/support/cuda_emu/nccl_comm.cpp: the NCCL double's communicators: unique ids, initialisation, finalize/destroy/abort, queries, errors and the test controls.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include "nccl_internal.h"

namespace mpt::cuda_emu::nccl {
namespace {

std::string& global_last_error() {  // like NCCL's ncclLastError: one process-wide message
  static std::string message;
  return message;
}
std::mutex& message_mutex() {  // guards the messages; taken after state_mutex() where both are held
  static std::mutex mutex;
  return mutex;
}

// Communicators are never freed, so a handle used after ncclCommDestroy/Abort is recognised and reported.
std::vector<std::unique_ptr<ncclComm>>& all_comms() {
  static std::vector<std::unique_ptr<ncclComm>> comms;
  return comms;
}

std::map<std::string, std::shared_ptr<Clique>>& forming_cliques() {  // by unique id, until every rank joined
  static std::map<std::string, std::shared_ptr<Clique>> cliques;
  return cliques;
}

ncclComm* new_comm(int rank, int nranks, int device, bool blocking) {
  auto comm = std::make_unique<ncclComm>();
  comm->rank = rank;
  comm->nranks = nranks;
  comm->device = device;
  comm->blocking = blocking;
  comm->async_error = ncclInProgress;
  all_comms().push_back(std::move(comm));
  return all_comms().back().get();
}

std::shared_ptr<Clique> find_or_create_clique(const std::string& id, int nranks) {
  auto& cliques = forming_cliques();
  auto it = cliques.find(id);
  if (it != cliques.end()) return it->second;
  auto clique = std::make_shared<Clique>();
  clique->id = id;
  clique->nranks = nranks;
  clique->ranks.assign(nranks, nullptr);
  cliques.emplace(id, clique);
  return clique;
}

// Under state_mutex(): the last rank to join checks the whole communicator and releases the others.
void finish_init(Clique& clique) {
  for (int a = 0; a < clique.nranks && clique.init_result == ncclSuccess; ++a) {
    for (int b = 0; b < a; ++b) {
      if (clique.ranks[a]->device == clique.ranks[b]->device) {
        clique.init_result = ncclInvalidUsage;
        clique.init_message = "Duplicate GPU detected : rank " + std::to_string(a) + " and rank " + std::to_string(b) +
                              " both on CUDA device " + std::to_string(clique.ranks[a]->device) +
                              " (each rank of a communicator needs its own device)";
        break;
      }
    }
  }
  clique.init_done = true;
  for (ncclComm* comm : clique.ranks) {
    comm->state = CommState::Ready;  // a failed init leaves the error in async_error: abort or destroy the comm
    comm->async_error = clique.init_result;
    if (clique.init_result != ncclSuccess) fail(comm, clique.init_result, clique.init_message);
  }
  forming_cliques().erase(clique.id);
  state_cv().notify_all();
}

ncclResult_t read_current_device(int* device) {
  if (cudaGetDevice(device) != cudaSuccess)
    return fail(nullptr, ncclUnhandledCudaError, "ncclCommInitRank: cudaGetDevice failed");
  return ncclSuccess;
}

// Waits (under lock) until no call of comm is outstanding; a real NCCL would hang if one never completes.
void wait_quiet(std::unique_lock<std::mutex>& lock, ncclComm* comm, const char* api) {
  const bool quiet = state_cv().wait_for(lock, wait_timeout(), [&] { return comm->outstanding.empty(); });
  if (!quiet) {
    const Call& first = *comm->outstanding.front();
    throw MisuseError(std::string(api) + ": rank " + std::to_string(comm->rank) + " still has " +
                      std::to_string(comm->outstanding.size()) + " incomplete collective(s) (the first: " +
                      coll_name(first.coll) + " #" + std::to_string(first.seq) +
                      ") after wait_timeout(); a real NCCL would hang here. Make the peers issue their calls, or "
                      "use ncclCommAbort to give up on them");
  }
}

}  // namespace

std::mutex& state_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::condition_variable& state_cv() {
  static std::condition_variable cv;
  return cv;
}
Controls& controls() {
  static Controls c;
  return c;
}

ncclResult_t fail(ncclComm* comm, ncclResult_t result, const std::string& message) {
  std::lock_guard<std::mutex> guard(message_mutex());
  global_last_error() = message;
  if (comm != nullptr) comm->message = message;
  return result;
}

void check_live(const ncclComm* comm, const char* api) {
  const auto& comms = all_comms();
  const bool known = std::any_of(comms.begin(), comms.end(), [&](const auto& c) { return c.get() == comm; });
  if (!known) {
    throw MisuseError(std::string(api) + ": the communicator handle is not one ncclCommInitRank/InitAll returned");
  }
  if (comm->state == CommState::Destroyed || comm->state == CommState::Aborted) {
    throw MisuseError(std::string(api) + ": communicator (rank " + std::to_string(comm->rank) + ") used after " +
                      (comm->state == CommState::Destroyed ? "ncclCommDestroy" : "ncclCommAbort") +
                      " freed it (use after free on a real NCCL)");
  }
}

void set_async_error(ncclComm* comm, ncclResult_t error, const std::string& message) {
  if (comm->async_error != ncclSuccess && comm->async_error != ncclInProgress) return;
  comm->async_error = error;
  fail(comm, error, message);
}

ncclResult_t join_clique(ncclComm* comm, const std::shared_ptr<Clique>& clique) {
  std::lock_guard<std::mutex> lock(state_mutex());
  if (clique->nranks != comm->nranks) {
    return fail(nullptr, ncclInvalidUsage,
                "ncclCommInitRank: rank " + std::to_string(comm->rank) + " says nranks=" +
                    std::to_string(comm->nranks) + " but another rank of this id said " +
                    std::to_string(clique->nranks));
  }
  if (clique->ranks[comm->rank] != nullptr) {
    return fail(nullptr, ncclInvalidUsage,
                "ncclCommInitRank: rank " + std::to_string(comm->rank) + " joined this unique id twice");
  }
  comm->clique = clique;
  clique->ranks[comm->rank] = comm;
  if (++clique->joined == clique->nranks) finish_init(*clique);
  return ncclSuccess;
}

ncclResult_t wait_for_clique(ncclComm* comm) {
  std::unique_lock<std::mutex> lock(state_mutex());
  Clique& clique = *comm->clique;
  if (!state_cv().wait_for(lock, wait_timeout(), [&] { return clique.init_done; })) {
    throw MisuseError("ncclCommInitRank: only " + std::to_string(clique.joined) + " of " +
                      std::to_string(clique.nranks) +
                      " ranks joined within wait_timeout(); a real NCCL would hang. Every rank must call "
                      "ncclCommInitRank with the same id (one thread driving several ranks: inside a group)");
  }
  if (clique.init_result != ncclSuccess) return fail(comm, clique.init_result, clique.init_message);
  return ncclSuccess;
}

}  // namespace mpt::cuda_emu::nccl

namespace mpt::cuda_emu {
using namespace nccl;

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  if (unique_id == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  std::memset(unique_id->internal, 0, sizeof(unique_id->internal));
  const std::string text = "mpt-emu-nccl-id:" + std::to_string(salt) + ":" + std::to_string(++counter);
  std::memcpy(unique_id->internal, text.data(), std::min(text.size(), sizeof(unique_id->internal)));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank,
                                    ncclConfig_t* config) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return fail(nullptr, ncclInvalidArgument,
                "ncclCommInitRank: rank " + std::to_string(rank) + " is not in [0, nranks=" + std::to_string(nranks) +
                    ")");
  }
  bool blocking = true;  // undefined means 1 [S init.cc]; NCCL_COMM_BLOCKING overrides
  if (config != nullptr) {
    if (config->magic != 0xcafebeef) {
      return fail(nullptr, ncclInvalidArgument,
                  "ncclCommInitRankConfig: config was not initialised with NCCL_CONFIG_INITIALIZER");
    }
    if (config->blocking != NCCL_CONFIG_UNDEF_INT) blocking = config->blocking != 0;
  }
  if (const char* env = std::getenv("NCCL_COMM_BLOCKING"); env != nullptr && *env != '\0') {
    blocking = std::atoi(env) != 0;
  }
  int device = 0;
  if (const ncclResult_t r = read_current_device(&device); r != ncclSuccess) return r;
  ncclComm* created = nullptr;
  std::shared_ptr<Clique> clique;
  {
    std::lock_guard<std::mutex> lock(state_mutex());
    created = new_comm(rank, nranks, device, blocking);
    clique = find_or_create_clique(std::string(comm_id.internal, sizeof(comm_id.internal)), nranks);
  }
  *comm = created;
  if (in_group()) {
    group_add_init(created, clique);
    return ncclSuccess;
  }
  if (const ncclResult_t r = join_clique(created, clique); r != ncclSuccess) {
    *comm = nullptr;
    return r;
  }
  if (!blocking) return ncclInProgress;
  if (const ncclResult_t r = wait_for_clique(created); r != ncclSuccess) {
    *comm = nullptr;
    return r;
  }
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, comm_id, rank, nullptr);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev < 1) {
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitAll: comms is NULL or ndev < 1");
  }
  for (int i = 0; i < ndev; ++i) {
    const int device = devlist != nullptr ? devlist[i] : i;
    if (device < 0 || device >= device_count()) {
      return fail(nullptr, ncclInvalidArgument,
                  "ncclCommInitAll: device " + std::to_string(device) + " does not exist (the emulated machine has " +
                      std::to_string(device_count()) + ")");
    }
  }
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  std::vector<ncclComm*> created(ndev);
  std::shared_ptr<Clique> clique;
  {
    std::lock_guard<std::mutex> lock(state_mutex());
    clique = find_or_create_clique(std::string(id.internal, sizeof(id.internal)), ndev);
    for (int i = 0; i < ndev; ++i) created[i] = new_comm(i, ndev, devlist != nullptr ? devlist[i] : i, true);
  }
  for (int i = 0; i < ndev; ++i) join_clique(created[i], clique);
  std::lock_guard<std::mutex> lock(state_mutex());
  if (clique->init_result != ncclSuccess) {
    std::fill(comms, comms + ndev, nullptr);
    return fail(nullptr, clique->init_result, clique->init_message);
  }
  std::copy(created.begin(), created.end(), comms);
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
  std::unique_lock<std::mutex> lock(state_mutex());
  check_live(comm, "ncclCommFinalize");
  if (comm->state != CommState::Ready) {
    return fail(comm, ncclInvalidUsage, "ncclCommFinalize: the communicator is not ready (still initialising, "
                                        "or already finalized)");
  }
  comm->state = CommState::Finalized;
  if (!comm->blocking) return ncclInProgress;  // ncclCommGetAsyncError says ncclSuccess once every call completed
  wait_quiet(lock, comm, "ncclCommFinalize");
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // as NCCL does
  std::unique_lock<std::mutex> lock(state_mutex());
  check_live(comm, "ncclCommDestroy");
  wait_quiet(lock, comm, "ncclCommDestroy");
  comm->state = CommState::Destroyed;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  std::lock_guard<std::mutex> lock(state_mutex());
  check_live(comm, "ncclCommAbort");
  abort_outstanding(comm);
  comm->state = CommState::Aborted;
  if (comm->clique != nullptr && controls().report_peer_abort) {
    for (ncclComm* peer : comm->clique->ranks) {
      if (peer == nullptr || peer == comm) continue;
      if (peer->state == CommState::Destroyed || peer->state == CommState::Aborted) continue;
      set_async_error(peer, ncclRemoteError,
                      "rank " + std::to_string(comm->rank) + " called ncclCommAbort: its peers' collectives cannot "
                      "complete (ncclRemoteError); abort this communicator too");
    }
  }
  state_cv().notify_all();
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr) {
    return fail(nullptr, ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
  }
  std::lock_guard<std::mutex> lock(state_mutex());
  check_live(comm, "ncclCommGetAsyncError");
  if (comm->async_error != ncclSuccess) {
    *async_error = comm->async_error;
  } else if (comm->report_in_progress_once) {
    comm->report_in_progress_once = false;
    *async_error = ncclInProgress;
  } else if (comm->state == CommState::Finalized && !comm->outstanding.empty()) {
    *async_error = ncclInProgress;
  } else {
    *async_error = ncclSuccess;
  }
  return ncclSuccess;
}

namespace {
ncclResult_t query(const ncclComm* comm, int* out, const char* api, int value_of_comm) {
  if (comm == nullptr || out == nullptr) return fail(nullptr, ncclInvalidArgument, std::string(api) + ": NULL argument");
  std::lock_guard<std::mutex> lock(state_mutex());
  check_live(comm, api);
  *out = value_of_comm;
  return ncclSuccess;
}
}  // namespace

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return query(comm, count, "ncclCommCount", comm != nullptr ? comm->nranks : 0);
}
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return query(comm, device, "ncclCommCuDevice", comm != nullptr ? comm->device : 0);
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return query(comm, rank, "ncclCommUserRank", comm != nullptr ? comm->rank : 0);
}

// libnccl 2.28.9's own strings, byte for byte (checked against the library; ncclGetLastError has the details here).
const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  thread_local std::string copy;
  std::lock_guard<std::mutex> lock(state_mutex());
  const auto& comms = all_comms();
  const bool known = std::any_of(comms.begin(), comms.end(), [&](const auto& c) { return c.get() == comm; });
  std::lock_guard<std::mutex> guard(message_mutex());
  copy = known && !comm->message.empty() ? comm->message : global_last_error();
  return copy.c_str();
}

void nccl_set_low_precision_sum(NcclLowPrecisionSum mode) {
  std::lock_guard<std::mutex> lock(state_mutex());
  controls().low_precision_sum = mode;
}
void nccl_set_fp8_overflow(NcclFp8Overflow mode) {
  std::lock_guard<std::mutex> lock(state_mutex());
  controls().fp8_overflow = mode;
}
void nccl_set_reduce_scatter_in_place_rest(NcclInPlaceRest mode) {
  std::lock_guard<std::mutex> lock(state_mutex());
  controls().in_place_rest = mode;
}
void nccl_set_report_peer_abort(bool report) {
  std::lock_guard<std::mutex> lock(state_mutex());
  controls().report_peer_abort = report;
}
void nccl_set_nonblocking_in_progress(bool in_progress) {
  std::lock_guard<std::mutex> lock(state_mutex());
  controls().nonblocking_in_progress = in_progress;
}
void nccl_inject_failure(ncclComm_t comm, ncclResult_t error) {
  std::lock_guard<std::mutex> lock(state_mutex());
  check_live(comm, "nccl_inject_failure");
  comm->injected = error;
}
void nccl_reset_controls() {
  std::lock_guard<std::mutex> lock(state_mutex());
  controls() = Controls{};
}

}  // namespace mpt::cuda_emu
