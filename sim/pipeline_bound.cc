#include "sim/pipeline_bound.h"

#include <glog/logging.h>

#include <algorithm>
#include <limits>
#include <utility>

namespace ferry::sim {
namespace {

// Iterations the period is taken over (after as many to settle): a max-plus recurrence of
// a few stages settles in a few.
constexpr int kSettle = 16;
constexpr int kMeasure = 16;

constexpr double kUnknown = -1;

// One iteration of the schedule from the stages' release times: every stage's last
// backward's end (`ends`) and when its last send arrived (`sent`).
void OneIteration(const PipelineSpec& spec, double send_us, const std::vector<double>& release,
                  std::vector<double>* ends, std::vector<double>* sent) {
  const int S = spec.num_stages();
  const int M = spec.micro_batches;
  // Arrival at stage s of micro-batch k's activation, and of its gradient.
  std::vector<std::vector<double>> activation(S, std::vector<double>(M, kUnknown));
  std::vector<std::vector<double>> gradient(S, std::vector<double>(M, kUnknown));
  std::vector<std::vector<PipelineOp>> ops(S);
  for (int s = 0; s < S; ++s) ops[s] = Schedule1F1B(s, S, M);
  std::vector<size_t> next(S, 0);
  std::vector<double> free = release;
  sent->assign(S, 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < S; ++s) {
      for (; next[s] < ops[s].size(); ++next[s], progress = true) {
        const PipelineOp op = ops[s][next[s]];
        const int k = op.micro_batch;
        double ready = free[s];
        if (op.forward && s > 0) {
          if (activation[s][k] == kUnknown) break;
          ready = std::max(ready, activation[s][k]);
        }
        if (!op.forward && s + 1 < S) {
          if (gradient[s][k] == kUnknown) break;
          ready = std::max(ready, gradient[s][k]);
        }
        const PipelineStage& stage = spec.stages[s];
        free[s] = ready + 1000.0 * (op.forward ? stage.forward_ms : stage.backward_ms);
        if (op.forward && s + 1 < S) activation[s + 1][k] = free[s] + send_us;
        if (!op.forward && s > 0) gradient[s - 1][k] = free[s] + send_us;
        if ((op.forward && s + 1 < S) || (!op.forward && s > 0)) {
          (*sent)[s] = std::max((*sent)[s], free[s] + send_us);
        }
      }
    }
  }
  for (int s = 0; s < S; ++s) CHECK_EQ(next[s], ops[s].size()) << "1F1B deadlocked at stage " << s;
  *ends = free;
}

// The header's P_s (a) and (b) of one version of a stage's tensors, bytes.
double PushPullBytes(const PipelineCluster& c, int stage, int replicas,
                     const PipelineCluster::Parts& parts) {
  double least_member = std::numeric_limits<double>::max();
  for (int r = stage * replicas; r < (stage + 1) * replicas; ++r) {
    double remote = 0;
    for (const auto& [server, wire] : parts) {
      if (c.host_of_server[server] != c.host_of_worker[r]) remote += static_cast<double>(wire);
    }
    least_member = std::min(least_member, remote);
  }
  std::vector<double> into_server(c.host_of_server.size(), 0.0);
  for (const auto& [server, wire] : parts) {
    for (int r = stage * replicas; r < (stage + 1) * replicas; ++r) {
      if (c.host_of_server[server] != c.host_of_worker[r]) {
        into_server[server] += static_cast<double>(wire);
      }
    }
  }
  return std::max(least_member, *std::max_element(into_server.begin(), into_server.end()));
}

// Adds `share` of the bytes worker `rank` moves pushing `parts` to the links: its pushes
// to servers on other hosts and the sums back.
void AddPushPulls(const PipelineCluster& c, int rank, const PipelineCluster::Parts& parts,
                  double share, std::vector<double>& up, std::vector<double>& down) {
  const int h = c.host_of_worker[rank];
  for (const auto& [server, wire] : parts) {
    const int sh = c.host_of_server[server];
    if (sh == h) continue;
    const double bytes = static_cast<double>(wire) * share;
    up[h] += bytes;  // the push
    down[sh] += bytes;
    up[sh] += bytes;  // the sum back
    down[h] += bytes;
  }
}

// Makes `least` (empty: none yet) the least of it and `bytes` on each link.
void KeepLeast(std::vector<double> bytes, std::vector<double>& least) {
  if (least.empty()) {
    least = std::move(bytes);
    return;
  }
  for (size_t h = 0; h < least.size(); ++h) least[h] = std::min(least[h], bytes[h]);
}

// Adds the tables' rows of one iteration to the links: every worker's ROWS_PUSHes to
// servers on other hosts and the answers back, the least over the cuts on each link.
void AddLeastRows(const PipelineCluster& c, int replicas, std::vector<double>& up,
                  std::vector<double>& down) {
  std::vector<double> least_up, least_down;
  for (const std::vector<PipelineCluster::Rows>& cut : c.rows_by_cut) {
    std::vector<double> u(c.hosts, 0.0), d(c.hosts, 0.0);
    for (size_t s = 0; s < cut.size(); ++s) {
      for (int r = static_cast<int>(s) * replicas; r < static_cast<int>(s + 1) * replicas; ++r) {
        const int h = c.host_of_worker[r];
        for (const PipelineCluster::RowsShare& share : cut[s]) {
          const int sh = c.host_of_server[share.server];
          if (sh == h) continue;
          u[h] += static_cast<double>(share.push_bytes);
          d[sh] += static_cast<double>(share.push_bytes);
          u[sh] += static_cast<double>(share.answer_bytes);
          d[h] += static_cast<double>(share.answer_bytes);
        }
      }
    }
    KeepLeast(std::move(u), least_up);
    KeepLeast(std::move(d), least_down);
  }
  for (size_t h = 0; h < least_up.size(); ++h) {
    up[h] += least_up[h];
    down[h] += least_down[h];
  }
}

// T_link's bytes: the busiest host link direction in one iteration (on average over the
// versions, the least over the sets' cuts; the tables' rows).
double BusiestLinkBytes(const PipelineSpec& spec, const PipelineCluster& c) {
  const int S = spec.num_stages();
  const int W = static_cast<int>(c.host_of_worker.size());
  const int R = W / S;
  std::vector<double> up, down;
  for (const std::vector<std::vector<PipelineCluster::Parts>>& cut : c.parts_by_cut) {
    std::vector<double> u(c.hosts, 0.0), d(c.hosts, 0.0);
    for (int r = 0; r < W; ++r) {
      const int s = r / R;
      const int h = c.host_of_worker[r];
      const int neighbours = (s > 0 ? 1 : 0) + (s + 1 < S ? 1 : 0);
      const double sends =
          static_cast<double>(spec.activation_bytes) * spec.micro_batches * neighbours;
      u[h] += sends;
      d[h] += sends;
      const auto& versions = cut[s];
      for (const PipelineCluster::Parts& parts : versions) {
        AddPushPulls(c, r, parts, 1.0 / static_cast<double>(versions.size()), u, d);
      }
    }
    KeepLeast(std::move(u), up);
    KeepLeast(std::move(d), down);
  }
  AddLeastRows(c, R, up, down);
  return std::max(*std::max_element(up.begin(), up.end()),
                  *std::max_element(down.begin(), down.end()));
}

}  // namespace

