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
  // the new table).
  void Clear() { arrivals_.clear(); }

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
};

}  // namespace ferry
