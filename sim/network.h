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
//       FairQueueNetwork ("fq", the default): connections share each link in turns of one
//         message (fair queueing at message granularity), as ZeroMQ hands whole messages
//         to a connection; a message of at most `interleave_bytes` (an acknowledgement,
//         1500 in ferry-sim) goes between the segments of the message in service, as a TCP
//         segment does, instead of waiting a whole message for its turn (without it an
//         acknowledgement, which returns a worker's credit, waited behind a 128 KiB sum:
//         the model's largest error, docs/simulation.md "Validation"); a message over
//         1.5 x `segment_bytes` goes as segments of that size, each taking its turn.
//         Validated against the emulated cluster; O(log n) work per message, so it runs
//         1024 workers;
//       FairQueueNetwork with FIFO links ("fifo"): each link sends messages in the order
//         they reached it, as the emulated cluster's HTB leaf (pfifo) does, and each
//         connection keeps at most `window_bytes` between entering its uplink and leaving
//         the receiver's downlink (TCP's congestion window; the rest waits in its own queue,
//         the socket buffer). An urgent message waits behind every byte queued ahead of it
//         on the link, at most a window per other connection;
//       FairShareNetwork ("fair"): fluid max-min fair sharing between the connections
//         transmitting (progressive filling over every link, recomputed whenever a
//         transmission starts or ends). It keeps identical workers in lock-step through an
//         incast (every push to one server ends together), which the emulated cluster does
//         not do (docs/simulation.md, "Two network models"); cost grows with connections x
//         links per event: small clusters only.
// Not thread-safe (one event loop).

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <vector>

#include "sim/event_queue.h"

namespace ferry::sim {

struct NetworkParams {
  double link_bytes_per_us = 125.0;    // 1 Gbit/s, after TCP efficiency
  // By host: its uplink's and downlink's rate where it differs (uneven links); a host
  // beyond the vector, or at 0, has link_bytes_per_us.
  std::vector<double> host_bytes_per_us;
  // Host `h`'s link rate, each way.
  double RateOf(int h) const {
    return static_cast<size_t>(h) < host_bytes_per_us.size() && host_bytes_per_us[h] > 0
               ? host_bytes_per_us[h]
               : link_bytes_per_us;
  }
  double latency_us = 0;               // one way, between hosts
  double message_us = 0;               // per message, added to its delivery
  double local_bytes_per_us = 4000.0;  // within a host
  double local_latency_us = 5;
  uint64_t header_bytes = 128;         // per message on a link (envelope, framing)
  // FairQueueNetwork: links serve in arrival order instead of fair turns ("fifo").
  bool fifo_links = false;
  // FairQueueNetwork: bytes a connection keeps between entering its uplink and leaving the
  // receiver's downlink (at least one message; 0: no limit).
  double window_bytes = 0;
  // FairQueueNetwork: a message of at most this many bytes on the wire (an acknowledgement)
  // goes between the segments of the message in service, as a TCP segment does, instead of
  // waiting for it; still behind its own connection's (0: every message waits its turn).
  double interleave_bytes = 0;
  // FairQueueNetwork: a message larger than this goes as segments of about this size, each
  // waiting its turn on a link (0: whole messages).
  double segment_bytes = 0;
};

// Bytes each link carried, for utilisation.
struct LinkBytes {
  std::vector<double> up;    // by host
  std::vector<double> down;  // by host
};

enum class NetworkModel { kQueued, kFifo, kFair };
// "fq", "fifo" or "fair".
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
  std::deque<Connection> connections_;  // a deque: a Connection cannot be copied (its queue)
  std::vector<Flow> flows_;  // transmitting now, one per busy connection
  SimTime updated_ = 0;      // when flows_' remaining bytes were last brought up to date
  uint64_t version_ = 0;     // completion events of older versions are stale
};

