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
  const int connection = DataConnection(from, to);
  const uint64_t cost = CostBytes(from, to, bytes, kind);
  if (options_.watermark_bytes == 0) {
    network_.Send(connection, cost, nullptr, std::move(delivered));
    return;
  }
  Path& path = PathFor(from, to);
  path.waiting.push(Pending{priority, next_seq_++, bytes, cost, std::move(delivered)});
  Drain(connection, path);
}

void Fabric::Drain(int connection, Path& path) {
  while (!path.waiting.empty() && path.unreleased < options_.watermark_bytes) {
    Pending p = std::move(const_cast<Pending&>(path.waiting.top()));
    path.waiting.pop();
    path.unreleased += p.bytes;
    Path* at = &path;  // a deque never moves its elements
    const uint64_t bytes = p.bytes;
    network_.Send(
        connection, p.cost_bytes,
        [this, connection, at, bytes] {
          at->unreleased -= bytes;
          Drain(connection, *at);
        },
        std::move(p.delivered));
  }
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

}  // namespace ferry::sim
