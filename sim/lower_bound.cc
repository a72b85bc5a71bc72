#include "sim/lower_bound.h"

#include <algorithm>
#include <limits>

namespace ferry {

double EffectiveBytesPerSecond(double worker_bits_per_s, double server_bits_per_s, int servers,
                               int workers) {
  double bits = std::min(worker_bits_per_s, servers * server_bits_per_s / workers);
  return bits / 8;
}

LowerBound ComputeLowerBound(const std::vector<Layer>& layers, double b_eff_bytes_per_s) {
  const double bytes_per_ms = b_eff_bytes_per_s / 1e3;
  LowerBound lb;
  double m = 0;
  for (const Layer& l : layers) {
    lb.cf_ms += l.fwd_ms;
    lb.cb_ms += l.bwd_ms;
    m += static_cast<double>(l.bytes);
  }
  lb.m_over_b_ms = m / bytes_per_ms;
  lb.lb0_ms = std::max(lb.cf_ms + lb.cb_ms, lb.m_over_b_ms);

  // Walk k upward: R_k falls by b_{k-1}, the link time of rows 0..k grows by s_k.
  double ready = lb.cb_ms;                                    // R_k
  double sent = 0;                                            // sum_{i<=k} s_i / B_eff
  double through = -std::numeric_limits<double>::infinity();  // C*(k)
  double forward_before = 0;                                  // F_{<k}
  double worst = -std::numeric_limits<double>::infinity();    // max_k C*(k) - F_{<k}
  for (const Layer& l : layers) {
    sent += static_cast<double>(l.bytes) / bytes_per_ms;
    through = std::max(through, ready + sent);
    worst = std::max(worst, through - forward_before);
    ready -= l.bwd_ms;
    forward_before += l.fwd_ms;
  }
  lb.tail_ms = std::max(0.0, worst - lb.cb_ms);
  const Layer& last = layers.back();
  lb.lb1_ms =
      std::max(lb.cf_ms + lb.cb_ms + lb.tail_ms, lb.m_over_b_ms + last.fwd_ms + last.bwd_ms);
  return lb;
}

}  // namespace ferry
