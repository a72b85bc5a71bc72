// The Worker's step boundaries (worker.h, StepBoundary) and what they mean for backup
// workers (server/stragglers.h): the ranks in the sums of the last step (Contributors), and
// the averages a late worker takes without contributing (PullAverageAsync).

#include "common/types/process_set.h"
#include "common/util/error.h"
#include "worker/reserved_tensor_names.h"
#include "worker/worker.h"

namespace ferry {

void Worker::StepBoundary() {
  {
    MutexLock lock(ctx_.mu);
    ctx_.last_step_left_out = std::move(ctx_.step_left_out);
    ctx_.step_left_out.clear();
    ctx_.stepped = true;
  }
  scheduling_->StepBoundary();
}

std::vector<int> Worker::Contributors(const std::string& name) {
  std::string left_out;
  {
    MutexLock lock(ctx_.mu);
    if (name.empty()) {
      left_out = ctx_.stepped ? ctx_.last_step_left_out : ctx_.step_left_out;
    } else {
      FERRY_ENFORCE(catalog_ != nullptr, ErrorCode::kInvalidArgument,
                    "contributors('", name, "'): the worker has not started");
      std::shared_ptr<TensorInfo> t = CatalogOf(name).Find(name);
      FERRY_ENFORCE(t != nullptr, ErrorCode::kInvalidArgument, "contributors('", name,
                    "'): no tensor of that name was declared");
      left_out = t->last_left_out;
    }
  }
  std::vector<int> ranks;
  for (int r = 0; r < size(); ++r) {
    if (!IsProcessSetMember(left_out, r)) ranks.push_back(r);
  }
  return ranks;
}

Handle Worker::PullAverageAsync(const std::string& name, void* output, DataType dtype,
                                uint64_t count, CompletionCallback done) {
  CheckUserTensorName("pull_average", name);
  FERRY_ENFORCE(config_.server.backup_workers > 0, ErrorCode::kInvalidArgument,
                "pull_average of '", name, "': needs FERRY_BACKUP_WORKERS > 0 (without backup "
                "workers every round waits for every worker's push)");
  FERRY_ENFORCE(IsFloatingPoint(dtype), ErrorCode::kInvalidArgument, "pull_average of '", name,
                "': ", DataTypeName(dtype), " rounds wait for every worker; only floating-point "
                "averages may be sat out");
  return StartPushPull(name, nullptr, output, dtype, count, /*average=*/true, std::nullopt,
                       std::move(done), ReduceOp::kSum, nullptr, nullptr, /*sit_out=*/true);
}

}  // namespace ferry
