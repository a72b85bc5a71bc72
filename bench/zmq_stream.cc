// ferry-zmq-stream: the "raw ZeroMQ throughput" (and, with --pingpong, "raw ZeroMQ round trip")
// reference benchmark.
//
// A plain two-process ZeroMQ stream over TCP, used as the ceiling that Ferry's own push/pull
// throughput is compared against. The sender (DEALER, connects) streams messages from one
// preallocated buffer with zero-copy sends (zmq_msg_init_data with a no-op free function), so
// what is measured is the socket path and not our memcpy. The receiver (ROUTER, binds) receives
// them, checks their size (and a few sample bytes), and acknowledges each phase with a small
// message on the same connection. The timed interval runs from just before the first timed send
// to the receipt of the acknowledgement, which the receiver sends after the last byte of the last
// message arrived: end to end, plus one small-message latency.
//
// Protocol, per connection (all frames of the sender arrive at the ROUTER as [identity][payload]):
//   sender -> Control{kPhase, message_bytes, count}, then `count` data messages
//   receiver -> Ack{status, count, bytes, receiver-side ns from first to last message}
//   ... more phases ...
//   sender -> Control{kQuit}; receiver -> Ack and exits.
// A phase with count 0 is a ping, used once at the start so that connecting is never timed.
//
// --pingpong: latency instead of throughput, the floor that a small push_pull (a request out, a
// reply of the same size back) is compared against. The sender sends one message of
// --message_bytes (zero-copy, as above), the receiver checks it and sends the same bytes back on
// the same connection (the received message itself, no copy), and the sender waits for that echo
// before it sends the next. A round trip is timed from just before the send to the receipt of the
// echo. --warmup untimed round trips come first, then --repeat runs of --messages timed ones per
// size. Its phases on the wire:
//   sender -> Control{kPingPong, message_bytes, count}, then `count` times: one data message,
//             receiver -> the same message back
//   receiver -> Ack{status, count, bytes, 0} after the last echo
// The receiver learns the mode from the control message, so --role=recv needs no --pingpong.
//
// --role=both (the default) forks a receiver child, which binds and reports its bound endpoint
// back through a pipe, and runs the sender in the parent, so one command measures. --role=send and
// --role=recv run the two ends separately (e.g. on two hosts; here only 127.0.0.1 is used).
//
// Every wait has a deadline (--timeout_ms on every socket, a deadline on the pipe and on the
// child's exit); any error exits non-zero.
//
// Output: --format=text prints a table; --format=csv prints `message_bytes,messages,seconds,GBps`
// and one row per timed run (GB/s = 1e9 bytes per second). With --pingpong, one row per timed run
// of the round trips' percentiles in microseconds (p50 and p99 by nearest rank): csv
// `message_bytes,round_trips,p50_us,p99_us,min_us,max_us`; the text table adds mean_us.

#include <gflags/gflags.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/util/program_flags.h"

DEFINE_string(role, "both", "send | recv | both (fork a receiver child, run the sender here)");
DEFINE_string(endpoint, "",
              "ZeroMQ endpoint the receiver binds and the sender connects to; "
              "default tcp://127.0.0.1:<--port>");
DEFINE_int32(port, 5771,
             "TCP port of the default endpoint; with --role=both, 0 picks a free ephemeral port");
DEFINE_int64(message_bytes, 4194304, "bytes per message (unless --sizes is given)");
DEFINE_string(sizes, "",
              "comma-separated message sizes to run in one go, each its own row; accepts K/M/G "
              "suffixes (binary), e.g. 4K,64K,1M,4M,16M. Overrides --message_bytes");
DEFINE_int64(messages, 500, "timed messages per run");
DEFINE_int64(warmup, 20, "untimed warm-up messages before the timed runs of each size");
DEFINE_int64(min_total_bytes, 0,
             "if > 0, raise the timed message count of each size so that a run moves at least "
             "this many bytes (useful for small messages)");
