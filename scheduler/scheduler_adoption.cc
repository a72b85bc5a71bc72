// The scheduler's failover (scheduler/adoption.h): a running job's nodes rejoin, the
// scheduler adopts the job and leads it under a new term; a node that rejoins late is
// taken in as it comes.

#include <glog/logging.h>

#include <map>
#include <string>

#include "common/util/clock.h"
#include "common/util/error.h"
#include "scheduler/scheduler.h"

namespace ferry {

void Scheduler::OnRejoin(const Message& m, const std::string& identity) {
  const proto::Rejoin& r = m.envelope.rejoin();
  const int id = r.table().your_id();
  const std::string refusal = adoption_.Refusal(identity, r);
  if (!refusal.empty()) {
    Refuse(identity, refusal);
    return;
  }
  if (phase_ == Phase::kRunning) {
    auto member = members_.find(id);
    if (member != members_.end() && member->second.identity == identity) {
      member->second.last_heartbeat_ms = NowMs();  // rejoined late, or again: taken in
      ApplyRejoin(id, r);
      MaybeEndJob();
      return;
    }
    Message failed = NodeFailedMessage(
        id, StrCat("node ", id, " rejoined, but membership epoch ", membership_.epoch(),
                   " of the job no longer has it (the scheduler before presumed it dead)"));
    failed.envelope.set_term(term_);
    van_.Reply(identity, std::move(failed));
    return;
  }
  if (phase_ != Phase::kRegistering) return;
  if (!adoption_.started()) {
    // Registrations that came first are of this job's newcomers (a worker waiting to join, a
    // server waiting as a spare): they send them again, and are taken once the job is.
    LOG(WARNING) << "nodes of a running job reach this scheduler: adopting the job"
                 << (pending_.empty() ? std::string()
                                      : StrCat(" (", pending_.size(), " registration(s) that came "
                                               "first wait for it)"));
    pending_.clear();
  }
  if (adoption_.Add(identity, r, NowMs())) {
    LOG(INFO) << "node " << id << " rejoined (term " << r.term() << "): " << adoption_.Progress();
  }
  if (adoption_.Ready(NowMs(), config_.cluster.heartbeat_timeout_ms)) LeadAdoptedJob();
}

void Scheduler::LeadAdoptedJob() {
  const std::string progress = adoption_.Progress();
  membership_.Adopt(adoption_.table());
  term_ = adoption_.term();
  std::map<int, Adoption::Node> nodes = adoption_.TakeNodes();
  // Every node of the table is a member; one on an older table takes this one.
  PublishTable();
  std::string missing;
  for (auto& [id, member] : members_) {
    auto it = nodes.find(id);
    if (it != nodes.end() && it->second.identity == member.identity) continue;
    // Silent since the adoption began: the heartbeat watch finds it if it stays so.
    member.last_heartbeat_ms = adoption_.started_ms();
    missing += StrCat(missing.empty() ? "" : ", ", table().Describe(id));
  }
  LOG(WARNING) << "adopted the running job (term " << term_ << "): " << progress
               << (missing.empty() ? std::string()
                                   : StrCat("; not yet heard from: ", missing));
  phase_ = Phase::kRunning;
  cv_.NotifyAll();
  const uint32_t epoch = membership_.epoch();
  for (const auto& [id, node] : nodes) {  // every count before any arrival
    for (const auto& done : node.rejoin.done()) {
      if (done.epoch() == epoch) barriers_.Seed(done);
    }
  }
  for (const auto& [id, node] : nodes) {
    auto member = members_.find(id);
    if (member == members_.end() || member->second.identity != node.identity) {
      Message failed = NodeFailedMessage(
          id, StrCat("node ", id, " is not in membership epoch ", epoch,
                     " of the job (the scheduler before presumed it dead)"));
      failed.envelope.set_term(term_);
      van_.Reply(node.identity, std::move(failed));
      continue;
    }
    ApplyRejoin(id, node.rejoin);
    for (const Message& m : node.held) OnMemberMessage(m);
  }
  MaybeEndJob();
}

void Scheduler::ApplyRejoin(int id, const proto::Rejoin& r) {
  const uint32_t epoch = membership_.epoch();
  for (const auto& done : r.done()) {
    if (done.epoch() == epoch) barriers_.Seed(done);
  }
  if (table().IsWorker(id) && r.finalized()) {
    finalized_.insert(id);
    suspended_.erase(id);
  } else if (table().IsWorker(id) && r.suspended()) {
    suspended_.insert(id);
  }
  for (const Message& b : WaitingBarriers(r)) OnBarrier(b);  // those of this epoch count
}

}  // namespace ferry
