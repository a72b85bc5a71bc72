#include "scheduler/membership.h"

#include <glog/logging.h>

#include <algorithm>
#include <map>

#include "common/util/strings.h"

namespace ferry {

std::string ServerKind(const std::string& requested, const std::string& host,
                       const std::set<std::string>& worker_hosts) {
  if (!requested.empty()) return requested;
  return worker_hosts.count(host) ? "colocated" : "cpu";
}

std::vector<double> ServerWeights(const std::vector<bool>& colocated) {
  double n = static_cast<double>(std::count(colocated.begin(), colocated.end(), true));
  double k = static_cast<double>(colocated.size()) - n;
  std::vector<double> weights(colocated.size(), 0.0);
  if (colocated.empty()) return weights;
  // The theorem assumes 2 <= n and k <= n. With one colocated server nothing crosses
  // the network unless we send it, so the CPU-only servers get nothing; with k >= n
  // the optimum is a classic PS (CPU-only servers carry everything).
  double cpu_share;
  if (k == 0 || n == 1) {
    cpu_share = 0;
  } else if (n == 0 || k >= n) {
    cpu_share = 1;
  } else {
    cpu_share = 2 * k * (n - 1) / (n * n + k * n - 2 * k);
  }
  for (size_t i = 0; i < colocated.size(); ++i) {
    weights[i] = colocated[i] ? (1 - cpu_share) / n : cpu_share / k;
  }
  return weights;
}

namespace {

std::set<std::string> WorkerHosts(const proto::NodeTable& t) {
  std::set<std::string> hosts;
  for (const auto& n : t.nodes()) {
    if (n.role() == proto::WORKER) hosts.insert(n.host());
  }
  return hosts;
}

}  // namespace

proto::NodeInfo Membership::NodeOf(const Joiner& j, int id, int rank) const {
  proto::NodeInfo n;
  n.set_id(id);
  n.set_role(j.request.role());
  n.set_rank(rank);
  n.set_host(j.request.host());
  n.set_port(j.request.port());
  n.set_hostname(j.request.hostname());
  n.set_routing_id(j.identity);
  return n;
}

const NodeTable& Membership::First(const std::vector<Joiner>& pending, int num_workers,
                                   const std::string& scheduler_host, int scheduler_port) {
  proto::NodeTable t;
  t.set_num_servers(num_servers_);
  t.set_num_workers(num_workers);
  t.set_epoch(0);
  auto* sched = t.add_nodes();
  sched->set_id(kSchedulerId);
  sched->set_role(proto::SCHEDULER);
  sched->set_host(scheduler_host);
  sched->set_port(scheduler_port);
  std::set<std::string> worker_hosts;
  std::vector<bool> rank_taken(num_workers, false);
  for (const Joiner& j : pending) {
    if (j.request.role() != proto::WORKER) continue;
    worker_hosts.insert(j.request.host());
    if (j.request.requested_rank() >= 0) rank_taken[j.request.requested_rank()] = true;
  }
  int server_rank = 0;
  int next_free = 0;
  for (const Joiner& j : pending) {
    int rank;
    int id;
    std::string kind;
    if (j.request.role() == proto::SERVER) {
      rank = server_rank++;
      id = ServerId(rank);
      kind = ServerKind(j.request.kind(), j.request.host(), worker_hosts);
    } else {
      if (j.request.requested_rank() >= 0) {
        rank = j.request.requested_rank();
      } else {
        while (rank_taken[next_free]) ++next_free;
        rank = next_free++;
      }
      id = WorkerId(num_servers_, rank);
    }
    proto::NodeInfo* n = t.add_nodes();
    *n = NodeOf(j, id, rank);
    if (!kind.empty()) n->set_kind(kind);
  }
  next_id_ = WorkerId(num_servers_, num_workers);
  return Publish(std::move(t));
}

void Membership::AddSpare(Joiner spare) { spares_.push_back(std::move(spare)); }

bool Membership::RemoveSpare(const std::string& identity) {
  auto it = std::find_if(spares_.begin(), spares_.end(),
                         [&](const Joiner& j) { return j.identity == identity; });
  if (it == spares_.end()) return false;
  spares_.erase(it);
  return true;
}

const NodeTable& Membership::WithoutServer(int id) {
  CHECK(table_.IsServer(id)) << "node " << id << " is not a live server";
  proto::NodeTable t = table_.proto();
  t.set_epoch(t.epoch() + 1);
  auto* nodes = t.mutable_nodes();
  auto dead = std::find_if(nodes->begin(), nodes->end(),
                           [id](const proto::NodeInfo& n) { return n.id() == id; });
  if (spares_.empty()) {
    nodes->erase(dead);
  } else {
    const Joiner spare = spares_.front();
    spares_.erase(spares_.begin());
    const int rank = dead->rank();
    *dead = NodeOf(spare, id, rank);
    dead->set_kind(ServerKind(spare.request.kind(), spare.request.host(), WorkerHosts(t)));
  }
  return Publish(std::move(t));
}

const NodeTable& Membership::WithoutWorker(int id) {
  CHECK(table_.IsWorker(id)) << "node " << id << " is not a live worker";
  proto::NodeTable t = table_.proto();
  t.set_epoch(t.epoch() + 1);
  auto* nodes = t.mutable_nodes();
  nodes->erase(std::find_if(nodes->begin(), nodes->end(),
                            [id](const proto::NodeInfo& n) { return n.id() == id; }));
  std::map<int, proto::NodeInfo*> by_rank;  // the survivors, by their old rank
  for (auto& n : *nodes) {
    if (n.role() == proto::WORKER) by_rank[n.rank()] = &n;
  }
  int rank = 0;
  for (auto& [old_rank, n] : by_rank) n->set_rank(rank++);
  t.set_num_workers(rank);
  return Publish(std::move(t));
}

const NodeTable& Membership::WithWorkers(const std::vector<Joiner>& joiners) {
  CHECK(!joiners.empty());
  proto::NodeTable t = table_.proto();
  t.set_epoch(t.epoch() + 1);
  int rank = t.num_workers();
  for (const Joiner& j : joiners) *t.add_nodes() = NodeOf(j, next_id_++, rank++);
  t.set_num_workers(rank);
  return Publish(std::move(t));
}

const NodeTable& Membership::Adopt(const proto::NodeTable& table) {
  proto::NodeTable t = table;
  t.clear_your_id();
  t.clear_catalog();
  t.clear_spare();
  next_id_ = 0;
  for (const auto& n : t.nodes()) next_id_ = std::max(next_id_, n.id() + 1);
  table_ = NodeTable(t);
  return table_;
}

const NodeTable& Membership::Publish(proto::NodeTable next) {
  std::map<int, proto::NodeInfo*> servers;  // by rank
  for (auto& n : *next.mutable_nodes()) {
    if (n.role() == proto::SERVER) servers[n.rank()] = &n;
  }
  std::vector<bool> colocated;
  for (const auto& [rank, n] : servers) colocated.push_back(n->kind() == "colocated");
  const std::vector<double> weights = ServerWeights(colocated);
  size_t i = 0;
  for (auto& [rank, n] : servers) n->set_weight(weights[i++]);
  table_ = NodeTable(next);
  return table_;
}

// "WORKER at 10.0.0.2:0 (host node-b, pid 4242)": a registering node, for log lines and
// refusals.
std::string DescribeRegistration(const proto::RegisterRequest& r) {
  return StrCat(proto::Role_Name(r.role()), " at ", r.host(), ":", r.port(), " (host ",
                r.hostname(), ", pid ", r.pid(), ")");
}

// NODE_FAILED naming `node_id` (-1: none in particular) and `reason`.
Message NodeFailedMessage(int node_id, const std::string& reason) {
  Message m = MakeMessage(proto::NODE_FAILED, kSchedulerId);
  m.envelope.mutable_failure()->set_node_id(node_id);
  m.envelope.mutable_failure()->set_reason(reason);
  return m;
}

}  // namespace ferry
