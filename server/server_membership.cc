// The server's side of the job's membership: joins (Horovod's join: a joined worker's
// rounds no longer wait for it), retired declarations (their keys dropped once every
// worker retired them), and membership epochs, each carried to every engine in order with
// its other work.

#include <glog/logging.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/util/logging.h"
#include "common/util/status.h"
#include "server/server.h"

namespace ferry {

void Server::OnJoin(const Message& m, const std::string& identity) {
  int rank = cluster_.table().node(m.sender()).rank();
  if (config_.server.async) {
    counters_.Refuse(Refusal::kModeMismatch);
    ReplyError(identity, m.envelope.request_id(), 0, ErrorCode::kInvalidArgument,
               StrCat("worker ", rank,
                      " joined, but in asynchronous training no push waits for "
                      "other workers: there is nothing to join"));
    return;
  }
  // Every engine sees the JOIN after the pushes this worker sent before it (same
  // connection, queued in order, and a JOIN is a fence in the engine's queue: see
  // engine_queue.h), so a round it already pushed still counts it.
  ToEveryEngine(Request{Message(m), identity, rank}, /*fence=*/true);
  joined_[rank] = true;
  const int position = static_cast<int>(std::count(joined_.begin(), joined_.end(), true));
  bool all = position == num_workers_;
  LOG(INFO) << "worker " << rank << " joined"
            << (all ? "; every worker has joined: keys restart at round 0" : "");
  if (all) joined_.assign(num_workers_, false);
  Reply ack;
  ack.kind = Reply::Kind::kJoinAck;
  ack.identity = identity;
  ack.request_id = m.envelope.request_id();
  ack.sum.round = static_cast<uint32_t>(position);  // who joined last (join_protocol.h)
  SendReply(ack);
}

void Server::OnRetire(const Message& m, const std::string& identity) {
  const int rank = cluster_.table().node(m.sender()).rank();
  ToEveryEngine(Request{Message(m), identity, rank}, /*fence=*/false);
}

void Server::ToEveryEngine(const Request& request, bool fence) {
  for (auto& e : engines_) {
    {
      MutexLock lock(e->mu);
      if (fence) {
        e->queue.PushFence(Request(request));
      } else {
        e->queue.Push(Request(request), std::numeric_limits<int32_t>::min());
      }
    }
    e->cv.NotifyOne();
  }
}

void Server::OnMembership(const NodeTable& table) {
  if (config_.server.backup_workers >= table.num_workers() &&
      config_.server.backup_workers < num_workers_) {
    LOG(WARNING) << "FERRY_BACKUP_WORKERS=" << config_.server.backup_workers << " but epoch "
                 << table.proto().epoch() << " has " << table.num_workers()
                 << " workers: rounds close without at most " << table.num_workers() - 1
                 << " of them until more workers join";
  }
  num_workers_ = table.num_workers();
  joined_.assign(num_workers_, false);
  Message fence = MakeMessage(proto::NODE_TABLE, cluster_.my_id());
  *fence.envelope.mutable_node_table() = table.proto();
  fence.envelope.set_epoch(table.proto().epoch());
  ToEveryEngine(Request{std::move(fence), std::string(), -1}, /*fence=*/true);
}

void Server::HandleEpoch(Engine* engine, const proto::NodeTable& table) {
  engine->epoch = table.epoch();
  engine->num_workers = table.num_workers();
  engine->joined.assign(engine->num_workers, false);
  engine->retirements = std::make_unique<TensorRetirements>(engine->num_workers);
  engine->dense->Restart(KeyProtocol::RestartCause::kNewEpoch);
  engine->rows->Restart(KeyProtocol::RestartCause::kNewEpoch);
}

void Server::HandleRetire(Engine* engine, int rank, uint32_t tensor) {
  if (engine->retirements->Note(tensor, rank)) {
    // Rounds of it that wait for pushes now wait for a worker that is done with it.
    const std::string why = engine->retirements->Refusal(tensor, -1);
    engine->dense->RefuseOpenRounds(tensor, why);
    engine->rows->RefuseOpenRounds(tensor, why);
  }
  RetireComplete(engine, engine->joined);
}

void Server::RetireComplete(Engine* engine, const std::vector<bool>& joined) {
  for (uint32_t tensor : engine->retirements->TakeComplete(joined)) {
    const std::string why = StrCat("tensor ", tensor, " was retired by every worker");
    engine->dense->Retire(tensor, why);
    engine->rows->Retire(tensor, why);
    VLOG(1) << "tensor " << tensor << " retired: its keys are dropped";
  }
}

std::string Server::RetiredRefusal(const Engine& engine, const Request& request) const {
  const uint32_t tensor = KeyTensor(request.envelope().key());
  // A worker that has not received the old declaration's last sum may ask for it again;
  // only one that retired the tensor has no business with it.
  if (request.message.type() == proto::RESEND_SUM &&
      !engine.retirements->RetiredBy(tensor, request.rank)) {
    return "";
  }
  // So may a worker whose last push came late (backup workers): its round is closed, and
  // the others retired the tensor at their end (shutdown) or re-declared it meanwhile.
  if (request.message.type() == proto::PUSH &&
      !engine.retirements->RetiredBy(tensor, request.rank) &&
      engine.dense->ForClosedRound(request)) {
    return "";
  }
  return engine.retirements->Refusal(tensor, request.rank);
}

void Server::HandleJoin(Engine* engine, int rank) {
  engine->joined[rank] = true;
  if (std::find(engine->joined.begin(), engine->joined.end(), false) == engine->joined.end()) {
    // Every worker joined: nobody pushes until they all leave Join(), and then every
    // worker restarts its rounds at 0. Every retirement is complete.
    RetireComplete(engine, engine->joined);
    engine->joined.assign(engine->num_workers, false);
    engine->dense->Restart(KeyProtocol::RestartCause::kAllJoined);
    engine->rows->Restart(KeyProtocol::RestartCause::kAllJoined);
    return;
  }
  engine->rows->Join();
  engine->dense->Join();
  RetireComplete(engine, engine->joined);
}

}  // namespace ferry