DEFINE_int32(repeat, 1, "timed runs per size, each printed as its own row");
DEFINE_string(format, "text", "text | csv");
DEFINE_int32(timeout_ms, 30000, "deadline of every wait (socket send/receive, child start/exit)");
DEFINE_int32(io_threads, 1, "ZeroMQ I/O threads per context");
DEFINE_bool(tune_malloc, false,
            "mallopt(M_MMAP_THRESHOLD=32 MiB, M_TRIM_THRESHOLD=1 GiB) in both processes, so that "
            "glibc stops returning the receive buffers ZeroMQ allocates per message to the kernel "
            "(with the default, large messages page-fault on every receive)");
DEFINE_bool(verify, true,
            "receiver checks sample bytes of every message, with --pingpong the sender those "
            "of every echo too (sizes are always checked)");
DEFINE_bool(pingpong, false,
            "measure round trips instead of throughput: each message is echoed back by the "
            "receiver before the next is sent; --messages round trips per run");

namespace {

constexpr uint32_t kMagic = 0x46525a53;  // "FRZS"
constexpr uint32_t kPhase = 1;
constexpr uint32_t kQuit = 2;
constexpr uint32_t kPingPong = 3;

struct Control {
  uint32_t magic;
  uint32_t kind;
  uint64_t message_bytes;
  uint64_t count;
};

struct Ack {
  uint32_t magic;
  uint32_t status;  // 0 = ok
  uint64_t count;
  uint64_t bytes;
  int64_t recv_ns;  // receiver side, from the first to the last data message of the phase
};

using Clock = std::chrono::steady_clock;

int64_t NsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

void NoopFree(void* /*data*/, void* /*hint*/) {}

uint8_t PatternByte(uint64_t i) { return static_cast<uint8_t>((i * 131u + 7u) & 0xffu); }

bool Fail(const char* what) {
  std::fprintf(stderr, "ferry-zmq-stream: %s: %s\n", what, zmq_strerror(zmq_errno()));
  return false;
}

bool FailMsg(const std::string& what) {
  std::fprintf(stderr, "ferry-zmq-stream: %s\n", what.c_str());
  return false;
}

bool SetIntOpt(void* sock, int opt, int value, const char* name) {
  if (zmq_setsockopt(sock, opt, &value, sizeof(value)) != 0) return Fail(name);
  return true;
}

bool ParseSize(const std::string& text, uint64_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str()) return false;
  std::string suffix(end);
  uint64_t mult = 1;
  if (suffix.empty() || suffix == "B" || suffix == "b") {
    mult = 1;
  } else if (suffix == "K" || suffix == "k" || suffix == "KiB") {
    mult = 1ull << 10;
  } else if (suffix == "M" || suffix == "m" || suffix == "MiB") {
    mult = 1ull << 20;
  } else if (suffix == "G" || suffix == "g" || suffix == "GiB") {
    mult = 1ull << 30;
  } else {
    return false;
  }
  *out = static_cast<uint64_t>(v) * mult;
  return true;
}

bool ParseSizes(std::vector<uint64_t>* sizes) {
  sizes->clear();
  if (FLAGS_sizes.empty()) {
    if (FLAGS_message_bytes <= 0) return FailMsg("--message_bytes must be > 0");
    sizes->push_back(static_cast<uint64_t>(FLAGS_message_bytes));
    return true;
  }
  std::string s = FLAGS_sizes;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    std::string item = s.substr(pos, comma - pos);
    uint64_t v = 0;
    if (!ParseSize(item, &v) || v == 0) return FailMsg("bad entry in --sizes: '" + item + "'");
    sizes->push_back(v);
    pos = comma + 1;
  }
  return true;
}

std::string DefaultEndpoint() {
  if (!FLAGS_endpoint.empty()) return FLAGS_endpoint;
  if (FLAGS_port == 0) return "tcp://127.0.0.1:*";
  return "tcp://127.0.0.1:" + std::to_string(FLAGS_port);
}

// Owns a context and one socket; closes both (with a bounded linger) on destruction.
class Endpoint {
 public:
  Endpoint() = default;
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;
  ~Endpoint() {
    if (sock_ != nullptr) zmq_close(sock_);
    if (ctx_ != nullptr) zmq_ctx_term(ctx_);
  }