std::vector<std::vector<double>> PipelineStartsUs(const PipelineSpec& spec, double send_us,
                                                  const std::vector<double>& push_pull_us,
                                                  int iterations) {
  const int S = spec.num_stages();
  std::vector<double> release(S, 0.0), ends, sent, previous_ends(S, 0.0);
  std::vector<std::vector<double>> starts(S, std::vector<double>{0.0});
  for (int t = 0; t < iterations; ++t) {
    OneIteration(spec, send_us, release, &ends, &sent);
    for (int s = 0; s < S; ++s) {
      // The push_pull the next iteration waits for: t-1's with stash (none before 0), t's
      // without.
      const double push_pull = spec.stash ? (t > 0 ? previous_ends[s] + push_pull_us[s] : 0.0)
                                          : ends[s] + push_pull_us[s];
      release[s] = std::max({ends[s], sent[s], push_pull});
      starts[s].push_back(release[s]);
    }
    previous_ends = ends;
  }
  return starts;
}

std::vector<double> StagePushPullUs(const PipelineSpec& spec, const PipelineCluster& cluster,
                                    double rate_bits_per_s) {
  const int S = spec.num_stages();
  const int R = static_cast<int>(cluster.host_of_worker.size()) / S;
  std::vector<double> us;
  for (int s = 0; s < S; ++s) {
    double least = std::numeric_limits<double>::max();
    for (const std::vector<std::vector<PipelineCluster::Parts>>& cut : cluster.parts_by_cut) {
      for (const PipelineCluster::Parts& parts : cut[s]) {
        least = std::min(least, PushPullBytes(cluster, s, R, parts));
      }
    }
    const bool none = least == std::numeric_limits<double>::max();  // no version given
    us.push_back(none ? 0.0 : least / (rate_bits_per_s / 8 / 1e6));
  }
  return us;
}

double PipelineIterationUs(const PipelineSpec& spec, double send_us) {
  std::vector<double> ends, sent;
  OneIteration(spec, send_us, std::vector<double>(spec.num_stages(), 0.0), &ends, &sent);
  return std::max(*std::max_element(ends.begin(), ends.end()),
                  *std::max_element(sent.begin(), sent.end()));
}

PipelineBound ComputePipelineBound(const PipelineSpec& spec, const PipelineCluster& cluster,
                                   double rate_bits_per_s, double latency_us) {
  CHECK(!cluster.parts_by_cut.empty()) << "no cut of the sets";
  for (const auto& cut : cluster.parts_by_cut) CHECK_EQ(cut.size(), spec.stages.size());
  const double bytes_per_us = rate_bits_per_s / 8 / 1e6;
  const double send_us = static_cast<double>(spec.activation_bytes) / bytes_per_us + latency_us;
  const std::vector<double> push_pull_us = StagePushPullUs(spec, cluster, rate_bits_per_s);
  const std::vector<double> starts =
      PipelineStartsUs(spec, send_us, push_pull_us, kSettle + kMeasure).front();
  PipelineBound b;
  b.t_pipe_ms = PipelineIterationUs(spec, send_us) / 1000;
  b.push_pull_ms = *std::max_element(push_pull_us.begin(), push_pull_us.end()) / 1000;
  b.t_schedule_ms = (starts[kSettle + kMeasure] - starts[kSettle]) / kMeasure / 1000;
  b.t_link_ms = BusiestLinkBytes(spec, cluster) / bytes_per_us / 1000;
  b.bound_ms = std::max(b.t_schedule_ms, b.t_link_ms);
  return b;
}

}  // namespace ferry::sim
