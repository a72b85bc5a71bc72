// LocalNccl with CUDA and NCCL (FERRY_HAVE_NCCL): see local_nccl.h. The engine is
// NcclGroup (nccl_group.h: the book of rounds in nccl_group.cc, the GPU steps in
// nccl_steps.cc, the stateless calls in nccl_calls.cc). The same sources compile
// against the CUDA/NCCL stub of tests/stubs/cuda_nccl in the stub builds
// (FERRY_NCCL_STUB=ON), so the thread-safety analysis and the sanitizers see them.

#include "worker/local/local_nccl.h"

#include "worker/local/nccl_group.h"

namespace ferry {

bool LocalNccl::Built() { return true; }

std::unique_ptr<LocalNccl> LocalNccl::Create(int local_rank, int local_size, int64_t op_timeout_ms,
                                             int average_over, MachinePushPull push_pull,
                                             SendStep send_step, OnFailure on_failure) {
  return std::make_unique<NcclGroup>(local_rank, local_size, op_timeout_ms, average_over,
                                     std::move(push_pull), std::move(send_step),
                                     std::move(on_failure));
}

}  // namespace ferry
