#include "common/util/counters.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/util/json_quote.h"
#include "common/util/strings.h"

namespace ferry {

namespace {

// The entry named `name` of `entries`, made on first use (with `series`).
template <typename Entries>
auto& FindOrAdd(Entries& entries, const std::string& name, SeriesDeclaration series) {
  for (auto& e : entries) {
    if (e.name == name) return e.value;
  }
  auto& e = entries.emplace_back();
  e.name = name;
  e.series = std::move(series);
  return e.value;
}

}  // namespace

Counter& CounterRegistry::Register(const std::string& name, SeriesDeclaration series) {
  MutexLock lock(mu_);
  return FindOrAdd(counters_, name, std::move(series));
}

Histogram& CounterRegistry::RegisterHistogram(const std::string& name, SeriesDeclaration series) {
  MutexLock lock(mu_);
  return FindOrAdd(histograms_, name, std::move(series));
}

std::vector<CounterRegistry::Exported> CounterRegistry::ExportedSeries() const {
  MutexLock lock(mu_);
  std::vector<Exported> out;
  for (const auto& e : counters_) {
    if (!e.series.name.empty()) out.push_back(Exported{&e.series, &e.value, nullptr});
  }
  for (const auto& e : histograms_) {
    if (!e.series.name.empty()) out.push_back(Exported{&e.series, nullptr, &e.value});
  }
  return out;
}

CounterValues CounterRegistry::Snapshot() const {
  MutexLock lock(mu_);
  CounterValues out;
  out.reserve(counters_.size() + 4 * histograms_.size());
  for (const auto& e : counters_) out.emplace_back(e.name, e.value.value());
  for (const auto& e : histograms_) {
    const Histogram& h = e.value;
    out.emplace_back(e.name + "_count", h.count());
    out.emplace_back(e.name + "_p50", h.Percentile(0.50));
    out.emplace_back(e.name + "_p99", h.Percentile(0.99));
    out.emplace_back(e.name + "_max", h.max());
  }
  return out;
}

int Histogram::BucketOf(uint64_t value) {
  if (value < 4) return static_cast<int>(value);
  const int e = 63 - __builtin_clzll(value);  // 2^e <= value < 2^(e+1), e >= 2
  const int sub = static_cast<int>((value >> (e - 2)) & 3);
  return 4 * (e - 1) + sub;
}

uint64_t Histogram::UpperBound(int bucket) {
  if (bucket < 4) return static_cast<uint64_t>(bucket);
  const int e = bucket / 4 + 1;
  const uint64_t sub = static_cast<uint64_t>(bucket % 4);
  const uint64_t step = 1ull << (e - 2);
  return (1ull << e) + (sub + 1) * step - 1;  // wraps to 2^64-1 at the top bucket, as it should
}

void Histogram::Record(uint64_t value) {
  buckets_[BucketOf(value)].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
  uint64_t seen = max_.load(std::memory_order_relaxed);
  while (value > seen && !max_.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

void PeerBytes::Resize(int peers) {
  sent_ = std::make_unique<Counter[]>(static_cast<size_t>(peers));
  received_ = std::make_unique<Counter[]>(static_cast<size_t>(peers));
  size_ = peers;
}

uint64_t Histogram::CountAtMost(uint64_t bound) const { return CountsAtMost({bound})[0]; }

std::vector<uint64_t> Histogram::CountsAtMost(const std::vector<uint64_t>& ascending) const {
  std::vector<uint64_t> out;
  out.reserve(ascending.size());
  uint64_t n = 0;
  int i = 0;
  for (uint64_t bound : ascending) {
    for (; i < kBuckets && UpperBound(i) <= bound; ++i) n += buckets_[i].load(std::memory_order_relaxed);
    out.push_back(n);
  }
  return out;
}

uint64_t Histogram::Percentile(double q) const {
  uint64_t total = 0;
  uint64_t counts[kBuckets];
  for (int i = 0; i < kBuckets; ++i) total += counts[i] = buckets_[i].load(std::memory_order_relaxed);
  if (total == 0) return 0;
  // The rank of the q-quantile, 1-based: the smallest r with r >= q * total.
  uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(total));
  if (static_cast<double>(rank) < q * static_cast<double>(total)) ++rank;
  rank = std::max<uint64_t>(rank, 1);
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += counts[i];
    if (seen >= rank) return std::min(UpperBound(i), max());
  }
  return max();
}

std::string CountersJson(const std::string& role, int rank, const CounterValues& values) {
  std::string s = StrCat("{\"role\": ", JsonQuote(role), ", \"rank\": ", rank, ", \"counters\": {");
  for (size_t i = 0; i < values.size(); ++i) {
    s += StrCat(i ? ", " : "", JsonQuote(values[i].first), ": ", values[i].second);
  }
  return s + "}}\n";
}

std::string StatsFilePath(const std::string& path_template, const std::string& role, int rank) {
  std::string out;
  for (size_t i = 0; i < path_template.size(); ++i) {
    if (path_template[i] == '%' && i + 1 < path_template.size() && path_template[i + 1] == 'r') {
      out += StrCat(role, "-", rank);
      ++i;
    } else {
      out += path_template[i];
    }
  }
  return out;
}

Status WriteStatsFile(const std::string& path_template, const std::string& role, int rank,
                      const CounterValues& values) {
  if (path_template.empty()) return Status::Ok();
  const std::string path = StatsFilePath(path_template, role, rank);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << CountersJson(role, rank, values);
    out.flush();
    if (!out) {
      return Status(ErrorCode::kInvalidConfig,
                    StrCat("FERRY_STATS_FILE: cannot write ", tmp, ": ", std::strerror(errno)));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status(ErrorCode::kInvalidConfig,
                  StrCat("FERRY_STATS_FILE: cannot rename ", tmp, " to ", path, ": ",
                         std::strerror(errno)));
  }
  return Status::Ok();
}

uint64_t CounterValue(const CounterValues& values, const std::string& name) {
  for (const auto& [n, v] : values) {
    if (n == name) return v;
  }
  return 0;
}

}  // namespace ferry
