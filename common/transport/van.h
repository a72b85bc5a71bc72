#pragma once

// Van: moves Messages between nodes over ZeroMQ (the name is ps-lite's).
//
// Sockets: one bound ROUTER for inbound connections (scheduler, servers), and one
// DEALER per outbound peer (to the scheduler, to each server). A request that arrives
// on the ROUTER is answered on the same connection (Reply), so workers never need to
// accept connections.
//
// Threads: ZeroMQ sockets are not thread-safe, so one IO thread ("van-io") owns every
// socket. Other threads hand it work through an in-process PUSH/PULL pipe; ZeroMQ
// moves message frames through that pipe without copying them. Handlers run on the
// IO thread and must be quick (hand long work to another thread).
//
// Zero copy: a payload is given to ZeroMQ with zmq_msg_init_data; the message holds a
// reference to the payload's owner until ZeroMQ's release hook fires after the bytes
// are on the wire. Received payloads are Buffers that own the ZeroMQ frame.
//
// Lanes: a worker opens two DEALERs to each server (Connect with control_lane), both to
// the server's one ROUTER: the data connection, whose routing id is the node's, and the
// control connection, whose routing id is ControlIdentity(the node's). Control messages
// (IsControlMessage: acks, errors, JOIN_ACK, RESEND_SUM) take the control connection
// where there is one, so they never queue behind the tensor bytes ZeroMQ and the kernel
// hold for the data connection: an acknowledgement (which returns a worker's credit)
// crosses the link while megabytes of sums wait for the other connection. A reply whose
// requester has no control connection (not connected yet, or a node without one) falls
// back to the data connection (counted: control_fallbacks). Messages on one lane keep
// their order; between lanes there is none (an ack may arrive after its sum).
//
// Order: with watermark_bytes > 0, messages that carry tensor bytes on a data connection
// (a worker's pushes, a server's sums) wait in a priority queue per destination node
// (OrderQueues, order_queue.h), most urgent first (Envelope.priority, then arrival: the
// order of the worker's scheduling too, common/types/urgency.h), and the IO thread hands the next one to
// ZeroMQ only while less than the watermark of payload bytes to that destination is
// handed over and not yet released (a release hook wakes the IO thread through an
// eventfd). With tcp_notsent_lowat bounding the kernel's share, a newly ready urgent
// message waits behind about one watermark plus one message, not behind everything handed
// over before it. Messages without tensor bytes pass at once: that is safe because a JOIN
// (the one that must not overtake pushes) is sent only when its worker has nothing in
// flight. A destination never stalls for good: a connection that dies drops what ZeroMQ
// held, which runs the release hooks.
//
// Links (link_scheduling; a worker's Van, for point-to-point scheduling): every outbound
// data connection's path is classified when ZeroMQ reports it, from the socket's own
// addresses: a peer on this host (the same address, or loopback) crosses no network link;
// any other crosses this host's uplink and the peer host's downlink. A point-to-point send
// (P2P_SEND) is a critical flow: it goes before everything queued for its destination, and
// while it runs no other tensor bytes to a destination that shares a link with it are
// handed to ZeroMQ (they wait in the order queues: held back, counted in link_held). The
// flow ends when it is measured gone: nothing of it queued or unreleased, and the kernel
// holds no byte of its connection unsent or unacknowledged (SIOCOUTQ: the peer host holds
// every byte); the IO thread checks every millisecond while a flow runs and then releases
// what was held at once. A flow whose connection is not up (not yet reported, or down:
// ZeroMQ keeps its bytes until a reconnect) ends at once: none of its bytes is on a link.
// Only messages with tensor bytes are held; acks, control messages and the peer's own flow
// never are.
//
// Order across threads: messages to one destination and lane leave in the order of the Send
// (or Reply) calls, whichever threads make them: other threads' messages travel through the
// pipe, and a Send on the IO thread (a handler's, transmitted at once) first carries out
// what the pipe holds, so it never overtakes a message another thread sent before it.
//
// Every socket has an unlimited send high-water mark: a full queue must never block
// the IO thread or drop a message silently. Flow control is the caller's (workers
// bound the bytes in flight by their scheduling credit).

#include <zmq.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/util/counters.h"
#include "common/transport/fault_injection.h"
#include "common/transport/link_paths.h"
#include "common/transport/message.h"
#include "common/transport/order_queue.h"
#include "common/transport/security.h"
#include "common/transport/shm_lane.h"
#include "common/util/mutex.h"

