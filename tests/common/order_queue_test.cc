// OrderQueues (common/transport/order_queue.h) without sockets: the order items are handed
// over in, the watermark, holds, critical flows holding back what shares their links, and
// the one definition of urgency it shares with the worker's scheduling policies.

#include "common/transport/order_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "worker/partition_scheduling/policies.h"

namespace ferry {
namespace {

using Queues = OrderQueues<std::unique_ptr<int>>;  // move-only items, as the Van's frames

struct Handed {
  std::string destination;
  int item;
};

// Hands over into `out`, releasing nothing (the bytes stay unreleased).
auto Collect(std::vector<Handed>* out) {
  return [out](Queues::Destination& d, std::unique_ptr<int> item, bool) {
    out->push_back(Handed{d.name(), *item});
  };
}

TEST(OrderQueuesTest, HandsOverMostUrgentFirstAndEqualPrioritiesInArrivalOrder) {
  Queues queues(/*watermark_bytes=*/1000000);
  queues.Hold(true);
  Queues::Destination& d = queues.At("server-0", 0);
  const std::vector<std::pair<int, int>> pushes = {{-3, 0}, {-1, 1}, {-3, 2}, {0, 3}, {-1, 4}};
  for (auto [priority, item] : pushes) queues.Push(d, priority, 10, std::make_unique<int>(item));
  std::vector<Handed> out;
  EXPECT_EQ(queues.Pump(d, Collect(&out)), 0u);  // held: nothing
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(d.queued(), 5u);
  queues.Hold(false);
  const uint64_t overtook = queues.Pump(d, Collect(&out));
  std::vector<int> order;
  for (const Handed& h : out) order.push_back(h.item);
  EXPECT_EQ(order, (std::vector<int>{3, 1, 4, 0, 2}));
  // 3 went before 0, 1 and 2; 1 before 0; 4 before 0 and 2: three hand-overs overtook.
  EXPECT_EQ(overtook, 3u);
  EXPECT_EQ(d.unreleased().load(), 50u);
  EXPECT_EQ(d.queued(), 0u);
}

TEST(OrderQueuesTest, TheWatermarkLetsOutOneItemBeyondItAndReleasesLetOutMore) {
  Queues queues(/*watermark_bytes=*/100);
  Queues::Destination& d = queues.At("server-0", 0);
  for (int i = 0; i < 4; ++i) queues.Push(d, 0, 60, std::make_unique<int>(i));
  std::vector<Handed> out;
  queues.Pump(d, Collect(&out));
  ASSERT_EQ(out.size(), 2u);  // 0 (60 < 100), then 1 (120: over, so nothing more)
  EXPECT_EQ(d.unreleased().load(), 120u);
  queues.Pump(d, Collect(&out));
  EXPECT_EQ(out.size(), 2u);  // nothing released: nothing more
  d.unreleased().fetch_sub(60);  // a release hook
  queues.Pump(d, Collect(&out));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].item, 2);
  d.unreleased().fetch_sub(120);
  queues.Pump(d, Collect(&out));
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[3].item, 3);
}

TEST(OrderQueuesTest, DestinationsAreIndependentAndKeptAfterClear) {
  Queues queues(/*watermark_bytes=*/50);
  Queues::Destination& a = queues.At("a", 1);
  Queues::Destination& b = queues.At("b", -1);
  EXPECT_EQ(&queues.At("a", 7), &a);  // made once; the first peer stays
  EXPECT_EQ(a.peer(), 1);
  queues.Push(a, 0, 100, std::make_unique<int>(1));
  queues.Push(a, 5, 100, std::make_unique<int>(2));
  queues.Push(b, 0, 10, std::make_unique<int>(3));
  std::vector<Handed> out;
  queues.PumpAll(Collect(&out));
  ASSERT_EQ(out.size(), 2u);  // a's most urgent (over the watermark after it), and b's
  std::sort(out.begin(), out.end(), [](const Handed& x, const Handed& y) { return x.item < y.item; });
  EXPECT_EQ(out[0].item, 2);
  EXPECT_EQ(out[0].destination, "a");
  EXPECT_EQ(out[1].item, 3);
  EXPECT_EQ(a.queued(), 1u);
  queues.Clear();
  EXPECT_EQ(a.queued(), 0u);
  EXPECT_EQ(&queues.At("a", 1), &a);
  EXPECT_EQ(a.unreleased().load(), 100u);  // what was handed over is still out
}

