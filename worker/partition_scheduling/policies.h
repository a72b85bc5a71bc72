#pragma once

// The scheduling policies (FERRY_SCHEDULING_POLICY). Each states what it guarantees;
// tests/worker/policies_test.cc checks every statement with a fake clock.
//
//   fifo         Readiness order, no credit, no fusion: every partition is sent the
//                moment its gradient is ready (wait-free backprop, BytePS's default).
//                Order: arrival order, exactly.
//   priority     Most urgent first (larger priority; by default the layers nearest the
//                input), no credit: what is ready goes at once, but a backlog drains
//                in priority order. Order: priority, then arrival.
//   credit       ByteScheduler: priority + partitions + credit. The most urgent task
//                goes only while the bytes in flight stay within the credit; if it does
//                not fit, nothing goes (no smaller task slips past it), unless nothing
//                is in flight, when it goes whatever its size. Fusion: the most urgent
//                task takes along, into one message of at most `fusion_bytes`, the next
//                ready tasks for the same server in priority order, passing over tasks
//                for other servers only when those are strictly more urgent than the
//                task taken. Order: per server, exactly priority then arrival; across
//                servers, equal priorities keep arrival order, and a fused message puts
//                less than `fusion_bytes` of less urgent data ahead of a more urgent
//                task for another server. Credit: bytes in flight <= credit, or one
//                task alone.
//   p3           Priority-based parameter propagation: small slices (the partition size
//                is FERRY_P3_SLICE_BYTES), most urgent first, at most one slice in
//                flight per server connection. Order: priority, then arrival, per
//                server (a task for an idle server may pass one whose server is busy).
//   mercury      Mercury (INFOCOM'22): nothing is scheduled in units larger than a frame
//                and there is no partition-level credit. The policy hands every ready
//                task out at once, most urgent first (as `priority`, fusing small ones up
//                to `fusion_bytes`); partitions go as frames (FERRY_FRAME_BYTES) into the
//                transport's priority queue per server, which hands a frame to ZeroMQ only
//                while less than FERRY_TRANSPORT_WATERMARK_BYTES are unreleased
//                (common/transport/van.h, "Order"); Config turns both on for it (256 KiB
//                frames, a two-frame watermark, and FERRY_TCP_NOTSENT_LOWAT 128 KiB)
//                unless they are set. Order: at the policy,
//                priority then arrival; on each link, a newly ready frame waits behind at
//                most the watermark plus one frame. No credit.
//   trirace      TriRace's three traffic classes (hybrid parallel training): the
//                partitions as `credit`, cut in frames into the transport's priority queue
//                as `mercury` (Config's same defaults); a worker's point-to-point sends go
//                before every frame on the links they share, and hold back the frames to
//                destinations on those links while they cross (common/transport/van.h,
//                "Links": every policy but fifo and fifo-bucket does that much; trirace
//                adds the frames, so a send overtakes a gradient at a frame's
//                granularity, and the control lane, so a frame's acknowledgement never
//                waits behind sums). Sends among themselves: their declared priority.
//   fifo-bucket  DDP / Horovod tensor fusion: ready partitions collect in a bucket in
//                arrival order; the bucket goes, whole, once it holds `bucket_bytes`
//                or once no partition became ready for `bucket_timeout_us` (the end of
//                backward), and buckets go in order. Each bucket is one fused message
//                per server. No credit. Order: arrival order, exactly.
//   usbyte       US-Byte (TPDS'23): `credit` (order, fusion, head of line) with blocks of
//                unequal size in flight: the credit for a batch grows to the bytes the link
//                carries during the compute the batch hides behind, so the worker keeps
//                more in flight where the next gradient (or the sum's use) is far away and
//                the configured credit where it is near. From a ReadyProfile
//                (ready_profile.h), the measured rate R (CreditState::rate_bytes_per_us)
//                and the estimator's bandwidth-delay window W (what is on its way already,
//                see prophet): during backward, max(credit, W + R x (the next predicted
//                burst - now)): the backward compute before more urgent gradients arrive;
//                after the last gradient, max(credit, W + R x kForwardPerBackward x the
//                profiled backward compute of the layers more urgent than the batch's
//                head): the next forward pass runs those layers before it needs the
//                head's sum, so the first blocks are small (the layers nearest the input:
//                the credit) and later ones larger. Order: as `credit`. Credit: bytes in flight <= that
//                limit, or one task alone; never below the configured credit.
//   prophet      Prophet (ICPP'21): during backward, the bytes in flight are budgeted to
//                drain by the next predicted burst of gradients: limit W + R x (the next
//                burst - now), where W is the window estimator's bandwidth-delay window
//                (what is in flight but already through the link: the acks' way back), so
//                what is sent fills the idle time before the burst and a newly ready urgent
//                partition finds the link free; the limit may be below the credit, never
//                below W; after the last predicted burst, `credit`. Order: as `credit`.
//                (Without W, a rate measured under incast at scale shrank the budget, the
//                budget the rate: simulated 5% slower than credit for BERT-large at 32
//                workers; with it, 4-15% faster in the cells tried.)
//                Both: while profiling, after a drift, before the rate is measured, or
//                once an iteration's gradients are off their predictions, they are
//                `credit` exactly (ready_profile.h says when). Their limit moves with
//                time; WakeAtUs() is when it may grow (a late burst ends the prediction).
//
// Every policy hands out every task eventually, provided every task handed out is
// eventually done (its credit returned) and time advances (fifo-bucket's timer).

