#pragma once

// Adoption: how a scheduler that did not start a running job takes it over, from what the
// job's nodes tell it. Pure logic (no I/O, clock or lock): the Scheduler feeds it the
// REJOINs and the messages that arrive meanwhile, and applies the result.
//
// Who adopts: a scheduler restarted at the job's address (a supervisor's restart,
// Compose's `restart:`, Kubernetes), or a standby of FERRY_SCHEDULERS that the nodes
// turned to. Nothing in the job's data plane needs the scheduler, so servers and workers
// train on meanwhile (common/cluster/scheduler_link.h).
//
// The exchange: a node's message reaches a scheduler that does not know it; the scheduler
// answers REJOIN_ASK; the node sends REJOIN (proto::Rejoin): its id, newest node table,
// the term of the scheduler it followed, its job settings, whether it finalized or
// suspended, the barriers it waits in and how many of each group it completed.
//
// The decision (Ready): the scheduler leads once every node of the newest table among the
// REJOINs has rejoined, or FERRY_HEARTBEAT_TIMEOUT_MS after the first REJOIN when a
// majority of them has; a node still missing then is treated as one whose heartbeats
// stopped at the first REJOIN (the heartbeat watch finds it, naming it). The table is the
// newest epoch any node holds: the scheduler before published it, and nodes on an older
// one take it when it is sent again. The term is one more than the highest the nodes
// followed, so they refuse the scheduler before should it wake (fencing).
//
// What the adopted job keeps: the epoch and every id, rank and routing id; barriers
// (seeded counts, then the waiting arrivals, scheduler/barriers.h); finalized and suspended
// workers. What it rebuilds from later heartbeats: metrics and the stall check.
//
// Refusals (Add returns them): a node of another job (its DMLC_NUM_WORKER,
// DMLC_NUM_SERVER or FERRY_ELASTIC differ from this scheduler's), or a REJOIN whose
// connection is not the one its table names for its id.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/transport/message.h"

namespace ferry {

class Adoption {
 public:
  struct Node {
    std::string identity;
    proto::Rejoin rejoin;            // its waits include the BARRIERs held for it
    std::vector<Message> held;       // its other messages held meanwhile, in arrival order
  };

  explicit Adoption(const Config::Cluster& job) : job_(job) {}

  // Why a REJOIN from `identity` cannot be taken: a node of another job, or a connection
  // that is not the one its table names; empty when it can.
  std::string Refusal(const std::string& identity, const proto::Rejoin& r) const;
  // A REJOIN that Refusal() accepted, at `now_ms` (the first starts the adoption). A node
  // that rejoins again replaces its earlier REJOIN. Returns whether it is the node's first.
  bool Add(const std::string& identity, const proto::Rejoin& r, int64_t now_ms);
  // A message (BARRIER, FINALIZE, SUSPEND, RESUME, ADMIT) that arrived while the adoption
  // waits, kept for when the scheduler leads: a BARRIER joins its node's waits (once per
  // request), the others are handled then, in order. Dropped if the node never rejoins.
  void Hold(const std::string& identity, const Message& m);

  bool started() const { return started_ms_ > 0; }
  int64_t started_ms() const { return started_ms_; }
  bool has(const std::string& identity) const;
  // Whether to lead now (see the file comment).
  bool Ready(int64_t now_ms, int64_t grace_ms) const;

  // After Ready(): the newest table, the term to lead with, and every node that rejoined
  // (its waits merged with what Hold() kept), by id.
  const proto::NodeTable& table() const { return newest_; }
  uint64_t term() const { return max_term_ + 1; }
  std::map<int, Node> TakeNodes();
  // "3 of 4 nodes of membership epoch 0 rejoined".
  std::string Progress() const;

 private:
  // Rejoined nodes that the newest table lists (by id and routing id).
  int Listed() const;

  static constexpr size_t kMaxHeld = 64;  // per node: more means it is not a member at all

  const Config::Cluster& job_;
  int64_t started_ms_ = 0;
  std::map<std::string, proto::Rejoin> rejoins_;  // by identity
  std::map<std::string, std::vector<Message>> held_;  // BARRIERs by identity
  proto::NodeTable newest_;
  uint64_t max_term_ = 0;
};

// The BARRIER messages a REJOIN's waits stand for (sender, request id, epoch, body).
std::vector<Message> WaitingBarriers(const proto::Rejoin& r);

}  // namespace ferry
