// The scheduler's elastic membership (FERRY_ELASTIC=1; docs/reliability.md): spares that
// wait to replace a dead server, workers that wait to join a running job until the
// workers agree to admit them, and the next epoch when a member dies.

#include <glog/logging.h>

#include <algorithm>
#include <string>

#include "common/util/clock.h"
#include "common/util/error.h"
#include "scheduler/scheduler.h"

namespace ferry {

void Scheduler::OnSpare(const Message& m, const std::string& identity) {
  const int64_t now = NowMs();
  if (m.type() == proto::HEARTBEAT) {
    auto it = spares_.find(identity);
    if (it == spares_.end()) {
      // A spare of a job this scheduler adopts, or has not yet: it registers again.
      van_.Reply(identity, MakeMessage(proto::REJOIN_ASK, kSchedulerId));
      return;
    }
    it->second = now;
    Message ack = MakeMessage(proto::HEARTBEAT_ACK, kSchedulerId);
    ack.envelope.set_term(term_);
    van_.Reply(identity, std::move(ack));
    return;
  }
  const proto::RegisterRequest& r = m.envelope.register_request();
  if (!config_.cluster.elastic || r.role() != proto::SERVER) {
    Refuse(identity, StrCat(DescribeRegistration(r), " registers as a spare (FERRY_SPARE=1), but ",
                            r.role() != proto::SERVER ? "only servers can be spares"
                                                      : "this job is not elastic (FERRY_ELASTIC=1 "
                                                        "on the scheduler)"));
    return;
  }
  if (phase_ != Phase::kRegistering && phase_ != Phase::kRunning) return;  // ending anyway
  if (!spares_.emplace(identity, now).second) return;  // a repeated REGISTER
  membership_.AddSpare({identity, r});
  Message wait = MakeMessage(proto::NODE_TABLE, kSchedulerId);
  wait.envelope.mutable_node_table()->set_spare(true);
  wait.envelope.mutable_node_table()->set_your_id(-1);
  wait.envelope.set_term(term_);
  van_.Reply(identity, std::move(wait));
  LOG(INFO) << "spare " << DescribeRegistration(r) << " registered; " << membership_.spares()
            << " spare(s) wait for a dead server's slot";
}

void Scheduler::CheckSpares() {
  const int64_t now = NowMs();
  for (auto it = spares_.begin(); it != spares_.end();) {
    if (now - it->second <= config_.cluster.heartbeat_timeout_ms) {
      ++it;
      continue;
    }
    const std::string why = StrCat("a spare server sent no heartbeat for ", now - it->second,
                                   " ms (FERRY_HEARTBEAT_TIMEOUT_MS=",
                                   config_.cluster.heartbeat_timeout_ms,
                                   "); it no longer waits for a slot");
    LOG(WARNING) << why;
    Message failed = NodeFailedMessage(-1, why);
    failed.envelope.set_term(term_);
    van_.Reply(it->first, std::move(failed));
    membership_.RemoveSpare(it->first);
    it = spares_.erase(it);
  }
}

void Scheduler::OnJoiner(const Message& m, const std::string& identity) {
  const proto::RegisterRequest& r = m.envelope.register_request();
  const int live = table().num_workers();
  if (live + static_cast<int>(joiners_.size()) >= config_.cluster.max_workers) {
    Refuse(identity, StrCat(DescribeRegistration(r), " wants to join, but the job has ", live, " workers and ",
                            joiners_.size(), " waiting, FERRY_MAX_WORKERS=",
                            config_.cluster.max_workers));
    return;
  }
  joiners_.push_back({identity, r});
  LOG(INFO) << DescribeRegistration(r) << " waits to join at the workers' next commit (" << joiners_.size()
            << " waiting)";
  if (below_min_since_ms_ > 0 &&
      live + static_cast<int>(joiners_.size()) >= config_.cluster.min_workers) {
    // Enough workers again: the survivors take the epoch without the dead (they are held
    // in the old one), and admit the joiners at their next commit.
    LOG(WARNING) << "membership epoch " << membership_.epoch() << ": " << live
                 << " workers, with enough waiting to join to reach FERRY_MIN_WORKERS="
                 << config_.cluster.min_workers;
    below_min_since_ms_ = 0;
    PublishTable();
    MaybeEndJob();
  }
}

void Scheduler::OnAdmit(const Message& m) {
  // Rank 0's ADMIT of the current epoch carries the catalog the joiners start from; every
  // worker sends one after the same commit, the others' change nothing.
  if (joiners_.empty() || m.envelope.epoch() != membership_.epoch() ||
      !table().IsWorker(m.sender()) || table().node(m.sender()).rank() != 0 ||
      !m.envelope.has_catalog()) {
    return;
  }
  const size_t added = joiners_.size();
  membership_.WithWorkers(joiners_);
  joiners_.clear();
  barriers_.Clear();  // their waiters throw kMembershipChanged at the new table
  stalls_.Restart(table().num_workers());
  LOG(INFO) << "membership epoch " << membership_.epoch() << ": " << added
            << " worker(s) joined at the workers' commit (" << table().Servers().size()
            << " servers, " << table().num_workers() << " workers)";
  PublishTable(&m.envelope.catalog());
}

void Scheduler::DropMember(int id, const std::string& why) {
  LOG(WARNING) << why;
  metrics_.Died(id, why);
  // Should it be alive after all (late heartbeats), it learns why it is out of the job.
  SendTo(id, NodeFailedMessage(id, StrCat(why, "; the job goes on without it")));
  members_.erase(id);
  barriers_.Clear();  // their waiters throw kMembershipChanged at the new table
  std::string change;
  if (table().IsServer(id)) {
    const size_t spares = membership_.spares();
    const std::string dead = table().Describe(id);
    membership_.WithoutServer(id);
    if (table().Servers().empty()) {
      FailJob(id, StrCat(why, "; no live server is left (FERRY_SPARE=1 servers replace dead ones)"));
      return;
    }
    change = membership_.spares() < spares
                 ? StrCat("a spare took the slot of ", dead, ": ", table().Describe(id))
                 : StrCat(dead, "'s partitions move to the ", table().Servers().size(),
                          " live servers");
  } else {
    finalized_.erase(id);
    suspended_.erase(id);
    membership_.WithoutWorker(id);
    stalls_.Restart(table().num_workers());
    change = StrCat(table().num_workers(), " workers remain, renumbered 0..",
                    table().num_workers() - 1, " in their old order");
    if (table().num_workers() < config_.cluster.min_workers && below_min_since_ms_ == 0) {
      // No epoch below the minimum: the workers would only train on too few.
      below_min_since_ms_ = NowMs();
      below_min_why_ = StrCat("only ", table().num_workers(), " live workers, fewer than FERRY_MIN_WORKERS=",
                              config_.cluster.min_workers, " (", why, ")");
      LOG(WARNING) << below_min_why_ << "; waiting at most "
                   << config_.cluster.min_workers_timeout_ms
                   << " ms (FERRY_MIN_WORKERS_TIMEOUT_MS) for workers to join";
    }
  }
  if (below_min_since_ms_ > 0) return;  // no epoch below the minimum (a server's death too)
  LOG(WARNING) << "membership epoch " << membership_.epoch() << ": " << change << " ("
               << table().Servers().size() << " servers, " << table().num_workers() << " workers)";
  PublishTable();
  MaybeEndJob();
}

}  // namespace ferry
