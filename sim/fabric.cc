#include "sim/fabric.h"

#include <glog/logging.h>

#include <cmath>

namespace ferry::sim {

Fabric::Fabric(Network& network, std::vector<int> host_of_node, const FabricOptions& options)
    : network_(network), host_of_node_(std::move(host_of_node)), options_(options) {
  for (int h : host_of_node_) CHECK(h >= 0 && h < network_.hosts()) << "host " << h;
}

Fabric::Path& Fabric::PathFor(int from, int to) {
  if (path_of_.empty()) path_of_.resize(host_of_node_.size());
  std::vector<int32_t>& row = path_of_.at(from);
  if (row.empty()) row.assign(host_of_node_.size(), 0);
  int32_t& index = row.at(to);
  if (index == 0) {
    paths_.emplace_back();
    paths_.back().data = network_.Connect(host_of_node_[from], host_of_node_[to]);
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
  Path& path = PathFor(from, to);
  const uint64_t cost = CostBytes(from, to, bytes, kind);
  if (options_.watermark_bytes == 0) {
    network_.Send(path.data, cost, nullptr, std::move(delivered));
    return;
  }
  path.waiting.push(Pending{priority, next_seq_++, bytes, cost, std::move(delivered)});
  Drain(path);
}

void Fabric::Drain(Path& path) {
  while (!path.waiting.empty() && path.unreleased < options_.watermark_bytes) {
    Pending p = std::move(const_cast<Pending&>(path.waiting.top()));
    path.waiting.pop();
    path.unreleased += p.bytes;
    Path* at = &path;  // a deque never moves its elements
    const uint64_t bytes = p.bytes;
    network_.Send(
        path.data, p.cost_bytes,
        [this, at, bytes] {
          at->unreleased -= bytes;
          Drain(*at);
        },
        std::move(p.delivered));
  }
}

void Fabric::SendControl(int from, int to, Action delivered) {
  ++messages_;
  Path& path = PathFor(from, to);
  int connection = path.data;
  if (options_.control_lane && !same_host(from, to)) {
    if (path.control < 0) path.control = network_.Connect(host_of_node_[from], host_of_node_[to]);
    connection = path.control;
  }
  network_.Send(connection, 0, nullptr, std::move(delivered));
}

}  // namespace ferry::sim
