// FERRY_SECRET: only processes holding the cluster secret get in. A node with the
// wrong secret or none cannot register; a client that knows the servers' public key
// but not the secret is refused by the ZAP check; the real job's sums stay exact.

#include <gtest/gtest.h>
#include <zmq.h>

#include <thread>

#include "common/transport/message.h"
#include "common/transport/security.h"
#include "tests/support/process_group.h"

namespace ferry::testing {
namespace {

constexpr char kSecret[] = "correct horse battery staple 42";

std::map<std::string, std::string> SecureEnv(const std::string& role, int workers, int port,
                                             const std::string& secret) {
  auto e = ClusterEnv(role, workers, 1, port);
  if (!secret.empty()) e["FERRY_SECRET"] = secret;
  return e;
}

// A client that knows the scheduler's public key but has its own key pair.
void KnowsPublicKeyOnly(int port) {
  CurveKeys keys = DeriveCurveKeys(kSecret);
  char pub[41], sec[41];
  ASSERT_EQ(zmq_curve_keypair(pub, sec), 0);
  void* ctx = zmq_ctx_new();
  void* s = zmq_socket(ctx, ZMQ_DEALER);
  zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, keys.server_public.data(), 32);
  zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 40);
  zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 40);
  int linger = 0;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  std::string ep = "tcp://127.0.0.1:" + std::to_string(port);
  zmq_connect(s, ep.c_str());
  Message m = MakeMessage(proto::REGISTER, -1);
  m.envelope.mutable_register_request()->set_role(proto::WORKER);
  std::string bytes = m.envelope.SerializeAsString();
  zmq_send(s, bytes.data(), bytes.size(), ZMQ_DONTWAIT);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  zmq_close(s);
  zmq_ctx_term(ctx);
}

TEST(SecurityTest, OnlySecretHoldersJoinAndSumsStayExact) {
  ProcessGroup g;
  int port = FreePort();
  const int workers = 2;
  int sched = g.Spawn("scheduler", {BinaryPath("ferry-scheduler")},
                      SecureEnv("scheduler", workers, port, kSecret));
  g.Spawn("server", {BinaryPath("ferry-server")}, SecureEnv("server", workers, port, kSecret));
  // Intruders first, so they would take worker slots if they could register.
  auto wrong = SecureEnv("worker", workers, port, "not the secret at all, sorry");
  wrong["FERRY_CONNECT_TIMEOUT_MS"] = "1000";
  int intruder = g.Spawn("intruder-wrong-secret",
                         {BinaryPath("ferry-test-worker"), "--mode=loop"}, wrong);
  auto none = SecureEnv("worker", workers, port, "");
  none["FERRY_CONNECT_TIMEOUT_MS"] = "1000";
  int plain = g.Spawn("intruder-no-secret", {BinaryPath("ferry-test-worker"), "--mode=loop"}, none);
  KnowsPublicKeyOnly(port);
  std::vector<int> ws;
  for (int w = 0; w < workers; ++w) {
    auto e = SecureEnv("worker", workers, port, kSecret);
    e["DMLC_WORKER_ID"] = std::to_string(w);
    ws.push_back(g.Spawn("worker" + std::to_string(w),
                         {BinaryPath("ferry-test-worker"), "--mode=sums", "--tensors=8",
                          "--max_bytes=4194304", "--rounds=5"},
                         e));
  }
  for (int w : ws) {
    ChildResult r = g.Wait(w, 120000 * TimeScale());
    ASSERT_TRUE(r.exited) << g.AllOutput();
    EXPECT_EQ(r.exit_code, 0) << g.AllOutput();
    EXPECT_NE(g.Output(w).find("OK rounds=5"), std::string::npos) << g.Output(w);
  }
  for (int bad : {intruder, plain}) {
    ChildResult r = g.Wait(bad, 20000 * TimeScale());
    ASSERT_TRUE(r.exited);
    EXPECT_EQ(r.exit_code, 1) << g.Output(bad);
    EXPECT_NE(g.Output(bad).find("waiting for the node table"), std::string::npos) << g.Output(bad);
  }
  ChildResult s = g.Wait(sched, 20000 * TimeScale());
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