// Message-level fair queueing: each link sends one message at a time, choosing among the
// connections with messages waiting by start-time fair queueing (Goyal et al., SIGCOMM'96:
// a message's start tag is max(the start tag of the message in service, its connection's
// last finish tag), its finish tag the start plus its bytes; the least start tag goes
// next), so connections share a link as under fair sharing, in turns of one message, and a
// connection that starts sending goes next. A message enters its receiver's downlink when
// it starts on the sender's uplink (cut-through: it cannot end there before it left the
// sender). Every message, an acknowledgement too, takes its turn behind what its own
// connection sent before it, as on a TCP stream. O(log n) work per message and link.
class FairQueueNetwork : public Network {
 public:
  FairQueueNetwork(EventQueue& events, const NetworkParams& params, int hosts);
  int Connect(int src, int dst) override;
  void Send(int connection, uint64_t bytes, Action sent, Action delivered) override;
  LinkBytes link_bytes() const override;
  int hosts() const override { return hosts_; }

 private:
  struct Message {
    int connection;
    int links_left = 2;  // the uplink and the downlink still to finish with it
    double wire;
    SimTime left = 0;  // when it left the sender (known once it started on the uplink)
    Action delivered;
    Action sent;  // last: rarely set (the watermark's)
  };
  struct Waiting {
    double tag;  // the start tag
    uint64_t seq;
    int message;
    bool operator>(const Waiting& o) const {
      return (tag > o.tag) | ((tag == o.tag) & (seq > o.seq));  // no branch (as EventQueue)
    }
  };
  struct Link {
    double virtual_time = 0;  // the start tag of the message in service (SFQ)
    SimTime busy_until = 0;   // when the message in service is through
    bool wake_scheduled = false;  // an event at busy_until serves what waits
    std::priority_queue<Waiting, std::vector<Waiting>, std::greater<Waiting>> waiting;
    double bytes = 0;
  };
  struct Connection {
    int src;
    int dst;
    double up_tag = 0;    // the last finish tag on the uplink
    double down_tag = 0;  // ... and on the downlink
    SimTime arrived = 0;  // when its last message arrived
    int up_waiting = 0;       // its messages waiting for the uplink (not started)
    int down_waiting = 0;     // ... for the downlink
    SimTime up_free = 0;      // when its last message started on the uplink is through it
    SimTime down_free = 0;    // ... on the downlink
    double in_window = 0;      // bytes between entering the uplink and leaving the downlink
    // Messages waiting for the window, in order; made at the first (with a window only:
    // an empty std::deque allocates, and there are millions of connections).
    std::unique_ptr<std::deque<int>> backlog;
  };
  void Enqueue(Link& link, double& connection_tag, int message, double wire);
  // Puts connection `c`'s backlog on its uplink while the window admits it.
  void Admit(int c);
  // Whether message `m` is small enough to go between others' segments (interleave_bytes).
  bool Interleaves(const Message& m) const;
  // Message `id` goes to its uplink: into the link's queue, or between the segments of the
  // message in service when it interleaves and nothing of its connection waits there.
  void ToUplink(int id);
  // Message `id` starts on its uplink at `start`; then to the receiver's downlink (queued
  // or interleaved, as on the uplink).
  void Left(int id, SimTime start);
  // Message `id` is through the receiver's downlink at `end`: delivered a latency on.
  void Arrived(int id, SimTime end);
  // Starts what waits on a link while it is free; an event at busy_until serves the rest
  // (none when nothing waits: an idle link costs no events).
  void Serve(int host, bool up);
  void StartUp(int host);
  void StartDown(int host);
  // Takes the waiting message with the least start tag; the link's virtual time becomes it.
  int TakeNext(Link& link);
  int NewMessage(Message m);
  // One link is done with the message; the second frees it.
  void LinkDone(int message);

  EventQueue& events_;
  const NetworkParams params_;
  const int hosts_;
  std::vector<Link> up_, down_;
  std::vector<double> rate_;  // by host: its links' bytes per us (NetworkParams::RateOf)
  std::vector<SimTime> local_free_;
  std::vector<Connection> connections_;
  std::vector<Message> messages_;  // by id; ids are reused (free_)
  std::vector<int> free_;
  uint64_t next_seq_ = 0;
};

}  // namespace ferry::sim