  bool Open(int type) {
    ctx_ = zmq_ctx_new();
    if (ctx_ == nullptr) return Fail("zmq_ctx_new");
    if (zmq_ctx_set(ctx_, ZMQ_IO_THREADS, std::max(1, FLAGS_io_threads)) != 0) {
      return Fail("zmq_ctx_set(ZMQ_IO_THREADS)");
    }
    sock_ = zmq_socket(ctx_, type);
    if (sock_ == nullptr) return Fail("zmq_socket");
    return SetIntOpt(sock_, ZMQ_RCVTIMEO, FLAGS_timeout_ms, "ZMQ_RCVTIMEO") &&
           SetIntOpt(sock_, ZMQ_SNDTIMEO, FLAGS_timeout_ms, "ZMQ_SNDTIMEO") &&
           SetIntOpt(sock_, ZMQ_LINGER, 1000, "ZMQ_LINGER");
  }

  void* sock() const { return sock_; }

 private:
  void* ctx_ = nullptr;
  void* sock_ = nullptr;
};

// RAII zmq_msg_t.
class Msg {
 public:
  Msg() { zmq_msg_init(&m_); }
  ~Msg() { zmq_msg_close(&m_); }
  Msg(const Msg&) = delete;
  Msg& operator=(const Msg&) = delete;
  zmq_msg_t* get() { return &m_; }
  size_t size() { return zmq_msg_size(&m_); }
  const uint8_t* data() { return static_cast<const uint8_t*>(zmq_msg_data(&m_)); }
  bool more() { return zmq_msg_more(&m_) != 0; }

 private:
  zmq_msg_t m_;
};

