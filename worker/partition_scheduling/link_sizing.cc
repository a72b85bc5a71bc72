#include "worker/partition_scheduling/link_sizing.h"

#include <algorithm>
#include <cmath>

#include "worker/partition_scheduling/autotune.h"

namespace ferry {

void LinkRates::Resize(int servers) { paths_.resize(static_cast<size_t>(std::max(servers, 0))); }

void LinkRates::OnAck(int server, uint64_t bytes, int64_t sent_us, int64_t now_us) {
  if (server < 0) return;
  if (static_cast<size_t>(server) >= paths_.size()) Resize(server + 1);
  Path& p = paths_[static_cast<size_t>(server)];
  const int64_t since = std::max(sent_us, p.last_ack_us);
  p.last_ack_us = now_us;
  if (now_us <= since || bytes == 0) return;
  p.samples.push_back(static_cast<double>(bytes) * 1e6 / static_cast<double>(now_us - since));
  if (p.samples.size() > kSamples) p.samples.pop_front();
}

double LinkRates::Rate(int server) const {
  if (server < 0 || static_cast<size_t>(server) >= paths_.size()) return 0;
  const std::deque<double>& s = paths_[static_cast<size_t>(server)].samples;
  if (s.empty()) return 0;
  std::vector<double> v(s.begin(), s.end());
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

double PieceRate(double worker_rate, double path_rate, int servers, double threshold) {
  if (path_rate <= 0 || servers <= 0) return worker_rate;
  return std::min(worker_rate, path_rate * servers * (1.0 + threshold));
}

uint64_t PieceBytes(double worker_rate, double path_rate, int servers, double threshold,
                    double ms, int64_t floor, int64_t ceiling) {
  const double rate = PieceRate(worker_rate, path_rate, servers, threshold);
  return static_cast<uint64_t>(PartitionBytesForRate(rate, ms, std::min(floor, ceiling), ceiling));
}

LinkPieces LinkSizing::Decide(double worker_rate, const LinkRates& rates,
                              int64_t partition_bytes, double mean_rate) const {
  LinkPieces out;
  out.worker_rate = worker_rate;
  const int servers = rates.servers();
  for (int s = 0; s < servers; ++s) {
    const double rate = PieceRate(worker_rate, rates.Rate(s), servers, threshold_);
    out.sized_for.push_back(rate);
    const bool as_mean = mean_rate > 0 && rate >= mean_rate * (1.0 - threshold_);
    out.bytes.push_back(as_mean ? static_cast<uint64_t>(partition_bytes)
                                : static_cast<uint64_t>(PartitionBytesForRate(
                                      rate, ms_, std::min(floor_, partition_bytes), partition_bytes)));
  }
  return out;
}

bool LinkSizing::Moved(const LinkPieces& decided, double worker_rate,
                       const LinkRates& rates) const {
  auto moved = [this](double was, double now) {
    if (was <= 0 || now <= 0) return (was <= 0) != (now <= 0);
    return std::fabs(now - was) > threshold_ * was;
  };
  const int servers = rates.servers();
  if (static_cast<size_t>(servers) != decided.sized_for.size()) return true;
  for (int s = 0; s < servers; ++s) {
    const double now = PieceRate(worker_rate, rates.Rate(s), servers, threshold_);
    if (moved(decided.sized_for[static_cast<size_t>(s)], now)) return true;
  }
  return false;
}

}  // namespace ferry
