#pragma once

// What a step can never beat, and the ring all-reduce users compare with.
//
//   T_opt   the least time the network needs for one push_pull of M bytes per worker
//           with the servers' published weights (BytePS OSDI'20's T_opt generalised):
//           every worker sends weight[s] x M to each server s and receives as much back;
//           bytes between a worker and a server on its own host cross no link; the
//           busiest link direction of any host sets the time. With n colocated servers
//           and k CPU-only ones (k <= n) and equal rates it is 2n(n-1)M / ((n^2+kn-2k)B),
//           the theorem's; with servers on hosts of their own, M / min(B, S B / N).
//   ring    a ring all-reduce (Horovod, DDP) on the same links: gradients fused into
//           buckets of `bucket_bytes` in readiness order; each bucket, once ready and once
//           the ring is free, takes 2(N-1)/N x bytes / B + 2(N-1) x the per-hop cost (a
//           reduce-scatter and an all-gather of N-1 steps each); the next forward starts
//           when every bucket is done (the optimizer step needs every gradient).

#include <cstdint>
#include <vector>

#include "sim/workload.h"

namespace ferry::sim {

// Where every server sits: `host_of_server[s]`, and `host_of_worker[w]`.
struct Placing {
  std::vector<int> host_of_server;
  std::vector<int> host_of_worker;
  std::vector<double> weights;  // by server, summing to 1
};

// T_opt in us for `bytes` per worker on links of `bytes_per_us` each way. 0 when no byte
// needs a link (one host).
double TOptUs(const Placing& placing, uint64_t bytes, double bytes_per_us);

// One ring all-reduce of `bytes` over `workers` (>= 1): 2(N-1)/N x bytes / rate + 2(N-1) x
// hop_us; 0 for one worker.
double RingAllreduceUs(uint64_t bytes, int workers, double bytes_per_us, double hop_us);

// A training iteration (ms) of `workload` (forward order) with ring all-reduce in buckets,
// as above; in steady state (the forward pass starts once the previous step's buckets are
// all done).
double RingIterationMs(const Workload& workload, int workers, double bytes_per_us, double hop_us,
                       uint64_t bucket_bytes);

}  // namespace ferry::sim