// Receives one frame; a timeout is an error.
bool RecvFrame(void* sock, Msg* msg, const char* what) {
  if (zmq_msg_recv(msg->get(), sock, 0) < 0) {
    if (zmq_errno() == EAGAIN) {
      return FailMsg(std::string("timed out after ") + std::to_string(FLAGS_timeout_ms) +
                     " ms waiting for " + what);
    }
    return Fail(what);
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Receiver (ROUTER, binds).

// Receives [identity][payload] from the ROUTER; keeps the identity of the first frame seen.
bool RecvFromPeer(void* sock, Msg* identity, Msg* payload, const char* what) {
  Msg id;
  if (!RecvFrame(sock, &id, what)) return false;
  if (!id.more()) return FailMsg(std::string("protocol error: identity frame without payload (") + what + ")");
  if (!RecvFrame(sock, payload, what)) return false;
  if (payload->more()) return FailMsg(std::string("protocol error: unexpected multipart message (") + what + ")");
  if (identity != nullptr) zmq_msg_copy(identity->get(), id.get());
  return true;
}

bool SendAck(void* sock, Msg* identity, const Ack& ack) {
  Msg id;
  zmq_msg_copy(id.get(), identity->get());
  if (zmq_msg_send(id.get(), sock, ZMQ_SNDMORE) < 0) return Fail("send ack identity");
  if (zmq_send(sock, &ack, sizeof(ack), 0) < 0) return Fail("send ack");
  return true;
}

// Checks message i of a phase (a data message at the receiver, an echo at the sender): its size,
// and with --verify three sample bytes. Returns 0 if it is good, else the Ack status for it
// (1 = wrong size, 2 = corrupt contents), having said what is wrong.
uint32_t CheckPayload(const char* what, uint64_t i, uint64_t size, Msg* payload) {
  if (payload->size() != size) {
    FailMsg(std::string(what) + " " + std::to_string(i) + " has " +
            std::to_string(payload->size()) + " bytes, expected " + std::to_string(size));
    return 1;
  }
  if (FLAGS_verify && size > 0) {
    const uint8_t* d = payload->data();
    const uint64_t mid = size / 2;
    if (d[0] != PatternByte(0) || d[mid] != PatternByte(mid) ||
        d[size - 1] != PatternByte(size - 1)) {
      FailMsg(std::string(what) + " " + std::to_string(i) + " has corrupt contents");
      return 2;
    }
  }
  return 0;
}

// Receives the `count` data messages of a stream phase into *ack (count, bytes, first-to-last
// time; the status of the first bad message, after which it stops). False on a socket error.
bool ReceiveStream(void* sock, const Control& ctl, Ack* ack) {
  Clock::time_point first;
  const uint64_t size = ctl.message_bytes;
  for (uint64_t i = 0; i < ctl.count; ++i) {
    Msg payload;
    if (!RecvFromPeer(sock, nullptr, &payload, "a data message")) return false;
    if (i == 0) first = Clock::now();
    ack->status = CheckPayload("message", i, size, &payload);
    if (ack->status != 0) break;
    ack->count += 1;
    ack->bytes += payload.size();
  }
  if (ctl.count > 0) ack->recv_ns = NsSince(first);
  return true;
}

// Echoes each of the `count` data messages of a ping-pong phase back to its sender as it arrives:
// the received message itself is sent, so the reply has the same size and bytes, without a copy.
// A bad message is not echoed: the phase stops and the Ack (with its status) goes out instead.
bool EchoPingPong(void* sock, const Control& ctl, Ack* ack) {
  for (uint64_t i = 0; i < ctl.count; ++i) {
    Msg identity;
    Msg payload;
    if (!RecvFromPeer(sock, &identity, &payload, "a ping-pong message")) return false;
    ack->status = CheckPayload("message", i, ctl.message_bytes, &payload);
    if (ack->status != 0) break;
    const uint64_t bytes = payload.size();
    if (zmq_msg_send(identity.get(), sock, ZMQ_SNDMORE) < 0) return Fail("send echo identity");
    if (zmq_msg_send(payload.get(), sock, 0) < 0) return Fail("send echo");
    ack->count += 1;
    ack->bytes += bytes;
  }
  return true;
}

// ready_fd >= 0: write the bound endpoint (or an empty line on failure) there, then close it.
int RunReceiver(int ready_fd) {
  auto report = [&ready_fd](const std::string& line) {
    if (ready_fd < 0) return;
    std::string s = line + "\n";
    ssize_t n = write(ready_fd, s.data(), s.size());
    (void)n;
    close(ready_fd);
    ready_fd = -1;
  };

  Endpoint ep;
  if (!ep.Open(ZMQ_ROUTER) || !SetIntOpt(ep.sock(), ZMQ_ROUTER_MANDATORY, 1, "ZMQ_ROUTER_MANDATORY")) {
    report("");
    return 1;
  }
  void* sock = ep.sock();
  const std::string endpoint = DefaultEndpoint();
  if (zmq_bind(sock, endpoint.c_str()) != 0) {
    Fail(("bind " + endpoint).c_str());
    report("");
    return 1;
  }
  char bound[256] = {0};
  size_t bound_len = sizeof(bound) - 1;
  if (zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, bound, &bound_len) != 0) {
    Fail("ZMQ_LAST_ENDPOINT");
    report("");
    return 1;
  }
  report(bound);
  if (FLAGS_role == "recv") std::fprintf(stderr, "ferry-zmq-stream: receiver bound to %s\n", bound);

  for (;;) {
    Msg identity;
    Msg ctl_msg;
    if (!RecvFromPeer(sock, &identity, &ctl_msg, "a control message")) return 1;
    Control ctl;
    if (ctl_msg.size() != sizeof(ctl)) {
      FailMsg("protocol error: control message of " + std::to_string(ctl_msg.size()) + " bytes");
      return 1;
    }
    std::memcpy(&ctl, ctl_msg.data(), sizeof(ctl));
    if (ctl.magic != kMagic) {
      FailMsg("protocol error: bad magic in control message");
      return 1;
    }
    Ack ack{kMagic, 0, 0, 0, 0};
    if (ctl.kind == kQuit) {
      if (!SendAck(sock, &identity, ack)) return 1;
      return 0;
    }
    bool ok = false;
    if (ctl.kind == kPhase) {
      ok = ReceiveStream(sock, ctl, &ack);
    } else if (ctl.kind == kPingPong) {
      ok = EchoPingPong(sock, ctl, &ack);
    } else {
      FailMsg("protocol error: unknown control kind " + std::to_string(ctl.kind));
      return 1;
    }
    if (!ok) return 1;
    if (!SendAck(sock, &identity, ack)) return 1;
    if (ack.status != 0) return 1;
  }
}

// ---------------------------------------------------------------------------------------------
// Sender (DEALER, connects).

bool SendControl(void* sock, uint32_t kind, uint64_t message_bytes, uint64_t count) {
  Control ctl{kMagic, kind, message_bytes, count};
  if (zmq_send(sock, &ctl, sizeof(ctl), 0) < 0) return Fail("send control message");
  return true;
}

bool WaitAck(void* sock, uint64_t expect_count, uint64_t expect_bytes, Ack* out) {
  Msg msg;
  if (!RecvFrame(sock, &msg, "the receiver's acknowledgement")) return false;
  if (msg.size() != sizeof(Ack)) return FailMsg("protocol error: acknowledgement of wrong size");
  std::memcpy(out, msg.data(), sizeof(Ack));
  if (out->magic != kMagic) return FailMsg("protocol error: bad magic in acknowledgement");
  if (out->status != 0) return FailMsg("receiver reported error status " + std::to_string(out->status));
  if (out->count != expect_count || out->bytes != expect_bytes) {
    return FailMsg("receiver got " + std::to_string(out->count) + " messages / " +
                   std::to_string(out->bytes) + " bytes, expected " + std::to_string(expect_count) +
                   " / " + std::to_string(expect_bytes));
  }
  return true;
}

bool SendData(void* sock, const uint8_t* buf, uint64_t size, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) {
    zmq_msg_t m;
    // Zero copy: the message references the preallocated buffer, which is never modified.
    if (zmq_msg_init_data(&m, const_cast<uint8_t*>(buf), size, NoopFree, nullptr) != 0) {
      return Fail("zmq_msg_init_data");
    }
    if (zmq_msg_send(&m, sock, 0) < 0) {
      const int err = zmq_errno();
      zmq_msg_close(&m);
      if (err == EAGAIN) {
        return FailMsg("timed out after " + std::to_string(FLAGS_timeout_ms) +
                       " ms sending a data message");
      }
      errno = err;
      return Fail("send data message");
    }
  }
  return true;
}

