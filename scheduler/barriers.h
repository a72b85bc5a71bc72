#pragma once

// Barriers: the scheduler's barriers (BARRIER / BARRIER_RELEASE), by group: the workers,
// the servers, everyone, and the join barrier (GROUP_JOIN, worker/join_protocol.h). A
// barrier releases every node waiting in it once all the group's live members of the
// current membership epoch arrived; a node that arrives again (its earlier wait ended at a
// deadline) replaces its earlier arrival, so the release answers the request still
// waiting.
//
// The join barrier names the worker that joined last (the highest join position, ties to
// the later arrival) and reconciles declarations: when the workers' catalogs differ, the
// worker that declared the most hands its catalog to every worker whose catalog is an
// earlier state of it; if some catalog is not, every release says the catalogs differ
// (join() then throws kMismatch on every worker).
//
// Numbered barriers (scheduler failover, scheduler/adoption.h): every BARRIER carries its
// number among its node's barriers of the group in the epoch (Barrier.seq, from 1). The
// barriers keep, per group, how many of the epoch's barriers were released and the last
// release; a BARRIER whose number was already released (the scheduler that released it
// died before every node heard it) is answered at once with that release. A scheduler
// that adopts a running job seeds these counts from its nodes (Seed) before it counts any
// arrival. Invariant: a group's count only grows within an epoch, and every member of the
// epoch passes the group's barriers in the same order, so the k-th barrier is one barrier.
//
// Not thread-safe: the scheduler calls it under its lock. No sockets: it returns the
// releases for the scheduler to send.

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "common/cluster/node_table.h"
#include "common/transport/message.h"

namespace ferry {

class Barriers {
 public:
  // A BARRIER from m.sender(), a member of `table` (the current epoch's). Returns the
  // releases (node id, BARRIER_RELEASE) when it completed its group's barrier, else none.
  std::vector<std::pair<int, Message>> Arrive(const Message& m, const NodeTable& table);
  // A new membership epoch: every wait is void (its waiter throws kMembershipChanged at
  // the new table), and the counts start again.
  void Clear() {
    arrivals_.clear();
    released_.clear();
  }
  // A node completed `done.count` barriers of `done.group` in the current epoch, the last
  // released as `done.release`: the group's count becomes at least that.
  void Seed(const proto::Rejoin::Done& done);

 private:
  // A node in a barrier: its id, its BARRIER's request id, its join position (GROUP_JOIN).
  struct Arrival {
    int node = -1;
    uint64_t request = 0;
    int join_position = 0;
    uint64_t catalog_digest = 0;
    proto::Barrier join;  // GROUP_JOIN: the BARRIER's body (catalog, next id)
  };
  std::map<int, std::vector<Arrival>> arrivals_;  // by group, in arrival order
  struct Released {
    uint64_t count = 0;     // barriers released in this epoch
    proto::Barrier last;    // the last release (without a catalog)
  };
  std::map<int, Released> released_;  // by group
};

}  // namespace ferry
