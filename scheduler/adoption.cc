#include "scheduler/adoption.h"

#include <algorithm>
#include <set>

#include "common/cluster/node_table.h"
#include "common/util/strings.h"

namespace ferry {

namespace {

const proto::NodeInfo* Find(const proto::NodeTable& t, int id) {
  for (const auto& n : t.nodes()) {
    if (n.id() == id) return &n;
  }
  return nullptr;
}

}  // namespace

std::string Adoption::Refusal(const std::string& identity, const proto::Rejoin& r) const {
  const int id = r.table().your_id();
  const std::string who = StrCat("node ", id, " rejoining at membership epoch ", r.table().epoch());
  std::string differs;
  auto compare = [&differs](const char* name, int64_t node, int64_t scheduler) {
    if (node != scheduler) differs += StrCat(differs.empty() ? "" : ", ", name, "=", node,
                                             " (this scheduler's: ", scheduler, ")");
  };
  compare("DMLC_NUM_WORKER", r.job_workers(), job_.num_workers);
  compare("DMLC_NUM_SERVER", r.job_servers(), job_.num_servers);
  compare("FERRY_ELASTIC", r.elastic(), job_.elastic);
  if (!differs.empty()) {
    return StrCat(who, " belongs to another job: ", differs,
                  "; start the scheduler with the job's settings");
  }
  const proto::NodeInfo* self = Find(r.table(), id);
  if (!self || self->routing_id() != identity) {
    return StrCat(who, ": its connection is not the one its node table names for that id");
  }
  return "";
}

bool Adoption::Add(const std::string& identity, const proto::Rejoin& r, int64_t now_ms) {
  if (started_ms_ == 0) started_ms_ = now_ms;
  const bool first = rejoins_.count(identity) == 0;
  rejoins_[identity] = r;
  max_term_ = std::max(max_term_, r.term());
  if (newest_.nodes().empty() || r.table().epoch() > newest_.epoch()) newest_ = r.table();
  return first;
}

void Adoption::Hold(const std::string& identity, const Message& m) {
  auto& held = held_[identity];
  if (held.size() >= kMaxHeld) return;
  held.push_back(m);
}

bool Adoption::has(const std::string& identity) const { return rejoins_.count(identity) > 0; }

int Adoption::Listed() const {
  int listed = 0;
  for (const auto& [identity, r] : rejoins_) {
    const proto::NodeInfo* n = Find(newest_, r.table().your_id());
    if (n && n->routing_id() == identity) ++listed;
  }
  return listed;
}

bool Adoption::Ready(int64_t now_ms, int64_t grace_ms) const {
  if (!started()) return false;
  int nodes = 0;
  for (const auto& n : newest_.nodes()) nodes += n.id() != kSchedulerId;
  const int listed = Listed();
  if (listed >= nodes) return true;
  return now_ms - started_ms_ >= grace_ms && 2 * listed > nodes;
}

std::map<int, Adoption::Node> Adoption::TakeNodes() {
  std::map<int, Node> nodes;
  for (auto& [identity, r] : rejoins_) {
    Node node{identity, std::move(r), {}};
    std::set<uint64_t> requests;
    for (const auto& w : node.rejoin.waiting()) requests.insert(w.request_id());
    for (Message& m : held_[identity]) {
      if (m.type() != proto::BARRIER) {
        node.held.push_back(std::move(m));
        continue;
      }
      if (!requests.insert(m.envelope.request_id()).second) continue;
      proto::Rejoin::Waiting* w = node.rejoin.add_waiting();
      w->set_request_id(m.envelope.request_id());
      w->set_epoch(m.envelope.epoch());
      *w->mutable_barrier() = m.envelope.barrier();
    }
    nodes[node.rejoin.table().your_id()] = std::move(node);
  }
  rejoins_.clear();
  held_.clear();
  return nodes;
}

std::string Adoption::Progress() const {
  int nodes = 0;
  for (const auto& n : newest_.nodes()) nodes += n.id() != kSchedulerId;
  return StrCat(Listed(), " of ", nodes, " nodes of membership epoch ", newest_.epoch(),
                " rejoined");
}

std::vector<Message> WaitingBarriers(const proto::Rejoin& r) {
  std::vector<Message> out;
  for (const auto& w : r.waiting()) {
    Message m = MakeMessage(proto::BARRIER, r.table().your_id());
    m.envelope.set_request_id(w.request_id());
    m.envelope.set_epoch(w.epoch());
    *m.envelope.mutable_barrier() = w.barrier();
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace ferry