// Runs one phase (control + count messages + ack); returns the sender-side seconds.
bool RunPhase(void* sock, const uint8_t* buf, uint64_t size, uint64_t count, double* seconds, Ack* ack) {
  if (!SendControl(sock, kPhase, size, count)) return false;
  const Clock::time_point t0 = Clock::now();
  if (!SendData(sock, buf, size, count)) return false;
  if (!WaitAck(sock, count, size * count, ack)) return false;
  *seconds = static_cast<double>(NsSince(t0)) * 1e-9;
  return true;
}

// The stream mode: per size, --warmup untimed messages, then --repeat timed phases, one row each.
bool StreamSizes(void* sock, const uint8_t* buf, const std::string& endpoint,
                 const std::vector<uint64_t>& sizes) {
  const bool csv = FLAGS_format == "csv";
  Ack ack;
  double seconds = 0;
  if (csv) {
    std::printf("message_bytes,messages,seconds,GBps\n");
  } else {
    std::printf("# ferry-zmq-stream: %s, DEALER->ROUTER over %s, zero-copy sends, GB/s = 1e9 B/s\n",
                FLAGS_role.c_str(), endpoint.c_str());
    std::printf("%14s %10s %12s %10s %14s %14s\n", "message_bytes", "messages", "seconds", "GB/s",
                "messages/s", "recv_GB/s");
  }
  std::fflush(stdout);

  for (uint64_t size : sizes) {
    uint64_t count = static_cast<uint64_t>(std::max<int64_t>(1, FLAGS_messages));
    if (FLAGS_min_total_bytes > 0) {
      const uint64_t need = (static_cast<uint64_t>(FLAGS_min_total_bytes) + size - 1) / size;
      count = std::max(count, need);
    }
    if (FLAGS_warmup > 0) {
      if (!RunPhase(sock, buf, size, static_cast<uint64_t>(FLAGS_warmup), &seconds, &ack))
        return false;
    }
    for (int r = 0; r < std::max(1, FLAGS_repeat); ++r) {
      if (!RunPhase(sock, buf, size, count, &seconds, &ack)) return false;
      const double bytes = static_cast<double>(size) * static_cast<double>(count);
      const double gbps = bytes / seconds / 1e9;
      if (csv) {
        std::printf("%llu,%llu,%.6f,%.4f\n", static_cast<unsigned long long>(size),
                    static_cast<unsigned long long>(count), seconds, gbps);
      } else {
        // The receiver's own rate covers messages 2..N (first to last arrival).
        const double recv_s = static_cast<double>(ack.recv_ns) * 1e-9;
        const double recv_gbps =
            (count > 1 && recv_s > 0) ? static_cast<double>(size) * static_cast<double>(count - 1) / recv_s / 1e9 : 0.0;
        std::printf("%14llu %10llu %12.6f %10.3f %14.1f %14.3f\n", static_cast<unsigned long long>(size),
                    static_cast<unsigned long long>(count), seconds, gbps,
                    static_cast<double>(count) / seconds, recv_gbps);
      }
      std::fflush(stdout);
    }
  }
  return true;
}

