// ferry-flow-order: what a point-to-point send meets on a link that a gradient fills, through
// Ferry's own transport (common/transport/van.h, "Links").
//
// Two processes on two hosts (network namespaces: scripts/netns-cluster). The receiver binds
// two Vans on its host, one standing for a server (it takes gradient frames, PUSH) and one for
// a worker (it takes point-to-point sends, P2P_SEND), and counts, in one process and so in
// one order, the gradient frames that arrived before each send arrived. The sender connects
// to both with a worker's Van, measures each send's round trip alone (idle), then queues a
// gradient of --gradient_bytes as frames of --frame_bytes and, once --after_frames of them
// left the Van, makes --sends sends of --send_bytes, one after another, each timed from the
// call to the receiver's answer.
//
// What it shows (order, not time): with link scheduling, a send overtakes every gradient frame
// still in the sender's Van: the frames that arrive before it are at most those the kernel
// already held (released before the send, plus the kernel's share), and the rest arrive after
// it. Without (--link_scheduling=0, fifo's behaviour), TCP shares the link between the two
// connections, and about as many gradient bytes as the send's own arrive during it.
//
// Output: one JSON line per role. Sender: {"released_before": [frames released when each
// send was made], "idle_ms": [...], "loaded_ms": [...], "link_flows", "link_held",
// "gradient_s"}. Receiver: {"frames": total, "frames_before": [per send]}. Every wait has
// a deadline (--timeout_ms); exit 1 on any failure.

#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/transport/van.h"
#include "common/util/clock.h"
#include "common/util/strings.h"

DEFINE_string(role, "", "send | recv");
DEFINE_string(host, "127.0.0.1", "recv: the address to bind");
DEFINE_string(server, "", "send: the receiver's gradient endpoint, host:port");
DEFINE_string(peer, "", "send: the receiver's point-to-point endpoint, host:port");
DEFINE_int64(gradient_bytes, 256ll << 20, "send: the gradient's bytes");
DEFINE_int64(frame_bytes, 262144, "send: bytes per gradient frame");
DEFINE_int64(send_bytes, 8 << 20, "send: bytes per point-to-point send");
DEFINE_int32(sends, 1, "send: point-to-point sends during the gradient, one after another");
DEFINE_int32(idle_sends, 3, "send: point-to-point sends timed alone first");
DEFINE_int64(after_frames, 64, "send: gradient frames released before the first send");
DEFINE_int32(gap_ms, 0, "send: pause between two loaded sends");
DEFINE_bool(link_scheduling, true, "send: point-to-point sends hold back the gradient (van.h)");
DEFINE_int64(watermark_bytes, 524288, "send: FERRY_TRANSPORT_WATERMARK_BYTES");
DEFINE_int32(notsent_lowat, 131072, "send: FERRY_TCP_NOTSENT_LOWAT");
DEFINE_int32(timeout_ms, 120000, "every wait's deadline");

