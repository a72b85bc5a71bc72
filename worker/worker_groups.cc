// The Worker's process sets and point-to-point routing (worker.h; process_sets.h,
// point_to_point.h): what the Worker adds around those two parts.

#include <glog/logging.h>

#include "common/util/logging.h"
#include "worker/worker.h"

namespace ferry {

TensorCatalog& Worker::CatalogOf(const std::string& name) {
  TensorCatalog* set = sets_->OfName(name);
  return set ? *set : *catalog_;
}

TensorCatalog& Worker::CatalogOfId(uint32_t id) {
  TensorCatalog* set = sets_->OfId(id);
  return set ? *set : *catalog_;
}

void Worker::RefuseWithProcessSets(const char* what) {
  MutexLock lock(ctx_.mu);
  FERRY_ENFORCE(sets_->empty(), ErrorCode::kInvalidArgument, what, ": not while process sets "
                "are registered (remove_process_set every set first)");
}

int Worker::AddProcessSet(const std::vector<int>& ranks, int id) {
  FERRY_ENFORCE(!config_.cluster.elastic && !config_.server.async, ErrorCode::kInvalidArgument,
                "process sets: not with elastic training (FERRY_ELASTIC=1) nor asynchronous "
                "training (FERRY_ENABLE_ASYNC=1)");
  MutexLock lock(ctx_.mu);
  ctx_.CheckRunning("add_process_set", "");
  return sets_->Add(ranks, ctx_.num_workers, id);
}

void Worker::RemoveProcessSet(int set) {
  MutexLock lock(ctx_.mu);
  sets_->Remove(set);
}

uint32_t Worker::DeclareInProcessSet(int set, const std::string& name, DataType dtype,
                                const std::vector<int64_t>& shape, std::optional<int> priority) {
  CheckUserTensorName("declaration", name);
  MutexLock lock(ctx_.mu);
  ctx_.CheckRunning("declaration", name);
  FERRY_ENFORCE(sets_->SetOf(name) == set || !catalog_->Find(name), ErrorCode::kInvalidArgument,
                "tensor '", name, "' was declared in the global set, not in process set ", set);
  std::shared_ptr<TensorInfo> superseded;
  std::shared_ptr<TensorInfo> t =
      sets_->Declare(set, ctx_.rank, name, dtype, shape, priority, &superseded);
  if (superseded) {
    counters_.redeclarations++;
    sequencer_->Superseded(superseded);
  }
  return t->id;
}

void Worker::OnPointToPoint(Message&& m, const Origin& origin) {
  OperationKinds* kinds = this->kinds();
  if (kinds == nullptr) {
    LOG_EVERY_N(WARNING, 100) << "dropped " << Describe(m) << ": before the worker started";
  } else if (m.type() == proto::P2P_SEND && origin.inbound) {
    p2p_->OnSend(std::move(m), origin);
  } else if (m.type() == proto::P2P_ACK && !origin.inbound && m.sender() == origin.peer &&
             cluster_.table().IsWorker(origin.peer)) {
    kinds->OnReply(m);
  } else {
    LOG_EVERY_N(WARNING, 100) << "dropped " << Describe(m) << ": not on a worker's connection";
  }
}

}  // namespace ferry