// Runs one ping-pong phase: `count` round trips of one `size`-byte message, each sent only after
// the echo of the previous one arrived. Appends each round trip's nanoseconds to *rtt_ns.
bool RunPingPong(void* sock, const uint8_t* buf, uint64_t size, uint64_t count,
                 std::vector<int64_t>* rtt_ns) {
  if (!SendControl(sock, kPingPong, size, count)) return false;
  for (uint64_t i = 0; i < count; ++i) {
    const Clock::time_point t0 = Clock::now();
    if (!SendData(sock, buf, size, 1)) return false;
    Msg echo;
    if (!RecvFrame(sock, &echo, "the receiver's echo")) return false;
    const int64_t ns = NsSince(t0);
    // Checked after the clock stops: the check is not part of the round trip.
    if (CheckPayload("echo", i, size, &echo) != 0) return false;
    rtt_ns->push_back(ns);
  }
  Ack ack;
  return WaitAck(sock, count, size * count, &ack);
}

// The q-quantile (0 < q <= 1) of sorted values in microseconds, by nearest rank: the smallest
// value with at least a fraction q of all values at or below it.
double QuantileUs(const std::vector<int64_t>& sorted_ns, double q) {
  const size_t n = sorted_ns.size();
  const size_t rank =
      std::min(n, std::max<size_t>(1, static_cast<size_t>(std::ceil(q * static_cast<double>(n)))));
  return static_cast<double>(sorted_ns[rank - 1]) * 1e-3;
}

