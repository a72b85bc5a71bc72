#pragma once

// Counters: a node's named counters in one registry (compare a Prometheus registry),
// instead of statistics structs copied by hand at every layer. Each role object owns a
// CounterRegistry, registers its counters once (a name fixed for the node's life, a
// stable address) and counts with relaxed atomic adds; readers take a Snapshot. At exit a
// node can write its counters as JSON (FERRY_STATS_FILE, WriteStatsFile), which is what
// tests and tools read instead of log sentences.
//
// Thread-safe: Register and Snapshot take the registry's lock; counting takes none.

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/util/mutex.h"
#include "common/util/status.h"

namespace ferry {

class Counter {
 public:
  void Add(uint64_t n) { value_.fetch_add(n, std::memory_order_relaxed); }
  Counter& operator+=(uint64_t n) {
    Add(n);
    return *this;
  }
  Counter& operator++() { return *this += 1; }
  void operator++(int) { Add(1); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }
  operator uint64_t() const { return value(); }  // NOLINT: reads like the number it is

 private:
  std::atomic<uint64_t> value_{0};
};

using CounterValues = std::vector<std::pair<std::string, uint64_t>>;

// A distribution of non-negative values (e.g. delays in microseconds), recorded lock-free:
// log-linear buckets, 4 per power of two, so a percentile read back is at most 25% above the
// true value (it is the upper bound of its bucket) and never below it. A registry
// snapshot shows it as four counters: <name>_count, <name>_p50, <name>_p99, <name>_max.
class Histogram {
 public:
  void Record(uint64_t value);
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  uint64_t max() const { return max_.load(std::memory_order_relaxed); }
  uint64_t sum() const { return sum_.load(std::memory_order_relaxed); }
  // How many recorded values are at most `bound`; exact when `bound` is a bucket's upper
  // bound (e.g. 2^k - 1: the Prometheus buckets of common/metrics/series.h), else the
  // count up to the last bucket that ends at or below it.
  uint64_t CountAtMost(uint64_t bound) const;
  // CountAtMost of each of `ascending` bounds, in one pass over the buckets.
  std::vector<uint64_t> CountsAtMost(const std::vector<uint64_t>& ascending) const;
  // The smallest bucket bound at or above the q-quantile (0 < q <= 1); 0 if empty.
  uint64_t Percentile(double q) const;

  static constexpr int kBuckets = 4 * 64;
  static int BucketOf(uint64_t value);
  static uint64_t UpperBound(int bucket);  // the largest value in `bucket`

 private:
  std::atomic<uint64_t> buckets_[kBuckets] = {};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> max_{0};
  std::atomic<uint64_t> sum_{0};
};

// Tensor bytes exchanged with each peer of a fixed set (a worker's server slots, a server's
// worker ranks), counted lock-free; a peer outside the set counts nowhere.
class PeerBytes {
 public:
  // REQUIRES: before any Add, once.
  void Resize(int peers);
  void AddSent(int peer, uint64_t n) {
    if (peer >= 0 && peer < size_) sent_[peer] += n;
  }
  void AddReceived(int peer, uint64_t n) {
    if (peer >= 0 && peer < size_) received_[peer] += n;
  }
  int size() const { return size_; }
  uint64_t sent(int peer) const { return sent_[peer]; }
  uint64_t received(int peer) const { return received_[peer]; }

 private:
  std::unique_ptr<Counter[]> sent_, received_;
  int size_ = 0;
};

// The value of the counter `name` in `values`; 0 if it is not there (a counter that never
// counted reads as 0 either way).
uint64_t CounterValue(const CounterValues& values, const std::string& name);

// The Prometheus series a registered counter or histogram is exported as, beside its name
// in the stats file: declared where the counter is registered, so the live metrics
// (common/metrics/series.h, AddRegistry) need no hand-made map from counters to series.
// `name` empty: the counter is not exported. Counters of one series (told apart by a
// label, e.g. reason="mismatch") must give the same help.
struct SeriesDeclaration {
  SeriesDeclaration() = default;
  SeriesDeclaration(std::string name, std::string help, std::string label = {},
                    std::string label_value = {})
      : name(std::move(name)), help(std::move(help)), label(std::move(label)),
        label_value(std::move(label_value)) {}
  std::string name;  // e.g. "ferry_rounds_completed_total" (a counter), "..._seconds"
  std::string help;
  std::string label;        // optional: a label this counter's sample carries ...
  std::string label_value;  // ... and its value
};

class CounterRegistry {
 public:
  // The counter named `name` (created at 0 on first use), exported as `series` if that
  // is named. The reference stays valid for the registry's life.
  Counter& Register(const std::string& name, SeriesDeclaration series = {}) EXCLUDES(mu_);
  // The histogram named `name` (created empty on first use); stable like a counter.
  // Recorded in microseconds, exported in seconds.
  Histogram& RegisterHistogram(const std::string& name, SeriesDeclaration series = {})
      EXCLUDES(mu_);
  // Every counter's value, in registration order, then every histogram's four values.
  CounterValues Snapshot() const EXCLUDES(mu_);

  // A counter or histogram registered with a series (exactly one of the two pointers set;
  // both stay valid for the registry's life).
  struct Exported {
    const SeriesDeclaration* series;
    const Counter* counter;
    const Histogram* histogram;
  };
  // Every exported one, counters first, in registration order.
  std::vector<Exported> ExportedSeries() const EXCLUDES(mu_);

 private:
  template <typename T>
  struct Entry {
    std::string name;
    SeriesDeclaration series;
    T value;
  };
  mutable Mutex mu_;  // guards counters_ (the counters themselves are atomic)
  std::deque<Entry<Counter>> counters_ GUARDED_BY(mu_);
  std::deque<Entry<Histogram>> histograms_ GUARDED_BY(mu_);
};

// `{"role": ..., "rank": ..., "counters": {"name": value, ...}}`.
std::string CountersJson(const std::string& role, int rank, const CounterValues& values);
// Expands "%r" in `path_template` to "<role>-<rank>" (e.g. "worker-0"), so one setting
// serves every node of a job.
std::string StatsFilePath(const std::string& path_template, const std::string& role, int rank);
// Writes CountersJson to StatsFilePath (atomically: a temporary file renamed). An empty
// template writes nothing. Returns an error naming the path if it cannot be written.
Status WriteStatsFile(const std::string& path_template, const std::string& role, int rank,
                      const CounterValues& values);

}  // namespace ferry
