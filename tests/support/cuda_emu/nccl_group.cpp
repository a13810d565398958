// tests/support/cuda_emu/nccl_group.cpp: ncclGroupStart/ncclGroupEnd: per-thread recording of calls, issued together at the outermost ncclGroupEnd.
#include <utility>

#include "nccl_internal.h"

namespace mpt::cuda_emu::nccl {
namespace {

struct GroupState {
  int depth = 0;
  std::vector<std::shared_ptr<Call>> calls;
  std::vector<std::pair<ncclComm*, std::shared_ptr<Clique>>> inits;
  ncclResult_t error = ncclSuccess;  // the first failing call inside the group; ncclGroupEnd returns it
};

thread_local GroupState t_group;

ncclResult_t end_inits(const std::vector<std::pair<ncclComm*, std::shared_ptr<Clique>>>& inits) {
  ncclResult_t result = ncclSuccess;
  for (const auto& [comm, clique] : inits) {  // join every rank first: one thread may drive all of them
    const ncclResult_t r = join_clique(comm, clique);
    if (r != ncclSuccess && result == ncclSuccess) result = r;
  }
  if (result != ncclSuccess) return result;
  bool any_nonblocking = false;
  for (const auto& [comm, clique] : inits) {
    if (!comm->blocking) {
      any_nonblocking = true;
      continue;
    }
    const ncclResult_t r = wait_for_clique(comm);
    if (r != ncclSuccess && result == ncclSuccess) result = r;
  }
  return result == ncclSuccess && any_nonblocking ? ncclInProgress : result;
}

}  // namespace

bool in_group() { return t_group.depth > 0; }

void group_add_call(std::shared_ptr<Call> call) { t_group.calls.push_back(std::move(call)); }

void group_add_error(ncclResult_t error) {
  if (t_group.error == ncclSuccess) t_group.error = error;
}

void group_add_init(ncclComm* comm, std::shared_ptr<Clique> clique) {
  t_group.inits.emplace_back(comm, std::move(clique));
}

}  // namespace mpt::cuda_emu::nccl

namespace mpt::cuda_emu {
using namespace nccl;

ncclResult_t ncclGroupStart() {
  ++t_group.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (t_group.depth == 0) return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd without a matching ncclGroupStart");
  if (--t_group.depth > 0) return ncclSuccess;
  GroupState group = std::move(t_group);
  t_group = GroupState{};
  if (group.error != ncclSuccess) return group.error;  // as NCCL: a failed call inside cancels the whole group
  if (!group.calls.empty() && !group.inits.empty()) {
    return fail(nullptr, ncclInvalidUsage,
                "ncclGroupEnd: ncclCommInitRank cannot share a group with collectives; nothing was issued");
  }
  if (!group.inits.empty()) return end_inits(group.inits);
  if (group.calls.empty()) return ncclSuccess;
  return issue(std::move(group.calls));
}

}  // namespace mpt::cuda_emu