// The ping-pong mode: per size, --warmup untimed round trips, then --repeat timed runs of
// --messages round trips, one row of percentiles each.
bool PingPongSizes(void* sock, const uint8_t* buf, const std::string& endpoint,
                   const std::vector<uint64_t>& sizes) {
  const bool csv = FLAGS_format == "csv";
  if (csv) {
    std::printf("message_bytes,round_trips,p50_us,p99_us,min_us,max_us\n");
  } else {
    std::printf(
        "# ferry-zmq-stream --pingpong: %s, DEALER->ROUTER and back over %s, zero-copy sends, "
        "round trips in microseconds\n",
        FLAGS_role.c_str(), endpoint.c_str());
    std::printf("%14s %12s %10s %10s %10s %10s %10s\n", "message_bytes", "round_trips", "p50_us",
                "p99_us", "min_us", "max_us", "mean_us");
  }
  std::fflush(stdout);

  const uint64_t count = static_cast<uint64_t>(std::max<int64_t>(1, FLAGS_messages));
  std::vector<int64_t> rtt_ns;
  rtt_ns.reserve(
      std::max<uint64_t>(count, static_cast<uint64_t>(std::max<int64_t>(0, FLAGS_warmup))));
  for (uint64_t size : sizes) {
    if (FLAGS_warmup > 0) {
      rtt_ns.clear();
      if (!RunPingPong(sock, buf, size, static_cast<uint64_t>(FLAGS_warmup), &rtt_ns)) return false;
    }
    for (int r = 0; r < std::max(1, FLAGS_repeat); ++r) {
      rtt_ns.clear();
      if (!RunPingPong(sock, buf, size, count, &rtt_ns)) return false;
      std::sort(rtt_ns.begin(), rtt_ns.end());
      double sum_ns = 0;
      for (int64_t ns : rtt_ns) sum_ns += static_cast<double>(ns);
      const double p50 = QuantileUs(rtt_ns, 0.50), p99 = QuantileUs(rtt_ns, 0.99);
      const double lo = static_cast<double>(rtt_ns.front()) * 1e-3,
                   hi = static_cast<double>(rtt_ns.back()) * 1e-3;
      if (csv) {
        std::printf("%llu,%llu,%.2f,%.2f,%.2f,%.2f\n", static_cast<unsigned long long>(size),
                    static_cast<unsigned long long>(count), p50, p99, lo, hi);
      } else {
        std::printf("%14llu %12llu %10.2f %10.2f %10.2f %10.2f %10.2f\n",
                    static_cast<unsigned long long>(size), static_cast<unsigned long long>(count),
                    p50, p99, lo, hi, sum_ns * 1e-3 / static_cast<double>(count));
      }
      std::fflush(stdout);
    }
  }
  return true;
}

int RunSender(const std::string& endpoint, const std::vector<uint64_t>& sizes) {
  const uint64_t max_size = *std::max_element(sizes.begin(), sizes.end());
  // One buffer of the largest size, page-aligned and filled once; every message references it.
  std::unique_ptr<uint8_t, decltype(&std::free)> buf(
      static_cast<uint8_t*>(std::aligned_alloc(4096, (max_size + 4095) / 4096 * 4096)), &std::free);
  if (!buf) {
    FailMsg("cannot allocate " + std::to_string(max_size) + " bytes");
    return 1;
  }
  for (uint64_t i = 0; i < max_size; ++i) buf.get()[i] = PatternByte(i);
  // A message of `size` bytes is a prefix of the buffer, so its sample bytes match too.

  Endpoint ep;
  if (!ep.Open(ZMQ_DEALER)) return 1;
  void* sock = ep.sock();
  if (zmq_connect(sock, endpoint.c_str()) != 0) {
    Fail(("connect " + endpoint).c_str());
    return 1;
  }

  Ack ack;
  double seconds = 0;
  // Ping: the connection is established before anything is timed.
  if (!RunPhase(sock, buf.get(), 0, 0, &seconds, &ack)) return 1;

  const bool ok = FLAGS_pingpong ? PingPongSizes(sock, buf.get(), endpoint, sizes)
                                 : StreamSizes(sock, buf.get(), endpoint, sizes);
  if (!ok) return 1;

  if (!SendControl(sock, kQuit, 0, 0)) return 1;
  if (!WaitAck(sock, 0, 0, &ack)) return 1;
  return 0;
}

// ---------------------------------------------------------------------------------------------
// --role=both: fork the receiver, learn its endpoint through a pipe, run the sender, reap it.

// Reads one line from fd within timeout_ms; false on timeout, EOF before newline, or error.
bool ReadLine(int fd, int timeout_ms, std::string* line) {
  line->clear();
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const int64_t left_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left_ms <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    const int rc = poll(&pfd, 1, static_cast<int>(left_ms));
    if (rc < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (rc == 0) return false;
    char c;
    const ssize_t n = read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (c == '\n') return true;
    line->push_back(c);
  }
}

// Waits for the child to exit within timeout_ms; kills it after that. Returns its exit code.
int ReapChild(pid_t pid, int timeout_ms) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      std::perror("ferry-zmq-stream: waitpid");
      return 1;
    }
    if (Clock::now() >= deadline) {
      std::fprintf(stderr, "ferry-zmq-stream: receiver did not exit in time; killing it\n");
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return 1;
    }
    usleep(10 * 1000);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  std::fprintf(stderr, "ferry-zmq-stream: receiver died (signal %d)\n",
               WIFSIGNALED(status) ? WTERMSIG(status) : -1);
  return 1;
}