#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/types/urgency.h"
#include "worker/partition_scheduling/policy.h"
#include "worker/partition_scheduling/ready_profile.h"

namespace ferry {

struct PolicyOptions {
  SchedulingPolicy policy = SchedulingPolicy::kCredit;
  uint64_t fusion_bytes = 262144;    // credit
  uint64_t bucket_bytes = 26214400;  // fifo-bucket
  int64_t bucket_timeout_us = 5000;  // fifo-bucket
};

// The policy `options.policy` with its settings.
std::unique_ptr<Policy> MakePolicy(const PolicyOptions& options);
// The options a worker with `config.scheduling` runs with.
PolicyOptions PolicyOptionsOf(const Config::Scheduling& config);

// Most urgent first; equal priorities in arrival order: common/types/urgency.h, the order
// the transport's queues use too.
struct ByPriority {
  bool operator()(const PushTask& a, const PushTask& b) const {
    return MoreUrgent(Urgency{a.priority, a.seq}, Urgency{b.priority, b.seq});
  }
};

class FifoPolicy : public Policy {
 public:
  SchedulingPolicy kind() const override { return SchedulingPolicy::kFifo; }
  void Ready(const PushTask& task, int64_t now_us) override;
  bool Next(const CreditState& credit, int64_t now_us, Batch* out) override;
  size_t queued() const override { return ready_.size(); }

 private:
  std::deque<PushTask> ready_;  // arrival order
};

// `priority` (no credit, no fusion), `credit` (credit, fusion) and `mercury` (no credit,
// fusion): `kind` says which.
class PriorityPolicy : public Policy {
 public:
  PriorityPolicy(SchedulingPolicy kind, bool with_credit, uint64_t fusion_bytes)
      : kind_(kind), with_credit_(with_credit), fusion_bytes_(fusion_bytes) {}
  SchedulingPolicy kind() const override { return kind_; }
  bool uses_credit() const override { return with_credit_; }
  void Ready(const PushTask& task, int64_t now_us) override;
  bool Next(const CreditState& credit, int64_t now_us, Batch* out) override;
  size_t queued() const override { return ready_.size(); }

 private:
  // Ready tasks a fused batch looks at, at most (bounds the work under the queue's lock).
  static constexpr size_t kMaxFusionScan = 1024;
  // Adds tasks for `server` to `out` (which holds `bytes`), from `it` on, within `limit`.
  void Fuse(const CreditState& credit, uint64_t limit, int server, uint64_t bytes,
            std::set<PushTask, ByPriority>::iterator it, Batch* out);

