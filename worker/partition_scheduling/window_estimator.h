#pragma once

// WindowEstimator: the `credit` policy's window sized by the network (FERRY_WINDOW=bdp):
// gain x bottleneck rate x minimum round trip, BBR's estimate of the bandwidth-delay
// product (Cardwell et al., "BBR", ACM Queue 2016; Linux net/ipv4/tcp_bbr.c, tcp_rate.c),
// measured on this worker's own tasks instead of TCP's packets.
//
// Samples: one per acknowledged task (ScheduledQueue::Done with acked = true). When the
// queue hands a task out, OnSend() returns a Snapshot: the bytes acknowledged so far, the
// time of the latest acknowledgement (reset to now when nothing was in flight, so an idle
// gap between iterations is no part of any interval), the hand-out time, and whether the
// sample will be app-limited. At the acknowledgement, OnAck() takes
//   rtt  = now - hand-out time (it includes the task's own transmission and any queue);
//   rate = bytes acknowledged since the snapshot / (now - the snapshot's ack time).
//          The interval is at least this task's rtt (the snapshot's ack time is at or
//          before its hand-out), so a burst of acks cannot make it short: tcp_rate.c's
//          guard against intervals under the least rtt is not needed here.
// Filters:
//   - the bottleneck rate is the median of the last `rate_samples` rate samples (counted in
//     samples, not time, so the forward pass between two iterations, when nothing is sent,
//     does not age it out). Not BBR's maximum: acknowledgements wait behind sums on the
//     server's link and then come in bursts, and a burst's samples overestimate the rate
//     (measured: the maximum read 200-276 MB/s on a 1 Gbit/s link, the median 114-117).
//     An app-limited sample (handed out while nothing else waited and the window was
//     not full: the sender limited it, not the network) enters the filter only when it
//     is above the current rate (BBR's rule);
//   - the round trip is the least rtt of the last `rtt_window_us` (10 s, as tcp_bbr.c);
//   - the quantum is the largest task of the last `rate_samples` handed out;
//   - the burst ("extra acked", BBR's ack aggregation estimate, tcp_bbr.c
//     bbr_update_ack_aggregation): an epoch starts whenever the acknowledged bytes fall
//     to what the rate would have delivered since the epoch's start; each ack's extra is
//     what the epoch acknowledged beyond that; the burst is the largest extra of the last
//     `rate_samples` acks. Acks held behind sums and then released together are what
//     the window must cover beyond the round trip, or the link idles while they wait.
// Window: clamp(gain x rate x min rtt + quantum + burst, min_bytes, max_bytes);
// `initial_bytes` (the configured credit) until `min_samples` samples were taken. The
// least round trip comes from the smallest tasks (a fused 4 KiB push: under 1 ms), while
// a task is acknowledged only after its last byte: the quantum keeps one task on the wire
// while the next waits for credit, as BBR's quantization budget adds its send quanta; the
// burst is at least one task too (an ack covers a whole task), so on a link whose acks
// come evenly the window is the BDP plus two tasks, and acks that come in bursts widen it.
//
// Not thread-safe: the ScheduledQueue calls it under its own lock. Time comes in as an
// argument (microseconds on the queue's clock), so tests drive it with a fake clock.

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace ferry {

struct WindowOptions {
  double gain = 2.0;                 // BBR's cwnd_gain; FERRY_WINDOW_GAIN
  uint64_t min_bytes = 1 << 20;      // FERRY_WINDOW_MIN_BYTES
  uint64_t max_bytes = 64 << 20;     // FERRY_WINDOW_MAX_BYTES
  uint64_t initial_bytes = 4 << 20;  // until min_samples samples: the configured credit
  int min_samples = 8;
  int rate_samples = 64;
  int64_t rtt_window_us = 10'000'000;
};

class WindowEstimator {
 public:
  struct Snapshot {
    int64_t sent_us = 0;       // hand-out
    uint64_t delivered = 0;    // bytes acknowledged before the hand-out
    int64_t delivered_us = 0;  // the latest acknowledgement before it (or the hand-out)
    bool app_limited = false;
  };

  // REQUIRES: 0 < min_bytes <= max_bytes, gain > 0, rate_samples >= 1.
  explicit WindowEstimator(const WindowOptions& options);

  // A task of `bytes` is handed out at `now_us`. `idle`: nothing was in flight before
  // it; `app_limited`: see above.
  Snapshot OnSend(int64_t now_us, uint64_t bytes, bool idle, bool app_limited);
  // The task of `bytes` handed out with `snap` was acknowledged at `now_us`.
  void OnAck(const Snapshot& snap, uint64_t bytes, int64_t now_us);

  uint64_t window_bytes() const;
  // The filters' current values (0 before any sample).
  double rate_bytes_per_us() const;
  int64_t min_rtt_us() const;
  uint64_t samples() const { return samples_; }
  // Whether min_samples samples were taken (before, the window is the configured credit
  // and the rate may rest on a burst).
  bool measured() const { return samples_ >= static_cast<uint64_t>(options_.min_samples); }
  void set_gain(double gain);
  double gain() const { return options_.gain; }
  // "window 4244304 bytes (rate 125 MB/s x min rtt 8588 us x gain 2 + 1048576 bytes of a
  // task + 1048676 bytes acked in bursts; 100 samples)"
  std::string Describe() const;

 private:
  // The last `n` values of a sample stream (the filters count samples, not time).
  class LastSamples {
   public:
    explicit LastSamples(int n) : n_(static_cast<size_t>(n)) {}
    void Add(double v);
    double Max() const;     // 0 when empty
    double Median() const;  // the upper median; 0 when empty

   private:
    size_t n_;
    std::deque<double> values_;  // oldest first
    std::vector<double> sorted_;  // the same values in order: Max and Median without work
  };

  void AddRate(double rate, bool app_limited);
  void NoteAggregation(uint64_t bytes, int64_t now_us);

  WindowOptions options_;
  uint64_t delivered_ = 0;
  int64_t delivered_us_ = 0;
  uint64_t samples_ = 0;
  LastSamples rates_;           // admitted rate samples
  double rate_ = 0.0;           // their median: the rate
  LastSamples quanta_;          // the sizes of the tasks handed out (max: the quantum)
  int64_t epoch_start_us_ = 0;  // the ack epoch (0: none yet)
  double epoch_acked_ = 0;      // bytes acknowledged in it
  LastSamples extras_;          // each ack's extra (max: the burst)
  // (time, rtt), the rtts increasing from the front: the front is the least rtt of the
  // window (a monotonic queue: a sample evicts every later-or-equal one before it).
  std::deque<std::pair<int64_t, int64_t>> rtts_;
};

}  // namespace ferry