int RunBoth(const std::vector<uint64_t>& sizes) {
  int fds[2];
  if (pipe(fds) != 0) {
    std::perror("ferry-zmq-stream: pipe");
    return 1;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("ferry-zmq-stream: fork");
    return 1;
  }
  if (pid == 0) {
    // Child: the receiver. It dies with the parent, and never touches the parent's ZeroMQ state
    // (the context is created after the fork on both sides).
    close(fds[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    const int rc = RunReceiver(fds[1]);
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(rc);
  }
  close(fds[1]);
  std::string endpoint;
  const bool ok = ReadLine(fds[0], FLAGS_timeout_ms, &endpoint) && !endpoint.empty();
  close(fds[0]);
  if (!ok) {
    std::fprintf(stderr, "ferry-zmq-stream: receiver failed to start\n");
    kill(pid, SIGKILL);
    ReapChild(pid, FLAGS_timeout_ms);
    return 1;
  }
  const int send_rc = RunSender(endpoint, sizes);
  if (send_rc != 0) kill(pid, SIGKILL);
  const int recv_rc = ReapChild(pid, FLAGS_timeout_ms);
  if (send_rc != 0) return send_rc;
  if (recv_rc != 0) {
    std::fprintf(stderr, "ferry-zmq-stream: receiver exited with %d\n", recv_rc);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "raw ZeroMQ stream throughput (the reference for Ferry's throughput), or with --pingpong\n"
      "raw ZeroMQ round trips (the reference for Ferry's small push_pull latency).\n"
      "  ferry-zmq-stream [--role=both] [--sizes=4K,64K,1M,4M,16M] [--messages=500] "
      "[--format=csv]\n"
      "  ferry-zmq-stream --pingpong --message_bytes=4096 --messages=10000 [--format=csv]");
  ferry::ParseProgramFlags(&argc, &argv, __FILE__);
  if (argc > 1) {
    std::fprintf(stderr, "ferry-zmq-stream: unexpected argument '%s'\n", argv[1]);
    return 2;
  }
  if (FLAGS_format != "text" && FLAGS_format != "csv") {
    std::fprintf(stderr, "ferry-zmq-stream: --format must be text or csv\n");
    return 2;
  }
  if (FLAGS_timeout_ms <= 0) {
    std::fprintf(stderr, "ferry-zmq-stream: --timeout_ms must be > 0\n");
    return 2;
  }
  if (FLAGS_pingpong && FLAGS_min_total_bytes > 0) {
    std::fprintf(stderr,
                 "ferry-zmq-stream: --min_total_bytes is for the stream mode, not --pingpong\n");
    return 2;
  }
  std::vector<uint64_t> sizes;
  if (!ParseSizes(&sizes)) return 2;
  signal(SIGPIPE, SIG_IGN);
  if (FLAGS_tune_malloc) {
    // Before the fork, so the receiver child inherits it.
    if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, 1 << 30) != 1) {
      std::fprintf(stderr, "ferry-zmq-stream: mallopt failed\n");
      return 1;
    }
  }

  if (FLAGS_role == "both") return RunBoth(sizes);
  if (FLAGS_role == "recv") {
    if (FLAGS_endpoint.empty() && FLAGS_port == 0) {
      std::fprintf(stderr, "ferry-zmq-stream: --role=recv needs --port or --endpoint\n");
      return 2;
    }
    return RunReceiver(-1);
  }
  if (FLAGS_role == "send") {
    if (FLAGS_endpoint.empty() && FLAGS_port == 0) {
      std::fprintf(stderr, "ferry-zmq-stream: --role=send needs --port or --endpoint\n");
      return 2;
    }
    return RunSender(DefaultEndpoint(), sizes);
  }
  std::fprintf(stderr, "ferry-zmq-stream: --role must be send, recv or both\n");
  return 2;
}
