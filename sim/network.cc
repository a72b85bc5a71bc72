#include "sim/network.h"

#include <glog/logging.h>

#include <algorithm>
#include <limits>

namespace ferry::sim {
namespace {

// A transmission whose remaining bytes fall below this is complete (rounding of rate x
// time; far below one byte).
constexpr double kDoneBytes = 1e-6;

}  // namespace

const char* NetworkModelName(NetworkModel model) {
  switch (model) {
    case NetworkModel::kFair:
      return "fair";
    case NetworkModel::kQueued:
      return "fq";
    case NetworkModel::kFifo:
      return "fifo";
  }
  return "?";
}

std::unique_ptr<Network> MakeNetwork(NetworkModel model, EventQueue& events,
                                     const NetworkParams& params, int hosts) {
  if (model == NetworkModel::kFair) return std::make_unique<FairShareNetwork>(events, params, hosts);
  NetworkParams p = params;
  p.fifo_links = model == NetworkModel::kFifo;
  return std::make_unique<FairQueueNetwork>(events, p, hosts);
}

// ------------------------------------------------------------------ FairShareNetwork

FairShareNetwork::FairShareNetwork(EventQueue& events, const NetworkParams& params, int hosts)
    : events_(events), params_(params), hosts_(hosts) {
  CHECK(hosts > 0 && params.link_bytes_per_us > 0 && params.local_bytes_per_us > 0);
  for (int h = 0; h < hosts; ++h) {
    capacity_.push_back(params.RateOf(h));           // uplink
    capacity_.push_back(params.RateOf(h));           // downlink
    capacity_.push_back(params.local_bytes_per_us);  // local path
  }
  carried_.assign(capacity_.size(), 0.0);
}

int FairShareNetwork::Connect(int src, int dst) {
  CHECK(src >= 0 && src < hosts_ && dst >= 0 && dst < hosts_) << src << " -> " << dst;
  Connection c;
  c.local = src == dst;
  if (c.local) {
    c.links[0] = c.links[1] = 3 * src + 2;
    c.nlinks = 1;
  } else {
    c.links[0] = 3 * src;
    c.links[1] = 3 * dst + 1;
    c.nlinks = 2;
  }
  connections_.push_back(std::move(c));
  return static_cast<int>(connections_.size()) - 1;
}

void FairShareNetwork::Send(int connection, uint64_t bytes, Action sent, Action delivered) {
  Connection& c = connections_.at(connection);
  const double wire = static_cast<double>(bytes) + (c.local ? 0.0 : params_.header_bytes);
  c.queue.push_back(Message{wire, c.local, std::move(sent), std::move(delivered)});
  if (c.busy) return;
  Advance();
  StartHead(connection);
  Reallocate();
  ScheduleCompletion();
}

void FairShareNetwork::Advance() {
  const double dt = events_.now() - updated_;
  if (dt > 0) {
    for (Flow& f : flows_) {
      const double moved = std::min(f.remaining, f.rate * dt);
      f.remaining -= moved;
      const Connection& c = connections_[f.connection];
      for (int i = 0; i < c.nlinks; ++i) carried_[c.links[i]] += moved;
    }
  }
  updated_ = events_.now();
}

void FairShareNetwork::StartHead(int connection) {
  Connection& c = connections_[connection];
  CHECK(!c.busy && !c.queue.empty());
  c.busy = true;
  flows_.push_back(Flow{connection, c.queue.front().wire_bytes, 0.0});
}

void FairShareNetwork::Reallocate() {
  // Progressive filling: the link with the least share per unfixed flow fixes its flows
  // at that share; repeat with what is left.
  const size_t links = capacity_.size();
  std::vector<double> residual = capacity_;
  std::vector<int> unfixed(links, 0);
  for (const Flow& f : flows_) {
    const Connection& c = connections_[f.connection];
    for (int i = 0; i < c.nlinks; ++i) unfixed[c.links[i]]++;
  }
  std::vector<bool> fixed(flows_.size(), false);
  size_t left = flows_.size();
  while (left > 0) {
    int best = -1;
    double share = std::numeric_limits<double>::infinity();
    for (size_t l = 0; l < links; ++l) {
      if (unfixed[l] == 0) continue;
      const double s = std::max(0.0, residual[l]) / unfixed[l];
      if (s < share) {
        share = s;
        best = static_cast<int>(l);
      }
    }
    CHECK_GE(best, 0);
    for (size_t i = 0; i < flows_.size(); ++i) {
      if (fixed[i]) continue;
      const Connection& c = connections_[flows_[i].connection];
      if (c.links[0] != best && c.links[1] != best) continue;
      fixed[i] = true;
      --left;
      flows_[i].rate = share;
      for (int k = 0; k < c.nlinks; ++k) {
        residual[c.links[k]] -= share;
        unfixed[c.links[k]]--;
      }
    }
  }
}

void FairShareNetwork::ScheduleCompletion() {
  ++version_;
  double soonest = std::numeric_limits<double>::infinity();
  for (const Flow& f : flows_) {
    if (f.rate > 0) soonest = std::min(soonest, f.remaining / f.rate);
  }
  if (flows_.empty()) return;
  CHECK(soonest < std::numeric_limits<double>::infinity()) << "no transmission progresses";
  const uint64_t version = version_;
  events_.After(soonest, [this, version] { OnCompletion(version); });
}

void FairShareNetwork::OnCompletion(uint64_t version) {
  if (version != version_) return;  // the rates changed since: a later event stands
  Advance();
  // The flows done now (at least the one this event was for, whatever the rounding).
  size_t least = 0;
  for (size_t i = 1; i < flows_.size(); ++i) {
    if (flows_[i].remaining < flows_[least].remaining) least = i;
  }
  std::vector<int> done;
  std::vector<Flow> going;
  for (size_t i = 0; i < flows_.size(); ++i) {
    if (flows_[i].remaining <= kDoneBytes || i == least) {
      done.push_back(flows_[i].connection);
    } else {
      going.push_back(flows_[i]);
    }
  }
  flows_.swap(going);
  std::vector<Message> finished;
  for (int connection : done) {
    Connection& c = connections_[connection];
    finished.push_back(std::move(c.queue.front()));
    c.queue.pop_front();
    c.busy = false;
    if (!c.queue.empty()) StartHead(connection);
  }
  Reallocate();
  ScheduleCompletion();
  for (Message& m : finished) {
    const double delay =
        m.local ? params_.local_latency_us : params_.latency_us + params_.message_us;
    if (m.delivered) events_.After(delay, std::move(m.delivered));
    if (m.sent) m.sent();
  }
}

LinkBytes FairShareNetwork::link_bytes() const {
  LinkBytes b;
  for (int h = 0; h < hosts_; ++h) {
    b.up.push_back(carried_[3 * h]);
    b.down.push_back(carried_[3 * h + 1]);
  }
  return b;
}

// ------------------------------------------------------------------ FairQueueNetwork

FairQueueNetwork::FairQueueNetwork(EventQueue& events, const NetworkParams& params, int hosts)
    : events_(events),
      params_(params),
      hosts_(hosts),
      up_(hosts),
      down_(hosts),
      local_free_(hosts, 0.0) {
  CHECK(hosts > 0 && params.link_bytes_per_us > 0 && params.local_bytes_per_us > 0);
  for (int h = 0; h < hosts; ++h) {
    rate_.push_back(params.RateOf(h));
    CHECK_GT(rate_.back(), 0) << "host " << h;
  }
}

int FairQueueNetwork::Connect(int src, int dst) {
  CHECK(src >= 0 && src < hosts_ && dst >= 0 && dst < hosts_) << src << " -> " << dst;
  connections_.push_back(Connection{src, dst, 0, 0, 0, 0, 0, 0, 0, 0, nullptr});
  return static_cast<int>(connections_.size()) - 1;
}

int FairQueueNetwork::NewMessage(Message m) {
  if (free_.empty()) {
    messages_.push_back(std::move(m));
    return static_cast<int>(messages_.size()) - 1;
  }
  const int id = free_.back();
  free_.pop_back();
  messages_[id] = std::move(m);
  return id;
}

void FairQueueNetwork::Send(int connection, uint64_t bytes, Action sent, Action delivered) {
  Connection& c = connections_.at(connection);
  const SimTime now = events_.now();
  if (c.src == c.dst) {
    // Within a host: the local path, in order.
    const SimTime start = std::max(now, local_free_[c.src]);
    const SimTime left = local_free_[c.src] =
        start + static_cast<double>(bytes) / params_.local_bytes_per_us;
    const SimTime arrived = left + params_.local_latency_us;
    if (sent) events_.At(left, std::move(sent));
    if (delivered) events_.At(arrived, std::move(delivered));
    return;
  }
  // A large message goes as segments, each a link's unit of service: the connections
  // sharing a link take turns of a segment. Only the last carries the callbacks.
  double wire = static_cast<double>(bytes) + params_.header_bytes;
  const double segment = params_.segment_bytes > 0 ? params_.segment_bytes : wire;
  while (true) {
    const bool last = wire <= segment * 1.5;  // no sliver at the end
    const double part = last ? wire : segment;
    wire -= part;
    Message m{connection, 2, part, 0, nullptr, nullptr};
    if (last) {
      m.delivered = std::move(delivered);
      m.sent = std::move(sent);
    }
    const int id = NewMessage(std::move(m));
    if (params_.window_bytes <= 0) {
      ToUplink(id);
    } else {
      if (!c.backlog) c.backlog = std::make_unique<std::deque<int>>();
      c.backlog->push_back(id);
      Admit(connection);
    }
    if (last) return;
  }
}

bool FairQueueNetwork::Interleaves(const Message& m) const {
  return m.wire <= params_.interleave_bytes;
}

void FairQueueNetwork::ToUplink(int id) {
  Message& m = messages_[id];
  Connection& c = connections_[m.connection];
  if (!Interleaves(m) || c.up_waiting > 0) {
    c.up_waiting++;
    Enqueue(up_[c.src], c.up_tag, id, m.wire);
    Serve(c.src, /*up=*/true);
    return;
  }
  // Between the segments of the message in service: behind its own connection only.
  const SimTime start = std::max(events_.now(), c.up_free);
  Left(id, start);
}

void FairQueueNetwork::Left(int id, SimTime start) {
  Message& m = messages_[id];
  Connection& c = connections_[m.connection];
  m.left = c.up_free = start + m.wire / rate_[c.src];
  up_[c.src].bytes += m.wire;
  if (m.sent) {
    events_.At(m.left, [this, id] {
      Action sent = std::move(messages_[id].sent);
      LinkDone(id);
      sent();
    });
  } else {
    LinkDone(id);  // nothing more to do at m.left
  }
  // Cut-through: the receiver's downlink may take it from now on.
  if (!Interleaves(m) || c.down_waiting > 0) {
    c.down_waiting++;
    Enqueue(down_[c.dst], c.down_tag, id, m.wire);
    Serve(c.dst, /*up=*/false);
    return;
  }
  Arrived(id, std::max(std::max(events_.now(), c.down_free) + m.wire / rate_[c.dst],
                       m.left));
}

void FairQueueNetwork::Admit(int connection) {
  Connection& c = connections_[connection];
  while (!c.backlog->empty()) {
    const int id = c.backlog->front();
    const double wire = messages_[id].wire;
    if (c.in_window > 0 && c.in_window + wire > params_.window_bytes) break;
    c.backlog->pop_front();
    c.in_window += wire;
    ToUplink(id);
  }
}

void FairQueueNetwork::Enqueue(Link& link, double& connection_tag, int message, double wire) {
  if (params_.fifo_links) {  // arrival order: the sequence number decides
    link.waiting.push(Waiting{0.0, next_seq_++, message});
    return;
  }
  const double start = std::max(link.virtual_time, connection_tag);
  connection_tag = start + wire;
  link.waiting.push(Waiting{start, next_seq_++, message});
}

void FairQueueNetwork::Serve(int host, bool up) {
  Link& link = up ? up_[host] : down_[host];
  while (!link.waiting.empty() && link.busy_until <= events_.now()) {
    if (up) {
      StartUp(host);
    } else {
      StartDown(host);
    }
  }
  if (!link.waiting.empty() && !link.wake_scheduled) {
    link.wake_scheduled = true;
    events_.At(link.busy_until, [this, host, up] {
      (up ? up_[host] : down_[host]).wake_scheduled = false;
      Serve(host, up);
    });
  }
}

void FairQueueNetwork::LinkDone(int message) {
  if (--messages_[message].links_left > 0) return;
  messages_[message] = Message{};
  free_.push_back(message);
}

int FairQueueNetwork::TakeNext(Link& link) {
  const Waiting next = link.waiting.top();
  link.waiting.pop();
  link.virtual_time = next.tag;
  return next.message;
}

void FairQueueNetwork::StartUp(int host) {
  Link& link = up_[host];
  const int id = TakeNext(link);
  Connection& c = connections_[messages_[id].connection];
  c.up_waiting--;
  // Behind what interleaved on its connection: as a TCP stream, in order.
  const SimTime start = std::max(events_.now(), c.up_free);
  link.busy_until = start + messages_[id].wire / rate_[host];
  Left(id, start);
}

void FairQueueNetwork::StartDown(int host) {
  Link& link = down_[host];
  const int id = TakeNext(link);
  Message& m = messages_[id];
  Connection& c = connections_[m.connection];
  c.down_waiting--;
  const SimTime start = std::max(events_.now(), c.down_free);
  const SimTime end = std::max(start + m.wire / rate_[host], m.left);
  link.busy_until = end;
  Arrived(id, end);
}

void FairQueueNetwork::Arrived(int id, SimTime end) {
  Message& m = messages_[id];
  Connection& c = connections_[m.connection];
  c.down_free = end;
  down_[c.dst].bytes += m.wire;
  c.arrived = std::max(c.arrived, end + params_.latency_us + params_.message_us);
  if (m.delivered) events_.At(c.arrived, std::move(m.delivered));
  if (params_.window_bytes > 0) {
    // The window reopens when the sender learns the bytes arrived (TCP's ack, a latency on).
    const int connection = m.connection;
    const double wire = m.wire;
    events_.At(end + params_.latency_us, [this, connection, wire] {
      connections_[connection].in_window -= wire;
      Admit(connection);
    });
  }
  LinkDone(id);
}

LinkBytes FairQueueNetwork::link_bytes() const {
  LinkBytes b;
  for (int h = 0; h < hosts_; ++h) {
    b.up.push_back(up_[h].bytes);
    b.down.push_back(down_[h].bytes);
  }
  return b;
}

}  // namespace ferry::sim