// The transport's frame order and the worker's scheduling order are one definition: for
// any sequence of priorities, OrderQueues hands over in the order ByPriority sorts.
TEST(OrderQueuesTest, FollowsTheSameUrgencyAsTheSchedulingPolicies) {
  std::mt19937 random(7);
  for (int trial = 0; trial < 20; ++trial) {
    Queues queues(/*watermark_bytes=*/UINT64_MAX);
    Queues::Destination& d = queues.At("s", 0);
    std::vector<PushTask> tasks;
    for (int i = 0; i < 50; ++i) {
      PushTask t;
      t.priority = static_cast<int>(random() % 7) - 6;
      t.seq = static_cast<uint64_t>(i);
      tasks.push_back(t);
      queues.Push(d, t.priority, 1, std::make_unique<int>(i));
    }
    std::sort(tasks.begin(), tasks.end(), ByPriority());
    std::vector<Handed> out;
    queues.Pump(d, Collect(&out));
    ASSERT_EQ(out.size(), tasks.size());
    for (size_t i = 0; i < tasks.size(); ++i) {
      EXPECT_EQ(out[i].item, static_cast<int>(tasks[i].seq)) << "position " << i;
    }
  }
}

// Links: 0 is this host's uplink, 1 and 2 the downlinks of hosts 1 and 2; "local" is a
// destination on this host (no link).
struct LinkedQueues {
  Queues queues{/*watermark_bytes=*/0};
  Queues::Destination& peer = queues.At("worker on host 1", 1);
  Queues::Destination& server1 = queues.At("server on host 1", 2);
  Queues::Destination& server2 = queues.At("server on host 2", 3);
  Queues::Destination& local = queues.At("server on this host", 4);
  LinkedQueues() {
    queues.SetLinks(peer, {0, 1});
    queues.SetLinks(server1, {0, 1});
    queues.SetLinks(server2, {0, 2});
  }
};

TEST(OrderQueuesTest, ACriticalFlowHoldsBackWhatSharesItsLinksUntilItCloses) {
  LinkedQueues q;
  std::vector<Handed> out;
  q.queues.Push(q.server1, -1, 10, std::make_unique<int>(1));
  q.queues.Push(q.server2, -1, 10, std::make_unique<int>(2));
  q.queues.Push(q.local, -1, 10, std::make_unique<int>(3));
  q.queues.PumpAll(Collect(&out));
  EXPECT_EQ(out.size(), 3u);  // no flow: everything goes (watermark 0: no limit)
  out.clear();

  q.queues.Push(q.peer, 0, 100, std::make_unique<int>(10), /*critical=*/true);
  EXPECT_TRUE(q.peer.flow_open());
  q.queues.Push(q.server1, -1, 10, std::make_unique<int>(11));
  q.queues.Push(q.server2, 5, 10, std::make_unique<int>(12));
  q.queues.Push(q.local, -1, 10, std::make_unique<int>(13));
  EXPECT_EQ(q.queues.held_items(), 2u);  // the two remote servers'
  q.queues.PumpAll(Collect(&out));
  // The flow and what crosses no link of it go; both remote servers share the uplink.
  ASSERT_EQ(out.size(), 2u);
  std::vector<int> items = {out[0].item, out[1].item};
  std::sort(items.begin(), items.end());
  EXPECT_EQ(items, (std::vector<int>{10, 13}));
  EXPECT_EQ(q.peer.critical_unreleased().load(), 100u);
  EXPECT_EQ(q.peer.critical_queued(), 0u);
  EXPECT_EQ(q.server1.queued(), 1u);
  EXPECT_EQ(q.server2.queued(), 1u);

  q.queues.CloseFlow(q.peer);
  EXPECT_EQ(q.queues.open_flows(), 0u);
  out.clear();
  q.queues.PumpAll(Collect(&out));
  EXPECT_EQ(out.size(), 2u);  // released at once
  EXPECT_EQ(q.queues.flows_opened(), 1u);
}

