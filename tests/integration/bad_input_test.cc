// Bad input against live nodes: garbage bytes on raw TCP, malformed ZeroMQ messages,
// wrong protocol versions, unknown types, pushes from strangers. Each must be logged
// and dropped while the cluster goes on summing exactly.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <string>
#include <thread>

#include "common/transport/message.h"
#include "tests/support/process_group.h"

namespace ferry::testing {
namespace {

void SendRawTcp(int port, const std::string& bytes) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    ssize_t n = write(fd, bytes.data(), bytes.size());
    (void)n;
  }
  close(fd);
}

// Sends multipart messages from a ZeroMQ DEALER, as a stranger would.
class Stranger {
 public:
  explicit Stranger(int port) {
    ctx_ = zmq_ctx_new();
    sock_ = zmq_socket(ctx_, ZMQ_DEALER);
    int linger = 500;
    zmq_setsockopt(sock_, ZMQ_LINGER, &linger, sizeof linger);
    std::string ep = "tcp://127.0.0.1:" + std::to_string(port);
    zmq_connect(sock_, ep.c_str());
  }
  ~Stranger() {
    zmq_close(sock_);
    zmq_ctx_term(ctx_);
  }
  void Send(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      zmq_send(sock_, frames[i].data(), frames[i].size(), i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    }
  }

 private:
  void* ctx_;
  void* sock_;
};

std::string Envelope(proto::MessageType type, uint32_t version, int sender) {
  Message m = MakeMessage(type, sender);
  m.envelope.set_version(version);
  return m.envelope.SerializeAsString();
}

void Attack(int port) {
  SendRawTcp(port, "GET / HTTP/1.1\r\nHost: ferry\r\n\r\n");
  SendRawTcp(port, std::string(100000, '\xff'));
  SendRawTcp(port, std::string("\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f", 10));  // bad ZMTP
  Stranger s(port);
  s.Send({"not a protobuf \xff\xff\xff"});
  s.Send({"a", "b", "c", "d", "e"});                          // too many frames
  s.Send({Envelope(proto::PUSH, 99, 1), "xxxx"});             // wrong protocol version
  s.Send({Envelope(static_cast<proto::MessageType>(77), 1, 1)});  // unknown type
  s.Send({Envelope(proto::BARRIER, 1, 1)});                   // body missing
  s.Send({Envelope(proto::HEARTBEAT, 1, 3)});                 // not a member (wrong connection)
  Message push = MakeMessage(proto::PUSH, 3);                 // claims to be a worker
  push.envelope.set_key(0);
  push.envelope.set_length(8);
  s.Send({push.envelope.SerializeAsString(), std::string(8, '\1')});
  push.envelope.set_length(1000);                             // length does not match the frame
  s.Send({push.envelope.SerializeAsString(), std::string(8, '\1')});
  push.envelope.set_length(7);                                // not whole float32 elements
  s.Send({push.envelope.SerializeAsString(), std::string(7, '\1')});
}

TEST(BadInputTest, GarbageIsDroppedAndTheClusterKeepsSummingExactly) {
  ProcessGroup g;
  int port = FreePort();
  int server_port = FreePort();
  const int workers = 2;
  int sched = g.Spawn("scheduler", {BinaryPath("ferry-scheduler")},
                      ClusterEnv("scheduler", workers, 1, port));
  auto server_env = ClusterEnv("server", workers, 1, port);
  server_env["DMLC_PORT"] = std::to_string(server_port);
  int server = g.Spawn("server", {BinaryPath("ferry-server")}, server_env);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Attack(port);
  Attack(server_port);
  {
    // A server of a kind the scheduler does not know is refused, not counted.
    Stranger s(port);
    Message reg = MakeMessage(proto::REGISTER, -1);
    reg.envelope.mutable_register_request()->set_role(proto::SERVER);
    reg.envelope.mutable_register_request()->set_host("127.0.0.1");
    reg.envelope.mutable_register_request()->set_port(1);
    reg.envelope.mutable_register_request()->set_kind("gpu");
    s.Send({reg.envelope.SerializeAsString()});
  }
  std::vector<int> ws;
  for (int w = 0; w < workers; ++w) {
    auto e = ClusterEnv("worker", workers, 1, port);
    e["DMLC_WORKER_ID"] = std::to_string(w);
    ws.push_back(g.Spawn("worker" + std::to_string(w),
                         {BinaryPath("ferry-test-worker"), "--mode=sums", "--tensors=10",
                          "--max_bytes=4194304", "--rounds=10"},
                         e));
  }
  Attack(server_port);  // while the workers run
  Attack(port);
  auto results = g.WaitAll(120000 * TimeScale());
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].exited) << g.AllOutput();
    ASSERT_EQ(results[i].exit_code, 0) << "process " << i << "\n" << g.AllOutput();
  }
  std::string server_log = g.Output(server), sched_log = g.Output(sched);
  EXPECT_NE(server_log.find("dropped a bad message"), std::string::npos) << server_log;
  EXPECT_NE(server_log.find("protocol version 99"), std::string::npos) << server_log;
  EXPECT_NE(server_log.find("not a worker of this job"), std::string::npos) << server_log;
  EXPECT_NE(sched_log.find("dropped a bad message"), std::string::npos) << sched_log;
  EXPECT_NE(sched_log.find("not a registered member"), std::string::npos) << sched_log;
  EXPECT_NE(sched_log.find("registers with kind 'gpu' (FERRY_NODE_KIND): expected colocated or cpu"),
            std::string::npos)
      << sched_log;
}

}  // namespace
}  // namespace ferry::testing