namespace ferry {
namespace {

constexpr int kServer = 1, kPeer = 2;  // the sender's peer ids

[[noreturn]] void Fail(const std::string& why) {
  std::fprintf(stderr, "ferry-flow-order: %s\n", why.c_str());
  std::exit(1);
}

Message Ack(uint64_t request) {
  Message m = MakeMessage(proto::P2P_ACK, 0);
  m.envelope.set_request_id(request);
  return m;
}

int Receive() {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t frames = 0, total = 0;
  std::vector<uint64_t> before;
  bool quit = false;
  Van server(VanOptions::Named("flow-server", 1ull << 30));
  Van peer(VanOptions::Named("flow-peer", 1ull << 30));
  const int server_port = server.Bind(FLAGS_host, 0), peer_port = peer.Bind(FLAGS_host, 0);
  server.Start([&](Message&& m, const Origin& o) {
    std::lock_guard<std::mutex> lock(mu);
    if (m.envelope.key_length() > 0) total = m.envelope.key_length() / m.envelope.length();
    if (m.envelope.round() == 1) frames++;  // round 0: the warm-up
    if (m.envelope.round() == 0 || frames == total) server.Reply(o.identity, Ack(m.envelope.request_id()));
  });
  peer.Start([&](Message&& m, const Origin& o) {
    std::lock_guard<std::mutex> lock(mu);
    if (m.envelope.tag() == 1) before.push_back(frames);  // tag 0: idle sends
    if (m.envelope.tag() == 2) {
      quit = true;
      cv.notify_all();
    }
    peer.Reply(o.identity, Ack(m.envelope.request_id()));
  });
  std::printf("%d %d\n", server_port, peer_port);
  std::fflush(stdout);
  std::unique_lock<std::mutex> lock(mu);
  if (!cv.wait_for(lock, std::chrono::milliseconds(FLAGS_timeout_ms), [&] { return quit; })) {
    Fail("the sender never said it was done");
  }
  std::string list;
  for (uint64_t b : before) list += StrCat(list.empty() ? "" : ", ", b);
  std::printf("{\"frames\": %lu, \"frames_before\": [%s]}\n", static_cast<unsigned long>(frames),
              list.c_str());
  lock.unlock();
  server.Stop();
  peer.Stop();
  return 0;
}

class Sender {
 public:
  Sender() : van_(Options()) {}

  int Run() {
    van_.Connect(kServer, "tcp://" + FLAGS_server, "flow-sender", true);
    van_.Connect(kPeer, "tcp://" + FLAGS_peer, "flow-sender", true);
    van_.Start([this](Message&& m, const Origin&) {
      std::lock_guard<std::mutex> lock(mu_);
      acked_.push_back(m.envelope.request_id());
      cv_.notify_all();
    });
    std::vector<char> gradient(static_cast<size_t>(FLAGS_gradient_bytes), 1);
    std::vector<char> payload(static_cast<size_t>(FLAGS_send_bytes), 2);
    gradient_ = {gradient.data(), gradient.data() + gradient.size()};
    Await(SendFrame(gradient.data(), 0, 0), "the warm-up push");
    std::vector<double> idle, loaded;
    for (int i = 0; i < FLAGS_idle_sends; ++i) idle.push_back(TimedSend(payload, 0));
    const int64_t start = NowUs();
    const int64_t frames = FLAGS_gradient_bytes / FLAGS_frame_bytes;
    uint64_t last = 0;
    for (int64_t f = 0; f < frames; ++f) last = SendFrame(gradient.data(), f, 1);
    std::vector<uint64_t> released_before;
    WaitFor([&] { return released_.load() >= static_cast<uint64_t>(FLAGS_after_frames); },
            "the first gradient frames to leave the Van");
    for (int i = 0; i < FLAGS_sends; ++i) {
      released_before.push_back(released_.load());
      loaded.push_back(TimedSend(payload, 1));
      if (FLAGS_gap_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(FLAGS_gap_ms));
    }
    Await(last, "the receiver's answer to the gradient's last frame");
    const double seconds = (NowUs() - start) / 1e6;
    Await(Send(kPeer, payload.data(), 0, 2), "the receiver's last answer");
    const VanStats s = van_.stats();
    std::printf("{\"released_before\": [%s], \"idle_ms\": [%s], \"loaded_ms\": [%s], "
                "\"link_flows\": %lu, \"link_held\": %lu, \"gradient_s\": %.3f}\n",
                Join(released_before).c_str(), Join(idle).c_str(), Join(loaded).c_str(),
                static_cast<unsigned long>(s.link_flows), static_cast<unsigned long>(s.link_held),
                seconds);
    van_.Stop();
    return 0;
  }