  const SchedulingPolicy kind_;
  const bool with_credit_;
  const uint64_t fusion_bytes_;
  std::set<PushTask, ByPriority> ready_;
};

// `usbyte` and `prophet`: `credit` whose limit follows the iteration's profile.
class ProfiledPolicy : public PriorityPolicy {
 public:
  ProfiledPolicy(SchedulingPolicy kind, uint64_t fusion_bytes, ReadyProfileOptions options)
      : PriorityPolicy(kind, /*with_credit=*/true, fusion_bytes), profile_(options) {}
  void Ready(const PushTask& task, int64_t now_us) override;
  void Step(int64_t now_us) override { profile_.OnStep(now_us); }
  uint64_t LimitAt(const CreditState& credit, int priority, int64_t now_us) const override;
  int64_t WakeAtUs() const override { return profile_.EndsPredictingUs(); }
  const ReadyProfile& profile() const { return profile_; }

 protected:
  // The limit while the profile predicts (REQUIRES profile_.Predicting(now_us)) and the
  // rate is measured.
  virtual uint64_t ProfiledLimit(const CreditState& credit, int priority, int64_t now_us) const = 0;

  ReadyProfile profile_;
};

class UsbytePolicy : public ProfiledPolicy {
 public:
  // The forward pass's compute per unit of backward compute (backward is about twice the
  // forward: two matrix products per layer against one).
  static constexpr double kForwardPerBackward = 0.5;
  UsbytePolicy(uint64_t fusion_bytes, ReadyProfileOptions options = {})
      : ProfiledPolicy(SchedulingPolicy::kUsbyte, fusion_bytes, options) {}

 protected:
  uint64_t ProfiledLimit(const CreditState& credit, int priority, int64_t now_us) const override;
};

class ProphetPolicy : public ProfiledPolicy {
 public:
  ProphetPolicy(uint64_t fusion_bytes, ReadyProfileOptions options = {})
      : ProfiledPolicy(SchedulingPolicy::kProphet, fusion_bytes, options) {}

 protected:
  uint64_t ProfiledLimit(const CreditState& credit, int priority, int64_t now_us) const override;
};

class P3Policy : public Policy {
 public:
  SchedulingPolicy kind() const override { return SchedulingPolicy::kP3; }
  int per_server_window() const override { return 1; }
  void Ready(const PushTask& task, int64_t now_us) override;
  bool Next(const CreditState& credit, int64_t now_us, Batch* out) override;
  size_t queued() const override { return queued_; }

 private:
  // Ready slices per server rank, in priority order, and the head of each non-empty one:
  // a hand-out looks at one slice per server, not at every ready slice.
  std::vector<std::set<PushTask, ByPriority>> by_server_;
  std::set<PushTask, ByPriority> heads_;
  size_t queued_ = 0;
};

class BucketPolicy : public Policy {
 public:
  BucketPolicy(uint64_t bucket_bytes, int64_t timeout_us)
      : bucket_bytes_(bucket_bytes), timeout_us_(timeout_us) {}
  SchedulingPolicy kind() const override { return SchedulingPolicy::kFifoBucket; }
  void Ready(const PushTask& task, int64_t now_us) override;
  bool Next(const CreditState& credit, int64_t now_us, Batch* out) override;
  int64_t WakeAtUs() const override;
  size_t queued() const override { return queued_; }

 private:
  void CloseBucket();

  const uint64_t bucket_bytes_;
  const int64_t timeout_us_;
  std::vector<PushTask> open_;  // the bucket filling now, arrival order
  uint64_t open_bytes_ = 0;
  int64_t last_ready_us_ = 0;                 // when the last task joined open_
  std::deque<std::vector<PushTask>> closed_;  // buckets ready to go, in order
  size_t queued_ = 0;                         // tasks in open_ and closed_
};

}  // namespace ferry
