#include "common/cluster/scheduler_link.h"

#include <glog/logging.h>

#include <algorithm>

#include "common/cluster/node_table.h"
#include "common/util/clock.h"
#include "common/util/strings.h"

namespace ferry {

SchedulerLink::SchedulerLink(const Config& config, Van* van, std::string routing_id)
    : config_(config), van_(van), routing_id_(std::move(routing_id)) {}

int SchedulerLink::PeerOf(size_t slot) {
  // Far above any node id, so that no server or worker connection is ever named so.
  return slot == 0 ? kSchedulerId : (1 << 30) + static_cast<int>(slot);
}

std::string SchedulerLink::NameOf(size_t slot) const {
  const auto& s = config_.transport.schedulers[slot];
  return StrCat("scheduler (", s.host, ":", s.port, ")");
}

void SchedulerLink::Connect() {
  for (size_t i = 0; i < config_.transport.schedulers.size(); ++i) {
    van_->Connect(PeerOf(i), config_.transport.schedulers[i].ZmqEndpoint(), routing_id_);
  }
  MutexLock lock(mu_);
  last_contact_ms_ = NowMs();
}

void SchedulerLink::Send(Message m) {
  int peer;
  {
    MutexLock lock(mu_);
    m.envelope.set_term(term_);
    peer = PeerOf(followed_);
  }
  van_->Send(peer, std::move(m));
}

SchedulerLink::Verdict SchedulerLink::Check(const Message& m, const Origin& origin) {
  if (origin.inbound) return Verdict::kNotScheduler;
  size_t slot = 0;
  while (slot < config_.transport.schedulers.size() && PeerOf(slot) != origin.peer) ++slot;
  if (slot == config_.transport.schedulers.size()) return Verdict::kNotScheduler;
  const uint64_t term = m.envelope.term();
  MutexLock lock(mu_);
  if (term > 0 && term < term_) {
    LOG_EVERY_N(WARNING, 20) << "refused " << Describe(m) << " from the " << NameOf(slot)
                             << ": its term " << term << " is older than " << term_
                             << ", another scheduler's; told it so";
    Message fenced = MakeMessage(proto::FENCED, -1);
    fenced.envelope.set_term(term_);
    van_->Send(PeerOf(slot), std::move(fenced));
    return Verdict::kRefused;
  }
  if (slot != followed_) {
    if (term <= term_) return Verdict::kRefused;
    LOG(WARNING) << "the " << NameOf(slot) << " leads the job now (term " << term
                 << "); following it";
    followed_ = slot;
  } else if (term > term_ && term_ > 0) {
    LOG(WARNING) << "the " << NameOf(slot) << " adopted the job (term " << term << ")";
  }
  if (term > term_) term_ = term;
  if (term > 0 || term_ == 0) {
    // A scheduler that leads the job (or, before the node joined one, any): a refusal or a
    // request to rejoin from one that leads nothing keeps no node waiting longer.
    if (warned_) LOG(WARNING) << "the " << NameOf(slot) << " answers again";
    warned_ = false;
    last_contact_ms_ = NowMs();
  }
  return Verdict::kAccept;
}

std::string SchedulerLink::Watch(int64_t now_ms) {
  MutexLock lock(mu_);
  const int64_t silent = now_ms - last_contact_ms_;
  const auto& cluster = config_.cluster;
  const size_t schedulers = config_.transport.schedulers.size();
  if (silent > cluster.scheduler_timeout_ms) {
    std::string names;
    for (size_t i = 0; i < schedulers; ++i) names += StrCat(i ? ", " : "", NameOf(i));
    return StrCat("no scheduler answered for ", silent, " ms (FERRY_SCHEDULER_TIMEOUT_MS=",
                  cluster.scheduler_timeout_ms, "): ", schedulers > 1 ? "the schedulers " : "the ",
                  names, schedulers > 1 ? " are" : " is",
                  " gone; start one at its address and the job is adopted",
                  refusal_.empty() ? std::string() : StrCat(" (the last refusal: ", refusal_, ")"));
  }
  if (silent <= cluster.heartbeat_timeout_ms) return "";
  if (!warned_) {
    LOG(WARNING) << "the " << NameOf(followed_) << " has not answered for " << silent
                 << " ms (FERRY_HEARTBEAT_TIMEOUT_MS=" << cluster.heartbeat_timeout_ms
                 << "): training goes on; barriers, membership changes, stall checks and "
                    "metrics wait for a scheduler (one restarted at its address"
                 << (schedulers > 1 ? ", or a standby of FERRY_SCHEDULERS" : "")
                 << ") for up to FERRY_SCHEDULER_TIMEOUT_MS=" << cluster.scheduler_timeout_ms
                 << " ms"
                 << (config_.transport.secret.empty()
                         ? ""
                         : "; a scheduler that runs there with another FERRY_SECRET fails the "
                           "CURVE handshake and looks silent from here: check its log");
    warned_ = true;
  }
  if (schedulers > 1 &&
      now_ms - std::max(last_contact_ms_, turned_ms_) > cluster.heartbeat_timeout_ms) {
    followed_ = (followed_ + 1) % schedulers;
    turned_ms_ = now_ms;
    LOG(WARNING) << "turning to the " << NameOf(followed_);
  }
  return "";
}

void SchedulerLink::NoteRefusal(const std::string& reason) {
  LOG(ERROR) << "a scheduler refused this node: " << reason
             << "; waiting for the job's scheduler (FERRY_SCHEDULER_TIMEOUT_MS)";
  MutexLock lock(mu_);
  refusal_ = reason;
}

uint64_t SchedulerLink::term() const {
  MutexLock lock(mu_);
  return term_;
}

std::string SchedulerLink::name() const {
  MutexLock lock(mu_);
  return NameOf(followed_);
}

}  // namespace ferry