 private:
  VanOptions Options() {
    VanOptions o = VanOptions::Named("flow-sender", 1ull << 30);
    o.control_lane = true;
    o.link_scheduling = FLAGS_link_scheduling;
    o.watermark_bytes = static_cast<uint64_t>(FLAGS_watermark_bytes);
    o.tcp_notsent_lowat = FLAGS_notsent_lowat;
    o.on_payload_released = [this](const void* data) {
      const char* p = static_cast<const char*>(data);
      if (p >= gradient_.first && p < gradient_.second) released_++;
    };
    return o;
  }

  template <typename T>
  static std::string Join(const std::vector<T>& values) {
    std::string out;
    for (const T& v : values) out += StrCat(out.empty() ? "" : ", ", v);
    return out;
  }

  // Frame `f` of the gradient (round 0: one warm-up frame). Returns its request id.
  uint64_t SendFrame(char* gradient, int64_t f, uint32_t round) {
    Message m = MakeMessage(proto::PUSH, 1);
    m.envelope.set_request_id(next_request_++);
    m.envelope.set_key(round);
    m.envelope.set_round(round);
    m.envelope.set_dtype(proto::FLOAT32);
    m.envelope.set_length(static_cast<uint64_t>(FLAGS_frame_bytes));
    if (round == 1) {
      SetFrame(&m.envelope, static_cast<uint64_t>(f * FLAGS_frame_bytes),
               static_cast<uint64_t>(FLAGS_gradient_bytes), static_cast<uint64_t>(FLAGS_frame_bytes));
    }
    m.payload = Buffer::Borrow(gradient + f * FLAGS_frame_bytes, static_cast<size_t>(FLAGS_frame_bytes), {});
    const uint64_t id = m.envelope.request_id();
    van_.Send(kServer, std::move(m));
    return id;
  }

  uint64_t Send(int peer, char* data, size_t bytes, int tag) {
    Message m = MakeMessage(proto::P2P_SEND, 1);
    m.envelope.set_request_id(next_request_++);
    m.envelope.set_tag(tag);
    m.envelope.set_dtype(proto::FLOAT32);
    m.envelope.set_length(bytes);
    if (bytes > 0) m.payload = Buffer::Borrow(data, bytes, {});
    const uint64_t id = m.envelope.request_id();
    van_.Send(peer, std::move(m));
    return id;
  }

  // Milliseconds from the call to the receiver's answer.
  double TimedSend(std::vector<char>& payload, int tag) {
    const int64_t start = NowUs();
    Await(Send(kPeer, payload.data(), payload.size(), tag), "a point-to-point send's answer");
    return (NowUs() - start) / 1000.0;
  }

  void Await(uint64_t request, const char* what) {
    WaitFor([&] { return std::find(acked_.begin(), acked_.end(), request) != acked_.end(); }, what);
  }

  template <typename Done>
  void WaitFor(Done done, const char* what) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(FLAGS_timeout_ms);
    while (!done()) {
      if (cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() +
                                                      std::chrono::milliseconds(1))) ==
              std::cv_status::timeout &&
          std::chrono::steady_clock::now() >= deadline) {
        Fail(StrCat("timed out after ", FLAGS_timeout_ms, " ms waiting for ", what, " from ",
                    FLAGS_server, " / ", FLAGS_peer));
      }
    }
  }

  std::pair<const char*, const char*> gradient_{nullptr, nullptr};
  std::atomic<uint64_t> released_{0};
  uint64_t next_request_ = 1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> acked_;
  Van van_;
};

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  gflags::SetUsageMessage("ferry-flow-order --role=recv|send ... (see the file's comment)");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_role == "recv") return ferry::Receive();
  if (FLAGS_role == "send") {
    if (FLAGS_server.empty() || FLAGS_peer.empty()) ferry::Fail("--server and --peer are needed");
    if (FLAGS_frame_bytes <= 0 || FLAGS_gradient_bytes % FLAGS_frame_bytes != 0) {
      ferry::Fail("--gradient_bytes must be a multiple of --frame_bytes");
    }
    ferry::Sender sender;
    return sender.Run();
  }
  ferry::Fail("--role must be send or recv");
}
