// FERRY_SECRET: only processes holding the cluster secret get in. A node with the
// wrong secret or none cannot register; a client that knows the servers' public key
// but not the secret is refused by the ZAP check; the real job's sums stay exact.

#include "common/transport/security.h"

#include <gtest/gtest.h>
#include <zmq.h>

#include <cstdint>
#include <cstring>

#include "common/transport/message.h"
#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

constexpr char kSecret[] = "correct horse battery staple 42";

// A client that knows the scheduler's public key but has its own key pair: it tries to
// register and waits (with a deadline) until its handshake ends. Returns the ZeroMQ event
// that ended it: ZMQ_EVENT_HANDSHAKE_FAILED_AUTH when the scheduler's ZAP check refused
// it, 0 at the deadline.
int KnowsPublicKeyOnly(int port) {
  CurveKeys keys = DeriveCurveKeys(kSecret);
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0) return -1;
  void* ctx = zmq_ctx_new();
  void* s = zmq_socket(ctx, ZMQ_DEALER);
  zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, keys.server_public.data(), 32);
  zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 40);
  zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 40);
  int linger = 0;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  zmq_socket_monitor(s, "inproc://knows-public-key-only",
                     ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                         ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                         ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL);
  void* monitor = zmq_socket(ctx, ZMQ_PAIR);
  zmq_setsockopt(monitor, ZMQ_LINGER, &linger, sizeof linger);
  zmq_connect(monitor, "inproc://knows-public-key-only");
  std::string ep = "tcp://127.0.0.1:" + std::to_string(port);
  zmq_connect(s, ep.c_str());
  Message m = MakeMessage(proto::REGISTER, -1);
  m.envelope.mutable_register_request()->set_role(proto::WORKER);
  std::string bytes = m.envelope.SerializeAsString();
  zmq_send(s, bytes.data(), bytes.size(), ZMQ_DONTWAIT);
  int event = 0;
  zmq_pollitem_t item = {monitor, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&item, 1, 20000L * TimeScale()) == 1) {
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    if (zmq_msg_recv(&frame, monitor, 0) >= 6) {
      uint16_t id;
      std::memcpy(&id, zmq_msg_data(&frame), sizeof id);
      event = id;
    }
    zmq_msg_close(&frame);
  }
  zmq_close(monitor);
  zmq_close(s);
  zmq_ctx_term(ctx);
  return event;
}

TEST(SecurityTest, OnlySecretHoldersJoinAndSumsStayExact) {
  const int workers = 2;
  ClusterSpec spec;
  spec.workers = workers;
  spec.worker_args = {"--mode=sums", "--tensors=8", "--max_bytes=4194304", "--rounds=5"};
  spec.env = {{"FERRY_SECRET", kSecret}};
  TestCluster g(spec);
  const int port = g.port();
  int sched = g.StartScheduler();
  g.StartServer();
  // The public-key-only client first: its refusal is the first the scheduler logs (it logs
  // the first 20, and the intruders below retry until their connect deadline).
  EXPECT_EQ(KnowsPublicKeyOnly(port), ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
      << "the scheduler did not refuse a client without the secret";
  // Intruders before the workers, so they would take worker slots if they could register.
  int intruder = g.Spawn(
      "intruder-wrong-secret", "ferry-test-worker", {"--mode=loop"}, "worker",
      {{"FERRY_SECRET", "not the secret at all, sorry"}, {"FERRY_CONNECT_TIMEOUT_MS", "1000"}});
  int plain = g.Spawn("intruder-no-secret", "ferry-test-worker", {"--mode=loop"}, "worker",
                      {{"FERRY_CONNECT_TIMEOUT_MS", "1000"}}, {"FERRY_SECRET"});
  std::vector<int> ws;
  for (int w = 0; w < workers; ++w) ws.push_back(g.StartWorker(w));
  for (int w : ws) {
    ChildResult r = g.Wait(w, 120000);
    ASSERT_TRUE(r.exited) << g.AllOutput();
    EXPECT_EQ(r.exit_code, 0) << g.AllOutput();
    EXPECT_NE(g.Output(w).find("OK rounds=5"), std::string::npos) << g.Output(w);
  }
  for (int bad : {intruder, plain}) {
    ChildResult r = g.Wait(bad, 20000);
    ASSERT_TRUE(r.exited);
    EXPECT_EQ(r.exit_code, 1) << g.Output(bad);
    EXPECT_NE(g.Output(bad).find("waiting for the node table"), std::string::npos) << g.Output(bad);
  }
  ChildResult s = g.Wait(sched, 20000);
  EXPECT_EQ(s.exit_code, 0) << g.Output(sched);
  std::string log = g.Output(sched);
  EXPECT_NE(log.find("does not hold the cluster secret"), std::string::npos) << log;
  EXPECT_NE(log.find("failed the handshake"), std::string::npos) << log;
  size_t registrations = 0;
  for (size_t at = log.find("registered WORKER"); at != std::string::npos;
       at = log.find("registered WORKER", at + 1)) {
    ++registrations;
  }
  EXPECT_EQ(registrations, 2u) << "only the two real workers may register\n" << log;
}

}  // namespace
}  // namespace ferry::testing
