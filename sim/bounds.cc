#include "sim/bounds.h"

#include <glog/logging.h>

#include <algorithm>
#include <vector>

namespace ferry::sim {

double TOptUs(const Placing& placing, uint64_t bytes, double bytes_per_us) {
  CHECK_EQ(placing.host_of_server.size(), placing.weights.size());
  const double m = static_cast<double>(bytes);
  int hosts = 0;
  for (int h : placing.host_of_worker) hosts = std::max(hosts, h + 1);
  for (int h : placing.host_of_server) hosts = std::max(hosts, h + 1);
  std::vector<double> up(hosts, 0.0), down(hosts, 0.0);  // by host
  for (int wh : placing.host_of_worker) {
    for (size_t s = 0; s < placing.weights.size(); ++s) {
      const int sh = placing.host_of_server[s];
      if (sh == wh) continue;
      const double share = placing.weights[s] * m;
      up[wh] += share;    // the push
      down[sh] += share;
      up[sh] += share;    // the sum
      down[wh] += share;
    }
  }
  double busiest = 0;
  for (double b : up) busiest = std::max(busiest, b);
  for (double b : down) busiest = std::max(busiest, b);
  return busiest / bytes_per_us;
}

double RingAllreduceUs(uint64_t bytes, int workers, double bytes_per_us, double hop_us) {
  CHECK_GE(workers, 1);
  if (workers == 1) return 0;
  const double n = workers;
  return 2 * (n - 1) / n * static_cast<double>(bytes) / bytes_per_us + 2 * (n - 1) * hop_us;
}

double RingIterationMs(const Workload& workload, int workers, double bytes_per_us, double hop_us,
                       uint64_t bucket_bytes) {
  double forward_us = 0;
  for (const Layer& l : workload.layers) forward_us += l.fwd_ms * 1000;
  // Backward from the output side: buckets close when they hold bucket_bytes, or at the end.
  double t = forward_us;
  double ring_free = forward_us;
  uint64_t open = 0;
  for (size_t i = workload.layers.size(); i-- > 0;) {
    t += workload.layers[i].bwd_ms * 1000;
    open += workload.layers[i].bytes;
    if (open >= bucket_bytes || i == 0) {
      ring_free = std::max(ring_free, t) + RingAllreduceUs(open, workers, bytes_per_us, hop_us);
      open = 0;
    }
  }
  return std::max(t, ring_free) / 1000.0;
}

}  // namespace ferry::sim