namespace ferry {

struct PayloadHold;  // what ZeroMQ holds of a payload it sends without copying (van_internal.h)

struct VanOptions {
  std::string name = "van";                 // for log lines
  uint64_t max_message_bytes = 1ull << 30;  // larger inbound frames are refused
  int linger_ms = 2000;                     // how long Stop() may flush unsent messages
  // An inbound connection that has not completed its ZMTP (and CURVE) handshake this long
  // after it was accepted is closed (FERRY_HANDSHAKE_TIMEOUT_MS).
  int handshake_timeout_ms = 10000;
  // Called (on a ZeroMQ thread) with the address of each sent payload when ZeroMQ
  // releases it; for tests and diagnostics.
  std::function<void(const void* data)> on_payload_released;
  // Non-empty: every socket uses CURVE with keys derived from this secret, and only
  // peers holding it are admitted (see security.h).
  std::string secret;
  // Replies of control types go to the requester's control connection (above);
  // false: every reply takes the connection its request came on.
  bool control_lane = false;
  // > 0: TCP_NOTSENT_LOWAT on every TCP connection the ROUTER accepts and every data
  // connection Connect opens beside a control lane (set when ZeroMQ reports the
  // connection, again after each reconnect): the kernel then holds at most this many
  // unsent bytes per connection, and what waits beyond them waits in ZeroMQ, where the
  // Van sees it (unreleased_bytes), instead of in a socket buffer of up to megabytes.
  int tcp_notsent_lowat = 0;
  // > 0: the order above; 0: messages go to ZeroMQ at once, in order (but for Links).
  uint64_t watermark_bytes = 0;
  // Links above: point-to-point sends are critical flows that hold back other tensor bytes
  // on the links they cross (a worker's Van under FERRY_SCHEDULING_POLICY other than fifo
  // and fifo-bucket). Messages with tensor bytes then go through the order queues even with
  // watermark_bytes 0.
  bool link_scheduling = false;
  // With link_scheduling and no watermark: the watermark and tcp_notsent_lowat (> 0: on
  // the outbound data connections open then and opened later) the Van takes at its first
  // point-to-point send, carried out by the IO thread before that send (a worker under the
  // default policy: trirace's transport once it sends; config.h, trirace_on_sends). 0: none.
  uint64_t watermark_bytes_from_first_send = 0;
  int tcp_notsent_lowat_from_first_send = 0;
  // > 0: ZeroMQ heartbeats on every connection; one silent this long is closed and
  // reconnected (messages it carried may be lost: callers resend).
  int link_timeout_ms = 0;
  // Fault injection for tests: drop this percentage of received data messages
  // (PUSH, PUSH_FUSED, PUSH_ACK, PUSH_RESULT, RESEND_SUM, P2P_SEND, P2P_ACK), and hold every
  // received message this long before handing it on (a fixed delay keeps each connection's
  // order).
  double drop_percent = 0.0;
  int delay_ms = 0;
  // Called (on the IO thread) for a REGISTER of another protocol version that arrived on
  // the ROUTER: its envelope parsed, ValidateMessage refused its version, and it is counted
  // in bad_messages_dropped and not handed to the handler. The scheduler answers it with an
  // ERROR stamped with the requester's version, so a node of another release learns why
  // instead of waiting out its connect timeout. The callback logs; the Van does not. Unset:
  // dropped and logged like any bad message. Any other message of another version is
  // dropped and logged like any bad message (on_invalid below).
  std::function<void(const Message& message, const Origin& origin)> on_version_mismatch;
  // Called (on the IO thread) for a message that arrived on the ROUTER, whose envelope
  // parsed and that ValidateMessage refused with `why` (e.g. a frame cut wrong, CheckFrame),
  // but not for what on_version_mismatch (when set) takes; the Van has counted it in
  // bad_messages_dropped and logged it (rate limited), and does not hand it to the handler.
  // The callback may answer it (the server answers a data message of a worker of its job
  // with an ERROR, so the sender learns why instead of waiting out its deadlines); it must
  // not trust the message beyond its envelope having parsed, and does not log it again.
  // Unset: dropped and logged only.
  std::function<void(const Message& message, const Status& why, const Origin& origin)> on_invalid;
  // The shared-memory lane (shm_lane.h): with shm.enabled, a Van that binds listens for
  // lane channels, and one that connects with a routing id probes each peer's; payloads to
  // a peer on the lane travel through shared memory. Off by default (VanOptionsFor: FERRY_SHM).
  ShmOptions shm;

