// The simulator's network models (sim/network.h) and fabric (sim/fabric.h) on cases whose
// times are known in closed form; the event queue (sim/event_queue.h) and its actions.

#include "sim/network.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "sim/fabric.h"

namespace ferry::sim {
namespace {

NetworkParams Params() {
  NetworkParams p;
  p.link_bytes_per_us = 100;  // 100 MB/s
  p.latency_us = 7;
  p.message_us = 3;
  p.header_bytes = 100;
  p.local_bytes_per_us = 1000;
  p.local_latency_us = 1;
  return p;
}

TEST(EventQueueTest, EventsRunInTimeOrderAndTiesInTheOrderScheduled) {
  EventQueue events;
  std::vector<int> order;
  // Enough events that the heap reorders them many times.
  for (int i = 0; i < 200; ++i) {
    events.At((i * 37) % 50, [&order, i] { order.push_back(i); });
  }
  events.At(0, [&] { events.After(0, [&order] { order.push_back(-1); }); });
  events.Run();
  ASSERT_EQ(order.size(), 201u);
  std::vector<int> expected;
  for (int t = 0; t < 50; ++t) {
    for (int i = 0; i < 200; ++i) {
      if ((i * 37) % 50 == t) expected.push_back(i);
    }
    if (t == 0) expected.push_back(-1);  // scheduled at 0 after the first 200
  }
  EXPECT_EQ(order, expected);
  EXPECT_EQ(events.now(), 49);
  EXPECT_EQ(events.events_run(), 202u);
}

TEST(ActionTest, HoldsSmallLargeAndMoveOnlyClosuresAndCanBeEmpty) {
  int calls = 0;
  Action small = [&calls] { calls += 1; };
  double big[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // 80 bytes: boxed
  Action large = [&calls, big] { calls += static_cast<int>(big[9]); };
  auto owned = std::make_unique<int>(100);
  Action move_only = [&calls, p = std::move(owned)] { calls += *p; };
  Action moved = std::move(large);
  EXPECT_FALSE(large);  // NOLINT: moved from, empty
  small();
  moved();
  move_only();
  EXPECT_EQ(calls, 111);
  EXPECT_FALSE(Action());
  EXPECT_FALSE(Action(nullptr));
  EXPECT_FALSE(Action(std::function<void()>()));
  EXPECT_TRUE(Action(std::function<void()>([] {})));
  Action empty;
  EXPECT_THROW(empty(), std::bad_function_call);
}

class NetworkTest : public testing::TestWithParam<NetworkModel> {};

TEST_P(NetworkTest, OneMessageTakesItsBytesOverTheRatePlusLatency) {
  EventQueue events;
  auto net = MakeNetwork(GetParam(), events, Params(), 2);
  SimTime sent = -1, delivered = -1;
  net->Send(net->Connect(0, 1), 9900, [&] { sent = events.now(); },
            [&] { delivered = events.now(); });
  events.Run();
  EXPECT_DOUBLE_EQ(sent, 100.0);             // (9900 + 100) / 100
  EXPECT_DOUBLE_EQ(delivered, 100.0 + 10);   // + latency + per-message cost
  EXPECT_DOUBLE_EQ(net->link_bytes().up[0], 10000);
  EXPECT_DOUBLE_EQ(net->link_bytes().down[1], 10000);
  EXPECT_DOUBLE_EQ(net->link_bytes().up[1], 0);
}

TEST_P(NetworkTest, AConnectionKeepsItsOrderAndMessagesFollowEachOther) {
  EventQueue events;
  auto net = MakeNetwork(GetParam(), events, Params(), 2);
  const int c = net->Connect(0, 1);
  std::vector<int> order;
  std::vector<SimTime> at;
  for (int i = 0; i < 3; ++i) {
    net->Send(c, 900, nullptr, [&, i] {
      order.push_back(i);
      at.push_back(events.now());
    });
  }
  events.Run();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(at, (std::vector<SimTime>{20, 30, 40}));  // 10 us each, + 10 after the last byte
}

TEST_P(NetworkTest, AHeaderOnlyMessageArrivesAfterWhatItsConnectionSentBefore) {
  EventQueue events;
  auto net = MakeNetwork(GetParam(), events, Params(), 2);
  const int c = net->Connect(0, 1);
  std::vector<int> order;
  net->Send(c, 99900, nullptr, [&] { order.push_back(0); });
  net->Send(c, 0, nullptr, [&] { order.push_back(1); });
  events.Run();
  EXPECT_EQ(order, (std::vector<int>{0, 1}));
}

TEST_P(NetworkTest, WithinAHostTheLocalPathCarriesIt) {
  EventQueue events;
  auto net = MakeNetwork(GetParam(), events, Params(), 2);
  SimTime delivered = -1;
  net->Send(net->Connect(1, 1), 5000, nullptr, [&] { delivered = events.now(); });
  events.Run();
  EXPECT_DOUBLE_EQ(delivered, 5.0 + 1);  // no header, the local rate and latency
  EXPECT_DOUBLE_EQ(net->link_bytes().up[1], 0);
}

INSTANTIATE_TEST_SUITE_P(Models, NetworkTest,
                         testing::Values(NetworkModel::kFair, NetworkModel::kQueued,
                                         NetworkModel::kFifo),
                         [](const auto& info) { return std::string(NetworkModelName(info.param)); });

TEST(FairShareNetworkTest, TwoConnectionsOnOneUplinkShareIt) {
  EventQueue events;
  FairShareNetwork net(events, Params(), 3);
  std::vector<SimTime> done(2, -1);
  net.Send(net.Connect(0, 1), 9900, [&] { done[0] = events.now(); }, nullptr);
  net.Send(net.Connect(0, 2), 9900, [&] { done[1] = events.now(); }, nullptr);
  events.Run();
  EXPECT_DOUBLE_EQ(done[0], 200.0);  // each at 50 MB/s
  EXPECT_DOUBLE_EQ(done[1], 200.0);
}

TEST(FairShareNetworkTest, MaxMinFairSharesGiveWhatOneLinkLeaves) {
  // A: 0 -> 1, B: 0 -> 2, C: 3 -> 2. Host 0's uplink holds A and B (50 each); host 2's
  // downlink holds B and C: B is fixed at 50 by host 0, so C gets the other 50... and A and
  // B 50 each. Make C's sender slower to see redistribution: with C alone on host 3's
  // uplink and B at 50, C takes 50; once B ends, C takes 100.
  EventQueue events;
  FairShareNetwork net(events, Params(), 4);
  SimTime a = -1, b = -1, c = -1;
  net.Send(net.Connect(0, 1), 19900, [&] { a = events.now(); }, nullptr);  // 20000 on the wire
  net.Send(net.Connect(0, 2), 4900, [&] { b = events.now(); }, nullptr);   // 5000
  net.Send(net.Connect(3, 2), 14900, [&] { c = events.now(); }, nullptr);  // 15000
  events.Run();
  // Until t = 100: A, B, C at 50 each (B ends: 5000 / 50). Then A alone on host 0 (100)
  // and C alone on host 2's downlink (100): A has 15000 left -> 250; C 10000 -> 200.
  EXPECT_DOUBLE_EQ(b, 100.0);
  EXPECT_DOUBLE_EQ(c, 200.0);
  EXPECT_DOUBLE_EQ(a, 250.0);
}

TEST(FairQueueNetworkTest, ALinkSendsOneMessageAtATimeAndTheDownlinkQueues) {
  EventQueue events;
  FairQueueNetwork net(events, Params(), 3);
  SimTime a = -1, b = -1;
  // Hosts 0 and 1 both send 10000 bytes on the wire to host 2 at once: host 2's downlink
  // takes one, then the other.
  net.Send(net.Connect(0, 2), 9900, nullptr, [&] { a = events.now(); });
  net.Send(net.Connect(1, 2), 9900, nullptr, [&] { b = events.now(); });
  events.Run();
  EXPECT_DOUBLE_EQ(a, 100.0 + 10);
  EXPECT_DOUBLE_EQ(b, 200.0 + 10);
}

TEST(FairQueueNetworkTest, ConnectionsTakeTurnsOfOneMessage) {
  EventQueue events;
  FairQueueNetwork net(events, Params(), 3);
  std::vector<std::string> order;
  const int a = net.Connect(0, 1);
  const int b = net.Connect(0, 2);
  for (int i = 0; i < 3; ++i) {
    net.Send(a, 900, nullptr, [&, i] { order.push_back("a" + std::to_string(i)); });
  }
  events.At(5, [&] { net.Send(b, 900, nullptr, [&] { order.push_back("b"); }); });
  events.Run();
  // b came while a0 was on the link: it goes next, not behind a1 and a2.
  EXPECT_EQ(order, (std::vector<std::string>{"a0", "b", "a1", "a2"}));
}

// An acknowledgement (header only) goes between the segments of the message in service on
// another connection, as a TCP segment does; behind its own connection's message it waits.
TEST_P(NetworkTest, AnInterleavedAcknowledgementSkipsAnotherConnectionsMessage) {
  if (GetParam() == NetworkModel::kFair) GTEST_SKIP() << "fluid: nothing waits for a message";
  EventQueue events;
  NetworkParams p = Params();
  p.interleave_bytes = 1500;
  auto net = MakeNetwork(GetParam(), events, p, 3);
  SimTime big = -1, ack = -1, behind = -1;
  const int data = net->Connect(0, 1);
  net->Send(data, 99900, nullptr, [&] { big = events.now(); });  // 1000 us on the wire
  events.At(5, [&] {
    net->Send(net->Connect(0, 2), 0, nullptr, [&] { ack = events.now(); });
    net->Send(data, 0, nullptr, [&] { behind = events.now(); });
  });
  events.Run();
  EXPECT_DOUBLE_EQ(big, 1000.0 + 10);
  EXPECT_DOUBLE_EQ(ack, 5 + 1.0 + 10);      // its 100 bytes at once, + latency + cost
  EXPECT_DOUBLE_EQ(behind, 1000 + 1.0 + 10);  // after the big message, as on its stream
}

// A large message takes its turns in segments: another connection's message goes after
// the first segment, not after the whole; the large one arrives once, after its last.
TEST_P(NetworkTest, ALargeMessageTakesItsTurnsInSegments) {
  if (GetParam() == NetworkModel::kFair) GTEST_SKIP() << "fluid: nothing waits for a message";
  EventQueue events;
  NetworkParams p = Params();
  p.segment_bytes = 10000;
  auto net = MakeNetwork(GetParam(), events, p, 3);
  std::vector<SimTime> big, small;
  net->Send(net->Connect(0, 1), 29900, [&] { big.push_back(-events.now()); },
            [&] { big.push_back(events.now()); });  // 30000 on the wire: 3 segments
  events.At(5, [&] {
    net->Send(net->Connect(0, 2), 9900, nullptr, [&] { small.push_back(events.now()); });
  });
  events.Run();
  if (GetParam() == NetworkModel::kQueued) {
    EXPECT_EQ(small, (std::vector<SimTime>{200 + 10}));      // after the first segment
    EXPECT_EQ(big, (std::vector<SimTime>{-400, 400 + 10}));  // sent and delivered once
  } else {  // fifo: all three segments were queued before it came
    EXPECT_EQ(small, (std::vector<SimTime>{400 + 10}));
    EXPECT_EQ(big, (std::vector<SimTime>{-300, 300 + 10}));
  }
  EXPECT_DOUBLE_EQ(net->link_bytes().up[0], 40000);
}

TEST(FifoNetworkTest, ALinkSendsInArrivalOrder) {
  EventQueue events;
  auto net = MakeNetwork(NetworkModel::kFifo, events, Params(), 3);
  std::vector<std::string> order;
  const int a = net->Connect(0, 1);
  const int b = net->Connect(0, 2);
  for (int i = 0; i < 3; ++i) {
    net->Send(a, 900, nullptr, [&, i] { order.push_back("a" + std::to_string(i)); });
  }
  events.At(5, [&] { net->Send(b, 900, nullptr, [&] { order.push_back("b"); }); });
  events.Run();
  // b came while a0 was on the link: it waits behind a1 and a2 (fq lets it go second).
  EXPECT_EQ(order, (std::vector<std::string>{"a0", "a1", "a2", "b"}));
}

TEST(FifoNetworkTest, TheWindowHoldsAConnectionsBacklogBackFromTheLink) {
  // a sends 3 messages of 1000 bytes on the wire; its window takes 2000: a2 enters the
  // uplink only when a0's arrival is known at the sender (its downlink end, 10 us, plus the
  // 7 us latency), after b, which came at 5 us.
  EventQueue events;
  NetworkParams p = Params();
  p.window_bytes = 2000;
  auto net = MakeNetwork(NetworkModel::kFifo, events, p, 3);
  std::vector<std::string> order;
  std::vector<SimTime> at;
  const int a = net->Connect(0, 1);
  const int b = net->Connect(0, 2);
  for (int i = 0; i < 3; ++i) {
    net->Send(a, 900, nullptr, [&, i] {
      order.push_back("a" + std::to_string(i));
      at.push_back(events.now());
    });
  }
  events.At(5, [&] {
    net->Send(b, 900, nullptr, [&] {
      order.push_back("b");
      at.push_back(events.now());
    });
  });
  events.Run();
  EXPECT_EQ(order, (std::vector<std::string>{"a0", "a1", "b", "a2"}));
  // a0 10 + 10, a1 20 + 10, b 30 + 10; a2 enters at 17, starts when b is through (30).
  EXPECT_EQ(at, (std::vector<SimTime>{20, 30, 40, 50}));
}

TEST(FifoNetworkTest, AMessageLargerThanTheWindowStillGoesAlone) {
  EventQueue events;
  NetworkParams p = Params();
  p.window_bytes = 500;
  auto net = MakeNetwork(NetworkModel::kQueued, events, p, 2);
  std::vector<SimTime> at;
  const int c = net->Connect(0, 1);
  for (int i = 0; i < 2; ++i) net->Send(c, 900, nullptr, [&] { at.push_back(events.now()); });
  events.Run();
  // Each waits for the one before it to arrive: 10 + 10; then enters at 10 + 7 = 17.
  EXPECT_EQ(at, (std::vector<SimTime>{20, 37}));
}

TEST(FabricTest, TheWatermarkLetsAnUrgentMessageOvertake) {
  EventQueue events;
  NetworkParams p = Params();
  FairShareNetwork net(events, p, 2);
  FabricOptions o;
  o.watermark_bytes = 900;  // one message of 900 at a time
  Fabric fabric(net, {0, 1}, o);
  std::vector<int> order;
  for (int i = 0; i < 3; ++i) {
    fabric.SendData(0, 1, 900, /*priority=*/-10, DataKind::kPush, [&, i] { order.push_back(i); });
  }
  fabric.SendData(0, 1, 900, /*priority=*/0, DataKind::kPush, [&] { order.push_back(9); });
  events.Run();
  // The first went at once; the urgent one overtakes the two still waiting.
  EXPECT_EQ(order, (std::vector<int>{0, 9, 1, 2}));
}

TEST(FabricTest, WithoutTheWatermarkMessagesKeepTheirOrder) {
  EventQueue events;
  FairShareNetwork net(events, Params(), 2);
  Fabric fabric(net, {0, 1}, FabricOptions{});
  std::vector<int> order;
  for (int i = 0; i < 3; ++i) {
    fabric.SendData(0, 1, 900, -10, DataKind::kPush, [&, i] { order.push_back(i); });
  }
  fabric.SendData(0, 1, 900, 0, DataKind::kPush, [&] { order.push_back(9); });
  events.Run();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 9}));
}

