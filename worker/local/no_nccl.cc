// LocalNccl in a build without NCCL (or without CUDA): a device tensor is refused.

#include "common/util/status.h"
#include "worker/local/local_nccl.h"

namespace ferry {

bool LocalNccl::Built() { return false; }

std::unique_ptr<LocalNccl> LocalNccl::Create(int local_rank, int local_size, int64_t op_timeout_ms,
                                             int average_over, MachinePushPull push_pull,
                                             SendStep send_step,
                                             OnFailure on_failure) {
  throw FerryError(ErrorCode::kInvalidArgument,
                   "push_pull of a CUDA device tensor: this Ferry was built without NCCL "
                   "(rebuild with CUDA and NCCL found: FERRY_WITH_CUDA=ON, FERRY_NCCL_INCLUDE_DIR "
                   "and FERRY_NCCL_LIBRARY), or copy the tensor to host memory first");
}

}  // namespace ferry