  static VanOptions Named(std::string name, uint64_t max_message_bytes,
                          std::string secret = "") {
    VanOptions o;
    o.name = std::move(name);
    o.max_message_bytes = max_message_bytes;
    o.secret = std::move(secret);
    return o;
  }
};

// Every counter of a Van, once: X(field). The list makes VanStats' fields, the Van's
// atomic counters, the copy between them and the counters' names ("van.<field>").
//   messages_sent, messages_received
//   bytes_sent, bytes_received   envelope + payload bytes handed to / read from sockets
//   payloads_sent_zero_copy      payload frames that referenced caller memory
//   bad_messages_dropped         unparsable or invalid messages
//   send_failures                e.g. a reply to a peer that disconnected
//   connections_refused          failed the security check or handshake
//   injected_drops               data messages dropped by fault injection
//   connections_closed           inbound connections that ended (any reason)
//   control_fallbacks            control replies sent on the data connection because the
//                                requester had no control connection
//   sockets_tuned                TCP connections given TCP_NOTSENT_LOWAT
//   data_queued                  messages that went through the order queues (Order above)
//   data_reordered               ... handed to ZeroMQ before one that arrived earlier
//   unreleased_bytes             a gauge: payload bytes handed to the Van (its pipe or
//                                ZeroMQ) whose release hook has not run yet, i.e. not yet in
//                                the kernel (with CURVE: not yet encrypted into a copy)
//   unreleased_bytes_max         the largest value unreleased_bytes ever had
//   link_flows                   point-to-point flows that held their links (Links above)
//   link_held                    messages with tensor bytes queued while such a flow held
//                                a link of their path
// and the shared-memory lane's (FERRY_SHM_COUNTERS, shm_lane.h).
#define FERRY_VAN_OWN_COUNTERS(X)                                                    \
  X(messages_sent)                                                                   \
  X(messages_received)                                                               \
  X(bytes_sent) X(bytes_received) X(payloads_sent_zero_copy) X(bad_messages_dropped) \
      X(send_failures) X(connections_refused) X(injected_drops) X(connections_closed) \
          X(control_fallbacks) X(sockets_tuned) X(data_queued) X(data_reordered) \
              X(unreleased_bytes) X(unreleased_bytes_max) X(link_flows) X(link_held)
#define FERRY_VAN_COUNTERS(X) FERRY_VAN_OWN_COUNTERS(X) FERRY_SHM_COUNTERS(X)

struct VanStats {
#define FERRY_VAN_STATS_FIELD(name) uint64_t name = 0;
  FERRY_VAN_COUNTERS(FERRY_VAN_STATS_FIELD)
#undef FERRY_VAN_STATS_FIELD
};

// The Van's statistics as named counters ("van.<field>"), for a node's stats file.
CounterValues VanCounterValues(const VanStats& s);

// The routing id of a node's control connection: its data routing id and one byte that
// no routing id of Ferry's contains. DataIdentity maps either lane's id to the data one.
std::string ControlIdentity(const std::string& data_identity);
std::string DataIdentity(const std::string& identity);
bool IsControlIdentity(const std::string& identity);

class Van {
 public:
  using Handler = std::function<void(Message&&, const Origin&)>;

  explicit Van(VanOptions options);
  ~Van();
  Van(const Van&) = delete;
  Van& operator=(const Van&) = delete;

  // Binds the inbound ROUTER at tcp://host:port (port 0: any free port).
  // Returns the port bound. REQUIRES: before Start(). Throws FerryError on failure.
  int Bind(const std::string& host, int port);

  // Starts the IO thread; `handler` sees every valid inbound message.
  void Start(Handler handler);

  // Opens an outbound connection named `peer` to `endpoint` (tcp://ip:port); the
  // remote ROUTER sees us as `routing_id` (empty: ZeroMQ picks one). Connecting a peer
  // again to the same endpoint does nothing; to another endpoint it closes the old
  // connection (dropping what was queued there) and opens the new one. With
  // `control_lane` (and a routing id) a second connection carries control messages
  // (see Lanes above). Thread-safe.
  void Connect(int peer, const std::string& endpoint, const std::string& routing_id,
               bool control_lane = false);

