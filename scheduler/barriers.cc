#include "scheduler/barriers.h"

#include <glog/logging.h>

#include <algorithm>
#include <map>
#include <string>

#include "common/util/strings.h"

namespace ferry {

namespace {

// Whether `older` is a catalog the worker of `newer` had at some earlier point (a worker
// that joined early; join_protocol.h): each of older's tensors is in newer under the same
// id, name, dtype and shape, or its name was declared anew in newer under a higher id; and
// older has used no id newer has not.
bool IsEarlierCatalog(const proto::CatalogSnapshot& older, const proto::CatalogSnapshot& newer) {
  if (older.next_id() > newer.next_id()) return false;
  std::map<uint32_t, const proto::CatalogSnapshot::Tensor*> by_id;
  std::map<std::string, uint32_t> id_of_name;
  for (const auto& t : newer.tensors()) {
    by_id[t.id()] = &t;
    id_of_name[t.name()] = t.id();
  }
  for (const auto& t : older.tensors()) {
    auto it = by_id.find(t.id());
    if (it != by_id.end()) {
      const auto& n = *it->second;
      if (n.name() != t.name() || n.dtype() != t.dtype() ||
          !std::equal(n.shape().begin(), n.shape().end(), t.shape().begin(), t.shape().end())) {
        return false;
      }
      continue;
    }
    auto named = id_of_name.find(t.name());
    if (named == id_of_name.end() || named->second < t.id()) return false;
  }
  return true;
}

}  // namespace

void Barriers::Seed(const proto::Rejoin::Done& done) {
  Released& r = released_[done.group()];
  if (done.count() <= r.count) return;
  r.count = done.count();
  r.last = done.release();
  r.last.clear_catalog();
}

std::vector<std::pair<int, Message>> Barriers::Arrive(const Message& m, const NodeTable& table) {
  int group = m.envelope.barrier().group();
  Released& released = released_[group];
  const uint64_t seq = m.envelope.barrier().seq();
  if (seq > 0 && seq <= released.count) {
    // Released before this node heard it (a scheduler died in between): released again.
    LOG(INFO) << table.Describe(m.sender()) << " waits in " << proto::BarrierGroup_Name(group)
              << " barrier " << seq << ", which was released (" << released.count
              << " so far): released again";
    Message release = MakeMessage(proto::BARRIER_RELEASE, kSchedulerId);
    release.envelope.set_request_id(m.envelope.request_id());
    *release.envelope.mutable_barrier() = released.last;
    if (seq < released.count) release.envelope.mutable_barrier()->set_last_rank(-1);
    return {{m.sender(), std::move(release)}};
  }
  auto& arrived = arrivals_[group];
  for (Arrival& a : arrived) {
    if (a.node == m.sender()) {
      // Its earlier wait ended (a deadline): this one replaces it, so the release reaches
      // the request still waiting.
      LOG(WARNING) << table.Describe(m.sender()) << " entered a "
                   << proto::BarrierGroup_Name(m.envelope.barrier().group())
                   << " barrier again; its new request replaces the earlier one";
      a = Arrival{m.sender(), m.envelope.request_id(), m.envelope.barrier().join_position(),
                  m.envelope.barrier().catalog_digest(), m.envelope.barrier()};
      return {};
    }
  }
  arrived.push_back(Arrival{m.sender(), m.envelope.request_id(),
                             m.envelope.barrier().join_position(),
                             m.envelope.barrier().catalog_digest(), m.envelope.barrier()});
  const int workers = table.num_workers();
  const int servers = static_cast<int>(table.Servers().size());
  const int expected = group == proto::GROUP_WORKERS || group == proto::GROUP_JOIN ? workers
                       : group == proto::GROUP_SERVERS                             ? servers
                                                                       : workers + servers;
  VLOG(1) << "barrier " << proto::BarrierGroup_Name(m.envelope.barrier().group()) << ": "
          << arrived.size() << " of " << expected;
  if (static_cast<int>(arrived.size()) < expected) return {};
  // The last to arrive; in a join, the one with the highest join position (the last
  // to join at the servers: worker/join_protocol.h), ties to the later arrival.
  const Arrival* last = &arrived.back();
  bool catalogs_differ = false;  // GROUP_JOIN
  for (const Arrival& a : arrived) {
    if (a.join_position >= last->join_position) last = &a;
    catalogs_differ |= a.catalog_digest != arrived.front().catalog_digest;
  }
  // Declarations made while some workers had joined: those workers adopt the catalog of
  // the worker that declared the most, if theirs is an earlier state of it.
  const Arrival* richest = nullptr;
  bool adoptable = catalogs_differ;
  if (catalogs_differ) {
    for (const Arrival& a : arrived) {
      if (!richest || a.join.catalog_next_id() > richest->join.catalog_next_id()) richest = &a;
    }
    for (const Arrival& a : arrived) {
      adoptable = adoptable && IsEarlierCatalog(a.join.catalog(), richest->join.catalog());
    }
    LOG(INFO) << "join: the workers' declarations differ; "
              << (adoptable ? StrCat("those that joined early take those of ",
                                     table.Describe(richest->node))
                            : std::string("they are not earlier states of one another"));
  }
  const int last_rank = table.node(last->node).rank();
  std::vector<std::pair<int, Message>> releases;
  for (const Arrival& a : arrived) {
    Message release = MakeMessage(proto::BARRIER_RELEASE, kSchedulerId);
    release.envelope.set_request_id(a.request);
    proto::Barrier* barrier = release.envelope.mutable_barrier();
    barrier->set_group(m.envelope.barrier().group());
    barrier->set_last_rank(last_rank);
    if (catalogs_differ) {
      const bool differs = !adoptable || a.catalog_digest != richest->catalog_digest;
      barrier->set_catalogs_differ(differs);
      if (differs && adoptable) *barrier->mutable_catalog() = richest->join.catalog();
    }
    releases.emplace_back(a.node, std::move(release));
  }
  released.count = std::max(released.count + 1, seq);
  released.last = releases.front().second.envelope.barrier();
  released.last.clear_catalog();
  arrived.clear();
  return releases;
}

}  // namespace ferry
