#pragma once

// Partitions sized per link (FERRY_PARTITION_PER_LINK): each worker cuts its pushes to each
// server in pieces sized by its own measured path to that server, while the partitions (the
// servers' keys, their placement) stay what every worker agreed on. A server sums pieces of
// one key cut differently by different workers by range arithmetic (server/key_state.h,
// "Cuts that differ"), so no worker waits for another to change its cut: each decides alone,
// at any step boundary.
//
// LinkRates measures each path: at every acknowledgement of a piece by server s, a delivery
// rate sample = its bytes / (now - the later of its send and s's previous acknowledgement);
// a path's rate is the median of its last `kSamples` samples (acks that come in bursts
// overestimate one sample, not the median). While a worker sends to every server at once,
// each path's rate is its share of the worker's link, so it is read against the others:
// PieceBytes sizes server s's pieces for min(worker's rate, servers x s's share), where a
// share within `threshold` of an even one counts as even (noise must not change a cut); a
// path within `threshold` of the mean rate the partitions were sized for keeps whole
// partitions, so on even links nothing changes (whatever the floors of the two sizes).
//
// Decisions: LinkSizing::Decide keeps the rates its pieces were sized for; Moved says
// whether one of them moved by more than the threshold (FERRY_REPARTITION_THRESHOLD) since,
// so a worker decides again only then.
//
// Not thread-safe: the worker calls it under WorkerContext::mu.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace ferry {

class LinkRates {
 public:
  explicit LinkRates(int servers = 0) { Resize(servers); }
  // Servers in the job (a rate per server rank); keeps what was measured of the first ones.
  void Resize(int servers);
  // Server `server` acknowledged `bytes` sent at `sent_us`, now `now_us` (a server beyond
  // the ones sized so far adds its slot).
  void OnAck(int server, uint64_t bytes, int64_t sent_us, int64_t now_us);
  // Bytes per second to `server` (the median sample), 0 before any sample.
  double Rate(int server) const;
  int servers() const { return static_cast<int>(paths_.size()); }

  static constexpr size_t kSamples = 32;

 private:
  struct Path {
    std::deque<double> samples;
    int64_t last_ack_us = 0;
  };
  std::vector<Path> paths_;
};

// The pieces of one worker, by server rank, and what they were decided from.
struct LinkPieces {
  std::vector<uint64_t> bytes;  // by server
  double worker_rate = 0;       // bytes/s the decision saw
  std::vector<double> sized_for;  // by server: the rate its piece was sized for (PieceRate)
};

// The rate a path's pieces are sized for: min(worker_rate, servers x path_rate x (1 +
// threshold)) (see above); a path with no sample counts as even (worker_rate).
double PieceRate(double worker_rate, double path_rate, int servers, double threshold);
// The piece for that path: PartitionBytesForRate(PieceRate(...), ms, floor, ceiling).
uint64_t PieceBytes(double worker_rate, double path_rate, int servers, double threshold,
                    double ms, int64_t floor, int64_t ceiling);

class LinkSizing {
 public:
  // `ms`: FERRY_PARTITION_MS; `floor`: the least piece; `threshold`: FERRY_REPARTITION_THRESHOLD.
  LinkSizing(double ms, int64_t floor, double threshold)
      : ms_(ms), floor_(floor), threshold_(threshold) {}
  // The pieces of partitions of at most `partition_bytes`, sized for `mean_rate` (the
  // workers' mean at the sizing boundary; 0: unknown), for the rates measured now.
  LinkPieces Decide(double worker_rate, const LinkRates& rates, int64_t partition_bytes,
                    double mean_rate) const;
  // Whether a rate a piece is sized for (PieceRate) moved by more than the threshold since
  // `decided`: the worker's link, or a path slower than an even share of it. (A path's share
  // above an even one sizes nothing, so its noise decides nothing.)
  bool Moved(const LinkPieces& decided, double worker_rate, const LinkRates& rates) const;
  double threshold() const { return threshold_; }

 private:
  const double ms_;
  const int64_t floor_;
  const double threshold_;
};

// The least piece partitions sized per link are cut in.
constexpr int64_t kMinLinkPieceBytes = 32768;

}  // namespace ferry