  // Sends on the outbound connection to `peer` (a control message on its control
  // connection if it has one). Thread-safe; never blocks on the network. Messages to one
  // peer keep their order within a lane.
  void Send(int peer, Message message);

  // Sends on the inbound ROUTER to the node whose connection (either lane) is
  // `identity`: a control message on its control connection when control_lane is on and
  // it has one, anything else on its data connection. Thread-safe.
  void Reply(const std::string& identity, Message message);

  // Flushes (up to linger_ms), closes every socket, joins the IO thread and ends the
  // ZeroMQ context. When it returns, ZeroMQ holds no payload and no release hook can
  // run any more. Idempotent; must not be called from a handler.
  void Stop() EXCLUDES(push_mutex_);

  // Bytes in shared memory that peers on the shared-memory lane read without a copy when
  // they are a payload sent to them (a server's sum); empty without a lane or room (then
  // the caller allocates on the heap). Thread-safe. REQUIRES: every such Buffer is let go
  // before the Van is destroyed (the arena's budget count lives in the Van; the server's
  // engines, which hold its sums, end before its Van).
  Buffer AllocateShared(uint64_t bytes) { return lanes_ ? lanes_->AllocateShared(bytes) : Buffer(); }

  // Waits (at most `timeout_ms`) until the shared-memory lane of every peer connected so far
  // is on or impossible (shm_lane.h, WaitSettled); true at once without the lane. Not from
  // the IO thread.
  bool WaitForLanes(int timeout_ms) const { return !lanes_ || lanes_->WaitSettled(timeout_ms); }

  VanStats stats() const;
  const std::string& name() const { return options_.name; }

  // For tests: while held, the IO thread reads nothing from the data connections of
  // outbound peers that have a control lane (their bytes wait in ZeroMQ), but still
  // reads their control connections and every other socket. Returns once the IO thread
  // applied it. Thread-safe; not from a handler.
  void HoldDataReadsForTest(bool hold);
  // For tests: while held, the order queues hand nothing to ZeroMQ (messages queue up).
  void HoldDataQueuesForTest(bool hold);

 private:
  static constexpr size_t kPipeHeaderBytes = 18;  // see Enqueue
  enum class Command : uint8_t {
    kSend = 1, kReply = 2, kConnect = 3, kStop = 4, kHoldReads = 5, kHoldQueues = 6
  };
  struct Connection;  // the outbound (DEALER) sockets to one node, made by Connect()

  // `flag`: kConnect: open a control lane; kSend, kReply: a control message; kHoldReads:
  // hold (or release) the data reads; kHoldQueues: the order queues.
  void Enqueue(Command command, int peer, bool flag, const std::string& text, const Message* message,
               const std::string& extra = std::string()) EXCLUDES(push_mutex_);
  void IoLoop();
  // IO thread: carries out up to `max` commands waiting in the pipe, in order (sets stop_
  // at a kStop and reads nothing after it). Run by the loop, and by Send and Reply on the
  // IO thread before they transmit, so that what other threads sent first goes first.
  void DrainCommands(int max);
  void ReceiveFrom(void* socket, bool inbound, int peer);
  // The frames of one message, ready for a socket.
  struct Frames {
    zmq_msg_t envelope;
    zmq_msg_t payload;  // initialised only when has_payload
    bool has_payload = false;
    bool control = false;  // IsControlMessage: takes the control lane where there is one
    bool critical = false;  // a point-to-point send under link_scheduling (Links above)
    int32_t priority = 0;  // Envelope.priority, for the reply order
    PayloadHold* hold = nullptr;  // the payload's, until ZeroMQ releases it
  };
  struct OwnedFrames;  // Frames on the heap, closed when destroyed
  using OrderQueue = OrderQueues<std::unique_ptr<OwnedFrames>>;
  Frames BuildFrames(const Message& message);
  // Sends `frames` (prefixed by `identity` on the ROUTER), counts the outcome, and
  // always releases the frames. `target` names the destination in logs.
  void Transmit(void* socket, const std::string* identity, Frames* frames,
                const std::string& target);
  void TransmitToPeer(int peer, Frames* frames);                     // Send, on the IO thread
  void TransmitReply(const std::string& identity, Frames* frames);  // Reply, on the IO thread
  // IO thread: queues a message with tensor bytes (Order above) for the destination
  // `name`: an inbound node's data identity (peer -1), or outbound peer `peer`.
  void QueueData(const std::string& name, int peer, Frames* frames);
  // Hands over what fits under the watermark and the links: of `only`, or of every
  // destination after closing the flows measured gone (Links above).
  void Pump(OrderQueue::Destination* only = nullptr);
  void DoConnect(int peer, const std::string& endpoint, const std::string& routing_id,
                 bool control_lane);
  void* NewDealer(const std::string& routing_id);
  void CloseConnection(Connection& p);  // closes what of it is open
  void HandleZapRequest();       // IO thread: admit or refuse a CURVE client
  // IO thread: an event of `monitor` (the ROUTER's: failed handshakes, closed and accepted
  // connections; a DEALER's: its connection made).
  // `connection`: the outbound connection whose data lane `monitor` watches, or null.
  void HandleMonitorEvent(void* monitor, Connection* connection = nullptr);
  void TuneConnection(int fd);   // IO thread: applies tcp_notsent_lowat to a new connection
  Connection* FindConnection(int peer);

