#include "sim/fabric.h"

#include <glog/logging.h>

#include <cmath>

namespace ferry::sim {

Fabric::Fabric(Network& network, std::vector<int> host_of_node, const FabricOptions& options)
    : network_(network), host_of_node_(std::move(host_of_node)), options_(options) {
  for (int h : host_of_node_) CHECK(h >= 0 && h < network_.hosts()) << "host " << h;
}

int Fabric::DataConnection(int from, int to) {
  if (data_of_.empty()) data_of_.assign(host_of_node_.size() * host_of_node_.size(), 0);
  CHECK(from >= 0 && static_cast<size_t>(from) < host_of_node_.size() && to >= 0 &&
        static_cast<size_t>(to) < host_of_node_.size())
      << from << " -> " << to;
  int32_t& id = data_of_[PairIndex(from, to)];
  if (id == 0) id = network_.Connect(host_of_node_[from], host_of_node_[to]) + 1;
  return id - 1;
}

Fabric::Path& Fabric::PathFor(int from, int to) {
  if (path_of_.empty()) path_of_.assign(host_of_node_.size() * host_of_node_.size(), 0);
  int32_t& index = path_of_[PairIndex(from, to)];
  if (index == 0) {
    paths_.emplace_back();
    index = static_cast<int32_t>(paths_.size());
    Path& path = paths_.back();
    path.from = from;
    path.to = to;
    path.connection = DataConnection(from, to);
    if (paths_from_.empty()) paths_from_.resize(host_of_node_.size());
    paths_from_[from].push_back(&path);
  }
  return paths_[index - 1];
}

uint64_t Fabric::CostBytes(int from, int to, uint64_t bytes, DataKind kind) const {
  if (!same_host(from, to)) return bytes;
  if (options_.shm) return kind == DataKind::kSum ? 0 : bytes;  // a sum is lent, a push copied
  return static_cast<uint64_t>(std::llround(static_cast<double>(bytes) * options_.loopback_cost));
}

void Fabric::SendData(int from, int to, uint64_t bytes, int priority, DataKind kind,
                      Action delivered) {
  ++messages_;
  Queue(from, to,
        Pending{false, priority, 0, bytes, CostBytes(from, to, bytes, kind), std::move(delivered)});
}

void Fabric::SendPointToPoint(int from, int to, uint64_t bytes, int priority, Action delivered) {
  ++messages_;
  Queue(from, to,
        Pending{SchedulesLinks(from), priority, 0, bytes,
                CostBytes(from, to, bytes, DataKind::kPush), std::move(delivered)});
}

void Fabric::Queue(int from, int to, Pending p) {
  if (options_.watermark_bytes == 0 && !p.critical && !Held(from, to)) {
    // Nothing waits in the pair's path (no watermark, no flow): straight to the connection.
    network_.Send(DataConnection(from, to), p.cost_bytes, nullptr, std::move(p.delivered));
    return;
  }
  Path& path = PathFor(from, to);
  p.seq = next_seq_++;
  const bool critical = p.critical;
  if (!critical && Held(from, to)) held_messages_++;
  path.waiting.push(std::move(p));
  if (critical) {
    path.critical++;
    path.critical_waiting++;
    if (!path.flow_open) OpenFlow(path);
  }
  Drain(path);
}

void Fabric::Drain(Path& path) {
  while (!path.waiting.empty() &&
         (options_.watermark_bytes == 0 || path.unreleased < options_.watermark_bytes)) {
    if (!path.waiting.top().critical && Held(path.from, path.to)) break;
    Pending p = std::move(const_cast<Pending&>(path.waiting.top()));
    path.waiting.pop();
    Hand(path, std::move(p));
  }
}

void Fabric::Hand(Path& path, Pending p) {
  Path* at = &path;  // a deque never moves its elements
  if (p.critical) {
    path.critical_waiting--;
    p.delivered = [this, at, delivered = std::move(p.delivered)]() mutable {
      if (delivered) delivered();
      if (--at->critical == 0) CloseFlow(*at);
    };
  }
  Action sent = nullptr;
  if (options_.watermark_bytes > 0) {
    path.unreleased += p.bytes;
    sent = [this, at, bytes = p.bytes] {
      at->unreleased -= bytes;
      Drain(*at);
    };
  }
  network_.Send(path.connection, p.cost_bytes, std::move(sent), std::move(p.delivered));
}

void Fabric::OpenFlow(Path& path) {
  path.flow_open = true;
  flows_opened_++;
  if (same_host(path.from, path.to)) return;  // crosses no link: holds nothing
  if (open_flows_.empty()) open_flows_.assign(host_of_node_.size(), 0);
  open_flows_[path.from]++;
  for (const Path* other : paths_from_[path.from]) {
    if (!same_host(other->from, other->to)) {
      held_messages_ += other->waiting.size() - other->critical_waiting;
    }
  }
}

void Fabric::CloseFlow(Path& path) {
  path.flow_open = false;
  if (same_host(path.from, path.to)) return;
  if (--open_flows_[path.from] > 0) return;
  // By index: draining makes no path, but the list is not ours to trust across calls.
  const std::vector<Path*>& paths = paths_from_[path.from];
  for (size_t i = 0; i < paths.size(); ++i) Drain(*paths[i]);
}

void Fabric::SendControl(int from, int to, Action delivered) {
  ++messages_;
  int connection = DataConnection(from, to);
  if (options_.control_lane && !same_host(from, to)) {
    Path& path = PathFor(from, to);
    if (path.control < 0) path.control = network_.Connect(host_of_node_[from], host_of_node_[to]);
    connection = path.control;
  }
  network_.Send(connection, 0, nullptr, std::move(delivered));
}

void Fabric::SendEmpty(int from, int to, Action delivered) {
  ++messages_;
  network_.Send(DataConnection(from, to), 0, nullptr, std::move(delivered));
}

}  // namespace ferry::sim