TEST(OrderQueuesTest, CriticalItemsGoFirstAndAreNeverHeld) {
  LinkedQueues q;
  q.queues.Hold(true);
  q.queues.Push(q.peer, 100, 10, std::make_unique<int>(1));  // not critical, more urgent
  q.queues.Push(q.peer, -5, 10, std::make_unique<int>(2), /*critical=*/true);
  q.queues.Push(q.peer, -1, 10, std::make_unique<int>(3), /*critical=*/true);
  EXPECT_EQ(q.queues.held_items(), 1u);  // queued before the flow opened, held since
  q.queues.Hold(false);
  std::vector<Handed> out;
  q.queues.Pump(q.peer, Collect(&out));
  // Critical first (by their priority); the non-critical one waits for its own flow.
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].item, 3);
  EXPECT_EQ(out[1].item, 2);
  q.queues.CloseFlow(q.peer);
  q.queues.Pump(q.peer, Collect(&out));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].item, 1);
}

// A connection is often placed just after its first send opened a flow: the flow then
// holds the links it turns out to cross.
TEST(OrderQueuesTest, LinksSetWhileAFlowIsOpenAreHeldFromThen) {
  LinkedQueues q;
  q.queues.SetLinks(q.peer, {});  // not placed yet
  q.queues.Push(q.peer, 0, 10, std::make_unique<int>(1), true);
  q.queues.Push(q.server1, 0, 10, std::make_unique<int>(2));
  std::vector<Handed> out;
  q.queues.PumpAll(Collect(&out));
  EXPECT_EQ(out.size(), 2u);  // nothing shared yet
  EXPECT_EQ(q.queues.flows_opened(), 0u);  // it holds nothing yet
  q.queues.SetLinks(q.peer, {0, 1});
  EXPECT_EQ(q.queues.flows_opened(), 1u);
  q.queues.Push(q.server2, 0, 10, std::make_unique<int>(3));
  q.queues.PumpAll(Collect(&out));
  EXPECT_EQ(out.size(), 2u);  // held: it shares the uplink
  q.queues.SetLinks(q.peer, {5});  // a later reconnect elsewhere moves the counts
  q.queues.PumpAll(Collect(&out));
  EXPECT_EQ(out.size(), 3u);
  q.queues.CloseFlow(q.peer);
  EXPECT_EQ(q.queues.open_flows(), 0u);
  q.queues.Push(q.server2, 0, 10, std::make_unique<int>(4));
  q.queues.PumpAll(Collect(&out));
  EXPECT_EQ(out.size(), 4u);  // no count left behind
}

TEST(OrderQueuesTest, FlowsOnTwoLinksCloseIndependently) {
  LinkedQueues q;
  q.queues.SetLinks(q.server2, {2});  // a path that does not cross the uplink
  q.queues.Push(q.peer, 0, 10, std::make_unique<int>(1), true);
  q.queues.Push(q.server2, 0, 10, std::make_unique<int>(2), true);
  q.queues.Push(q.server1, 0, 10, std::make_unique<int>(3));
  EXPECT_EQ(q.queues.OpenFlows().size(), 2u);
  std::vector<Handed> out;
  q.queues.PumpAll(Collect(&out));
  EXPECT_EQ(out.size(), 2u);
  q.queues.CloseFlow(q.server2);  // the other flow still holds link 0
  q.queues.PumpAll(Collect(&out));
  EXPECT_EQ(out.size(), 2u);
  q.queues.CloseFlow(q.peer);
  q.queues.PumpAll(Collect(&out));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].item, 3);
}

// Shutdown drops what is queued and every flow with it: nothing stays held.
TEST(OrderQueuesTest, ClearClosesTheOpenFlows) {
  LinkedQueues q;
  q.queues.Hold(true);
  q.queues.Push(q.peer, 0, 10, std::make_unique<int>(1), true);
  q.queues.Push(q.server1, 0, 10, std::make_unique<int>(2));
  q.queues.Clear();
  EXPECT_EQ(q.queues.open_flows(), 0u);
  EXPECT_EQ(q.peer.critical_queued(), 0u);
  q.queues.Hold(false);
  std::vector<Handed> out;
  q.queues.Push(q.server2, 0, 10, std::make_unique<int>(3));
  q.queues.PumpAll(Collect(&out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].item, 3);
}

TEST(UrgencyTest, LargerPriorityFirstThenEarlierArrival) {
  EXPECT_TRUE(MoreUrgent(Urgency{0, 5}, Urgency{-1, 0}));
  EXPECT_TRUE(MoreUrgent(Urgency{-1, 0}, Urgency{-1, 1}));
  EXPECT_FALSE(MoreUrgent(Urgency{-1, 1}, Urgency{-1, 1}));
  EXPECT_FALSE(MoreUrgent(Urgency{-2, 0}, Urgency{-1, 9}));
}

}  // namespace
}  // namespace ferry
