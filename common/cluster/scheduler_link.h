#pragma once

// SchedulerLink: which scheduler a server or worker follows, and the term it accepted.
//
// A job has one scheduler, or several (FERRY_SCHEDULERS: the first leads, the others
// stand by). The link holds a connection to each and follows one: every message for the
// scheduler goes to that one (Send), stamped with the node's term. A scheduler's term is
// 1 for the one that registered the job and one more each time another adopts it
// (scheduler/adoption.h). The rules (Check, on every message a scheduler sends):
//   - From any scheduler, a term lower than the node's is refused and answered FENCED: a
//     scheduler that was paused or cut off while another adopted the job learns that it
//     no longer leads, and stops; it never acts on this node again.
//   - From the one followed, any other term is taken (term 0: a scheduler that leads no job
//     yet, asking the node to rejoin or refusing it).
//   - From another scheduler, a higher term makes it the one followed (it adopted the job
//     with a majority of the nodes); anything else from it is ignored.
//   - While the one followed is silent (Watch, on the heartbeat thread): after
//     FERRY_HEARTBEAT_TIMEOUT_MS the node says once that training goes on without a
//     scheduler and, with standbys, turns to the next scheduler, one more each heartbeat
//     timeout; after FERRY_SCHEDULER_TIMEOUT_MS Watch returns the node's failure, naming
//     every scheduler address (and the last refusal, when one refused the node).
// Thread-safe.

#include <cstdint>
#include <string>

#include "common/config/config.h"
#include "common/transport/van.h"
#include "common/util/mutex.h"

namespace ferry {

class SchedulerLink {
 public:
  // `van` must outlive the link.
  SchedulerLink(const Config& config, Van* van, std::string routing_id);

  // Opens the connection to every scheduler.
  void Connect() EXCLUDES(mu_);
  // To the scheduler followed, with the node's term.
  void Send(Message m) EXCLUDES(mu_);

  enum class Verdict {
    kNotScheduler,  // not from a scheduler's connection: someone else's message
    kAccept,        // from the scheduler followed (perhaps just now): handle it
    kRefused,       // dropped (answered FENCED when its term is lower)
  };
  Verdict Check(const Message& m, const Origin& origin) EXCLUDES(mu_);

  // Empty while the job may go on; else why this node ends (see the file comment).
  std::string Watch(int64_t now_ms) EXCLUDES(mu_);
  // A scheduler refused this node after it joined the job (another job's settings): logged,
  // and named when the wait ends.
  void NoteRefusal(const std::string& reason) EXCLUDES(mu_);

  uint64_t term() const EXCLUDES(mu_);
  // "scheduler (10.0.0.1:9000)": the one followed, for messages.
  std::string name() const EXCLUDES(mu_);

 private:
  // The Van's peer id of scheduler `slot` (the first is kSchedulerId).
  static int PeerOf(size_t slot);
  std::string NameOf(size_t slot) const;

  const Config& config_;
  Van* van_;
  const std::string routing_id_;

  mutable Mutex mu_;
  size_t followed_ GUARDED_BY(mu_) = 0;
  uint64_t term_ GUARDED_BY(mu_) = 0;
  int64_t last_contact_ms_ GUARDED_BY(mu_) = 0;  // of the one followed (or of turning to it)
  int64_t turned_ms_ GUARDED_BY(mu_) = 0;        // when the node last turned to another
  bool warned_ GUARDED_BY(mu_) = false;          // it said that the scheduler is silent
  std::string refusal_ GUARDED_BY(mu_);
};

}  // namespace ferry
