// The Worker's step boundaries (worker.h, StepBoundary) and what they delimit for backup
// workers: the ranks in the sums of the last step (Contributors; server/stragglers.h).

#include "common/types/process_set.h"
#include "common/util/error.h"
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

}  // namespace ferry
