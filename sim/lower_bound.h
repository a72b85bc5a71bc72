#pragma once

// LB1, the lower bound of one training iteration (bench/workloads/README.md, "The lower
// bound of an iteration (LB1)"): a fluid model where each worker's link carries B_eff
// bytes/s each way, with zero latency, preemptible transfers and instant servers.
//
//   LowerBound lb = ComputeLowerBound(w.layers, EffectiveBytesPerSecond(1e9, 1e9, 2, 2));
//   double ratio = measured_ms / lb.lb1_ms;
//
// f_l, b_l, s_l: forward ms, backward ms, gradient bytes of layer l (forward order).
//   C_f = sum f, C_b = sum b, M = sum s
//   LB0 = max(C_f + C_b, M / B_eff)
//   R_j = sum_{i>=j} b_i                                  (row j's gradient is ready)
//   C*(k) = max_{j<=k} (R_j + sum_{i<=j} s_i / B_eff)     (rows 0..k through the link)
//   E = max(0, max_k (C*(k) - F_{<k}) - C_b),  F_{<k} = sum_{i<k} f_i   (exposed tail)
//   LB1 = max(C_f + C_b + E, M / B_eff + f_last + b_last)

#include <vector>

#include "sim/workload.h"

namespace ferry {

struct LowerBound {
  double cf_ms = 0;        // C_f
  double cb_ms = 0;        // C_b
  double m_over_b_ms = 0;  // M / B_eff
  double tail_ms = 0;      // E
  double lb0_ms = 0;
  double lb1_ms = 0;
};

// B_eff in bytes per second for a parameter server: min(B_worker, S * B_server / N), with
// link rates in bits per second. REQUIRES: every argument > 0.
double EffectiveBytesPerSecond(double worker_bits_per_s, double server_bits_per_s, int servers,
                               int workers);

// REQUIRES: layers in forward order, not empty; b_eff_bytes_per_s > 0.
LowerBound ComputeLowerBound(const std::vector<Layer>& layers, double b_eff_bytes_per_s);

}  // namespace ferry
