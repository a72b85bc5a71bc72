#include "worker/membership_epochs.h"

#include <glog/logging.h>

#include <chrono>
#include <thread>

#include "common/util/clock.h"
#include "common/util/logging.h"
#include "common/util/status.h"
#include "common/util/strings.h"

namespace ferry {

std::vector<double> MembershipEpochs::ConnectServers(WorkerContext& ctx, const NodeTable& table) {
  std::vector<double> weights(table.num_servers(), 0.0);  // an empty slot weighs 0
  for (const auto& s : table.Servers()) {
    weights[s.rank()] = s.weight();
    // A no-op for a server already connected there; a promoted spare (the slot's id at a
    // new address) replaces the dead server's connection.
    ctx.van.Connect(s.id(), StrCat("tcp://", s.host(), ":", s.port()), ctx.cluster.routing_id(),
                    ctx.config.transport.control_lane);
  }
  return weights;
}

void MembershipEpochs::TakeMembership(WorkerContext& ctx, const NodeTable& table) {
  ctx.rank = table.Contains(ctx.my_id) ? table.node(ctx.my_id).rank() : -1;
  ctx.num_workers = table.num_workers();
  ctx.live_servers.assign(table.num_servers(), false);
  for (const auto& s : table.Servers()) ctx.live_servers[s.rank()] = true;
  ctx.epoch = table.proto().epoch();
  SetLogNodeName(StrCat("worker ", ctx.rank.load()));
}

void MembershipEpochs::FailOperations(const std::string& reason, ErrorCode code) {
  ctx_.failure = reason;
  ctx_.failure_code = code;
  parts_.sequencer.FailAll();
  if (code == ErrorCode::kMembershipChanged) parts_.kinds.AbandonInFlight();
  ctx_.table.FailAll(reason, code);  // after the kinds: it wakes the waiters
  parts_.join.OnFailure();
}

void MembershipEpochs::FailForGood(const std::string& reason) {
  MutexLock lock(ctx_.mu);
  // A failure for good replaces a membership change waiting for Reset().
  if (!ctx_.failure.empty() && ctx_.failure_code != ErrorCode::kMembershipChanged) return;
  FailOperations(reason, ErrorCode::kPeerFailed);
}

void MembershipEpochs::OnMembership(const NodeTable& table) {
  MutexLock lock(ctx_.mu);
  if (!ctx_.failure.empty()) return;  // failed for good, or a change already pending
  if (table.proto().epoch() <= ctx_.epoch.load()) return;  // the table it started with
  const std::string reason =
      StrCat("the job's membership changed (epoch ", table.proto().epoch(), ": ",
             table.Servers().size(), " servers, ", table.num_workers(), " workers; this worker ",
             "was rank ", ctx_.rank.load(), " of ", ctx_.num_workers.load(),
             "): the operation was abandoned; restore the last committed state and call reset() "
             "(ferry.torch.elastic does both)");
  LOG(WARNING) << reason;
  FailOperations(reason, ErrorCode::kMembershipChanged);
}

bool MembershipEpochs::HostsUpdated() {
  if (!ctx_.config.cluster.elastic) return false;
  int32_t waiting = ctx_.cluster.workers_waiting() > 0 ? 1 : 0;
  sum_(&waiting);
  MutexLock lock(ctx_.mu);
  admitting_ = waiting > 0;
  return admitting_;
}

void MembershipEpochs::Admit() {
  admitting_ = false;
  const uint32_t epoch = ctx_.epoch.load();
  const proto::CatalogSnapshot snapshot = parts_.catalog.Snapshot();
  ctx_.cluster.Admit(ctx_.rank == 0 ? &snapshot : nullptr);
  const int64_t deadline = NowMs() + ctx_.config.cluster.op_timeout_ms;
  while (ctx_.failure.empty()) {
    FERRY_ENFORCE(NowMs() < deadline, ErrorCode::kTimeout, "reset(): the epoch admitting the ",
                  "workers waiting to join did not come within ", ctx_.config.cluster.op_timeout_ms,
                  " ms (FERRY_OP_TIMEOUT_MS); this worker is in epoch ", epoch);
    MutexUnlock unlock(ctx_.mu);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void MembershipEpochs::Reset() {
  FERRY_ENFORCE(ctx_.config.cluster.elastic, ErrorCode::kInvalidArgument,
                "reset(): only in elastic training (FERRY_ELASTIC=1)");
  MutexLock lock(ctx_.mu);
  if (ctx_.failure.empty() && admitting_) Admit();
  if (ctx_.failure.empty()) return;  // nothing changed
  FERRY_ENFORCE(ctx_.failure_code == ErrorCode::kMembershipChanged, ctx_.failure_code,
                ctx_.failure);
  const NodeTable& table = ctx_.cluster.table();  // the newest: changes since count too
  TakeMembership(ctx_, table);
  const size_t moved = parts_.catalog.SetServerWeights(ConnectServers(ctx_, table));
  parts_.catalog.ResetRounds();
  parts_.sequencer.Reset();
  ctx_.table.RestartCounts();
  CHECK(ctx_.table.Reopen()) << "the operation table failed otherwise: " << ctx_.failure;
  ctx_.failure.clear();
  ctx_.failure_code = ErrorCode::kPeerFailed;
  LOG(INFO) << "reset to membership epoch " << table.proto().epoch() << ": worker "
            << ctx_.rank.load() << " of " << ctx_.num_workers.load() << ", "
            << table.Servers().size() << " live servers"
            << (moved > 0 ? StrCat("; ", moved, " partitions placed again") : std::string());
}

void MembershipEpochs::Suspend() {
  {
    MutexLock lock(ctx_.mu);
    if (ctx_.shut_down) return;
    parts_.sequencer.WaitUntilIdleOrThrow("shutdown");
    ctx_.shut_down = true;
    suspended_ = true;
    // Every declaration goes: the next init() starts with an empty catalog whose ids go on,
    // identically on every worker, and the servers free the keys.
    for (const std::shared_ptr<TensorInfo>& t : parts_.catalog.UndeclareAll()) {
      parts_.sequencer.Superseded(t);
    }
  }
  ctx_.cluster.Suspend();
  LOG(INFO) << "worker " << ctx_.rank << " shut down; it may init() again";
}

void MembershipEpochs::Resume() {
  {
    MutexLock lock(ctx_.mu);
    if (!suspended_) return;
  }
  ctx_.cluster.Resume();  // throws if the job ended or failed meanwhile
  MutexLock lock(ctx_.mu);
  ctx_.ThrowIfFailed();
  suspended_ = false;
  ctx_.shut_down = false;
  LOG(INFO) << "worker " << ctx_.rank << " initialised again";
}

bool MembershipEpochs::BeginShutdown() {
  MutexLock lock(ctx_.mu);
  if (ctx_.shut_down && !suspended_) return false;
  ctx_.shut_down = true;
  suspended_ = false;
  parts_.sequencer.WaitUntilIdle();
  return true;
}

}  // namespace ferry