TEST(FabricTest, TheControlLaneSkipsTheQueuedBytes) {
  for (bool lane : {false, true}) {
    EventQueue events;
    FairShareNetwork net(events, Params(), 2);
    FabricOptions o;
    o.control_lane = lane;
    Fabric fabric(net, {0, 1}, o);
    SimTime ack = -1;
    fabric.SendData(0, 1, 99900, 0, DataKind::kSum, nullptr);  // 1000 us on the wire
    fabric.SendControl(0, 1, [&] { ack = events.now(); });
    events.Run();
    if (lane) {
      EXPECT_LT(ack, 100.0) << "on its own connection it shares the link at once";
    } else {
      EXPECT_DOUBLE_EQ(ack, 1000.0 + 1 + 10);  // behind the sum: 100 header bytes at 100/us
    }
  }
}

TEST(FabricTest, OnOneHostTheLaneLendsSumsAndCopiesPushes) {
  EventQueue events;
  FairShareNetwork net(events, Params(), 1);
  Fabric fabric(net, {0, 0}, FabricOptions{});  // shm on
  SimTime push = -1, sum = -1;
  fabric.SendData(1, 0, 10000, 0, DataKind::kPush, [&] { push = events.now(); });
  events.Run();
  fabric.SendData(0, 1, 10000, 0, DataKind::kSum, [&] { sum = events.now(); });
  const SimTime sent_sum = events.now();
  events.Run();
  EXPECT_DOUBLE_EQ(push, 10.0 + 1);        // one copy at 1000 bytes/us
  EXPECT_DOUBLE_EQ(sum - sent_sum, 1.0);   // lent: the latency only
}

}  // namespace
}  // namespace ferry::sim
