#include "worker/local/local_group.h"

#include "common/util/status.h"
#include "worker/local/local_peer.h"
#include "worker/local/local_root.h"
#include "worker/worker.h"

namespace ferry {

std::unique_ptr<Collective> LocalGroup::Create(const Config& config) {
  FERRY_ENFORCE(config.local.size == 1 || !config.server.async, ErrorCode::kInvalidConfig,
                "FERRY_ENABLE_ASYNC=1 is not supported with FERRY_LOCAL_SIZE=", config.local.size);
  if (config.local.size == 1) return Worker::Create(config);
  if (config.local.rank == 0) return LocalRoot::Create(config);
  return LocalPeer::Create(config);
}

Handle LocalMember::PushPullRowsAsync(const std::string& name, const int64_t*, uint64_t,
                                      const void*, void*, DataType, bool, std::optional<int>,
                                      CompletionCallback) {
  throw FerryError(ErrorCode::kInvalidArgument,
                   StrCat("push_pull_rows of '", name,
                          "' is not supported with FERRY_LOCAL_SIZE=", config_.local.size,
                          ": the local group reduces dense tensors only (its ranks' row lists "
                          "would have to be merged first); run one process per DMLC_WORKER_ID "
                          "for sparse rows"));
}

void LocalMember::SetScheduling(int64_t partition_bytes, int64_t credit_bytes) {
  MachineWorker("SetScheduling").SetScheduling(partition_bytes, credit_bytes);
}

SchedulingChoice LocalMember::scheduling() const {
  return MachineWorker("scheduling()").scheduling();
}

std::string LocalMember::scheduling_policy() const {
  return MachineWorker("scheduling_policy()").scheduling_policy();
}

int LocalMember::Join() {
  throw FerryError(
      ErrorCode::kInvalidArgument,
      StrCat("Join (uneven data) is not supported with FERRY_LOCAL_SIZE=", config_.local.size,
             ": the local group reduces every rank's tensors together, so every "
             "local rank must push every round"));
}

DeviceTensor CheckedDeviceTensor(const std::string& name, const void* input, void* output,
                                 DataType dtype, uint64_t count, bool average, void* stream) {
  FERRY_ENFORCE(LocalNccl::Built(), ErrorCode::kInvalidArgument, "push_pull of '", name,
                "': a CUDA device tensor, but this Ferry was built without NCCL (rebuild with "
                "CUDA and NCCL found), or copy the tensor to host memory first");
  return DeviceTensor{name, input, output, dtype, count, average, stream};
}

}  // namespace ferry
