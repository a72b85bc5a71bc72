#pragma once

// The simulated network: hosts with full-duplex links, connections between them, and
// messages on connections.
//
//   FairShareNetwork net(events, params, /*hosts=*/4);
//   int c = net.Connect(/*src=*/0, /*dst=*/2);          // an ordered byte stream
//   net.Send(c, bytes, /*sent=*/[] {...}, /*delivered=*/[] {...});
//
// Model (docs/simulation.md, "The model"):
//   - every host has an uplink and a downlink of `link_bytes_per_us` each (the shaped
//     rate times TCP's efficiency), and a local path of `local_bytes_per_us` for
//     connections within the host (the shared-memory lane or loopback);
//   - a connection is a TCP stream: its messages leave in order, one after another; a
//     message occupies its connection for its bytes plus `header_bytes`;
//   - `sent` runs when the message's last byte left the sender (ZeroMQ released it: what
//     the transport's watermark counts), `delivered` `latency_us + message_us` later
//     (`local_latency_us` within a host);
//   - how connections share the links is what the two models differ in:
//       FairShareNetwork: max-min fair sharing between the connections transmitting
//         (progressive filling over every link, recomputed whenever a transmission starts
//         or ends): TCP's long-run behaviour. The fine model: cost grows with the
//         connections transmitting at once times the links;
//       FifoNetwork: each link transmits one message with payload at a time, in the order
//         they reach it; a message crosses the receiver's downlink cut-through (it cannot
//         end there before it left the sender, and waits for the messages ahead of it).
//         A header-only message (an acknowledgement) takes no turn on the link: it leaves
//         right after what its own connection sent before it and arrives after it, as on
//         a TCP stream (it would otherwise wait behind every connection's bytes, which
//         fair sharing never makes it do). Constant work per message: the coarse model
//         for thousands of hosts, checked against the fine one (tests/sim/network_test.cc,
//         docs/simulation.md).
// Not thread-safe (one event loop).

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "sim/event_queue.h"

namespace ferry::sim {

struct NetworkParams {
  double link_bytes_per_us = 125.0;    // 1 Gbit/s, after TCP efficiency
  double latency_us = 0;               // one way, between hosts
  double message_us = 0;               // per message, added to its delivery
  double local_bytes_per_us = 4000.0;  // within a host
  double local_latency_us = 5;
  uint64_t header_bytes = 128;         // per message on a link (envelope, framing)
};

// Bytes each link carried, for utilisation.
struct LinkBytes {
  std::vector<double> up;    // by host
  std::vector<double> down;  // by host
};

enum class NetworkModel { kFair, kFifo };
// "fair" or "fifo".
const char* NetworkModelName(NetworkModel model);

class Network {
 public:
  using Action = EventQueue::Action;
  virtual ~Network() = default;
  // A new connection from `src` to `dst` (the same host: the local path). Returns its id.
  virtual int Connect(int src, int dst) = 0;
  // Queues a message of `bytes` (payload; the header is added) on `connection`.
  virtual void Send(int connection, uint64_t bytes, Action sent, Action delivered) = 0;
  virtual LinkBytes link_bytes() const = 0;
  virtual int hosts() const = 0;
};

std::unique_ptr<Network> MakeNetwork(NetworkModel model, EventQueue& events,
                                     const NetworkParams& params, int hosts);

class FairShareNetwork : public Network {
 public:
  FairShareNetwork(EventQueue& events, const NetworkParams& params, int hosts);
  int Connect(int src, int dst) override;
  void Send(int connection, uint64_t bytes, Action sent, Action delivered) override;
  LinkBytes link_bytes() const override;
  int hosts() const override { return hosts_; }

 private:
  struct Message {
    double wire_bytes;
    bool local;
    Action sent;
    Action delivered;
  };
  struct Connection {
    int links[2];  // the sender's uplink and the receiver's downlink, or the local path
    int nlinks;    // 2, or 1 within a host
    bool local;
    std::deque<Message> queue;  // the head is transmitting when busy
    bool busy = false;
  };
  struct Flow {
    int connection;
    double remaining;  // bytes
    double rate = 0;   // bytes per us
  };
  // Links: 3 per host: uplink 3h, downlink 3h + 1, local path 3h + 2.
  void Advance();
  void StartHead(int connection);
  void Reallocate();
  void ScheduleCompletion();
  void OnCompletion(uint64_t version);

  EventQueue& events_;
  const NetworkParams params_;
  const int hosts_;
  std::vector<double> capacity_;  // by link, bytes per us
  std::vector<double> carried_;   // by link, bytes
  std::vector<Connection> connections_;
  std::vector<Flow> flows_;  // transmitting now, one per busy connection
  SimTime updated_ = 0;      // when flows_' remaining bytes were last brought up to date
  uint64_t version_ = 0;     // completion events of older versions are stale
};

class FifoNetwork : public Network {
 public:
  FifoNetwork(EventQueue& events, const NetworkParams& params, int hosts);
  int Connect(int src, int dst) override;
  void Send(int connection, uint64_t bytes, Action sent, Action delivered) override;
  LinkBytes link_bytes() const override;
  int hosts() const override { return hosts_; }

 private:
  EventQueue& events_;
  const NetworkParams params_;
  const int hosts_;
  struct Connection {
    int src;
    int dst;
    SimTime left = 0;     // when its last message left the sender
    SimTime arrived = 0;  // when its last message arrived
  };
  std::vector<Connection> connections_;
  std::vector<SimTime> up_free_, down_free_, local_free_;  // by host: when the link is free
  std::vector<double> up_bytes_, down_bytes_;
};

}  // namespace ferry::sim