  // Constant once started, but for watermark_bytes and tcp_notsent_lowat, which the IO
  // thread sets at the first send (watermark_bytes_from_first_send) and reads alone.
  VanOptions options_;
  void* context_ = nullptr;
  void* router_ = nullptr;        // inbound; owned by the IO thread once started
  void* command_pull_ = nullptr;  // IO thread end of the command pipe
  // Guards command_push_ (the socket is used by one thread at a time) and pipe_closed_.
  Mutex push_mutex_;
  void* command_push_ GUARDED_BY(push_mutex_) = nullptr;  // other threads' end of the pipe
  bool pipe_closed_ GUARDED_BY(push_mutex_) = false;  // stop command sent: nothing follows
  std::vector<std::unique_ptr<Connection>> connections_;  // IO thread only
  // Replaced by a reconnect to a new endpoint (DoConnect); closed at the top of the next
  // poll round. IO thread only.
  std::vector<std::unique_ptr<Connection>> retired_;
  bool stop_ = false;           // IO thread only: a kStop was read (DrainCommands)
  // IO thread only: the sockets polled this round changed (hold_data_reads_, a peer
  // reconnected): the round reads nothing more and polls again.
  bool reads_changed_ = false;
  bool hold_data_reads_ = false;                          // IO thread only (tests)
  std::atomic<bool> data_reads_held_{false};              // hold_data_reads_, for the caller
  // Order: one queue per node sent tensor bytes (a job's servers or workers), kept for
  // the Van's life (release hooks point at their counts). IO thread only, but for the
  // hooks' atomic counts.
  OrderQueue order_;
  LinkPaths link_paths_;  // Links: IO thread only

  int wake_fd_ = -1;             // eventfd: a release hook wakes the IO thread to Pump
  int monitors_made_ = 0;  // names monitor endpoints; Bind, then the IO thread
  bool secure_ = false;
  CurveKeys keys_{};
  void* zap_ = nullptr;           // ZAP handler socket (secure only); IO thread
  void* monitor_ = nullptr;       // ROUTER handshake events; IO thread
  std::thread io_thread_;
  std::thread::id io_thread_id_;
  Handler handler_;
  std::atomic<bool> started_{false};
  std::atomic<bool> stopped_{false};
  std::string pipe_endpoint_;
  FaultInjection faults_;  // IO thread only

  struct Counters {
#define FERRY_VAN_COUNTER(name) std::atomic<uint64_t> name{0};
    FERRY_VAN_OWN_COUNTERS(FERRY_VAN_COUNTER)
#undef FERRY_VAN_COUNTER
  };
  Counters counters_;  // see FERRY_VAN_COUNTERS; atomic, read by stats() from any thread
  // The shared-memory lane (options_.shm.enabled), else null. Made by the constructor,
  // destroyed with the Van (a late Send may still encode after Stop).
  std::unique_ptr<ShmLanes> lanes_;
  // IO thread: sends what the lane's probe answers.
  void SendLaneMessages(std::vector<ShmLanes::Outgoing>* out);
};

}  // namespace ferry
