#pragma once

// What a pipeline iteration can never beat (ferry-sim --pipeline; docs/simulation.md,
// "Pipeline and hybrid jobs"): the critical path with each link busy only for its own
// bytes, and each link's bytes of one iteration.
//
//   T_pipe     one iteration of the 1F1B schedule (Schedule1F1B) with the compute as given
//              and every send taking A x 8 / rate + latency (the raw link rate, no header,
//              nothing else on the link); it ends when the last compute or send ends.
//   P_s        a lower bound on stage s's push_pull after its last backward: the larger of
//              (a) the bytes each member sends to servers on other hosts (and gets back),
//              for the member with the least, and (b) the pushes from members on other
//              hosts that one server's downlink must take, for the server with the most;
//              over the rate; the least over the stage's versions of its tensors (iterations
//              alternate between two, each placed on its own: PipelineWorker) and over the
//              cuts of them the run used (every set is cut again when the global set is).
//   T_schedule the period of the schedule over many iterations, each stage starting
//              iteration t+1 once its sends of t arrived and, with stash, its push_pull of
//              t-1 had P_s after that iteration's last backward; without, its push_pull of
//              t had P_s after t's last backward. With every P_s 0 it is T_pipe.
//   T_link     every host link and direction: the bytes it carries in one iteration, on
//              average over the versions (its worker's sends and receives between stages,
//              its worker's pushes to servers on other hosts and the sums back, its
//              servers' sums to and pushes from workers on other hosts; the least over the
//              cuts of the sets the run used), plus the tables' rows (its worker's
//              ROWS_PUSHes to servers on other hosts and the answers back, its servers'
//              answers to and pushes from workers on other hosts; the least over the cuts
//              of the tables the run used), over the rate; the busiest.
//   bound      max(T_schedule, T_link).
//
// Every term only drops work (queueing, headers, TCP's overhead, summation, the message
// cost) from what the simulation times. What that guarantees: no worker starts iteration t
// before the schedule's start of its stage (PipelineStartsUs), and by the start of
// iteration t + 1 the busiest link carried t iterations' bytes (t + 1 without stash; at
// least (t - 1) x T_link's bytes whichever versions they were; (t - 2) x with the sets cut
// again, whose switch can leave one more iteration without its other version), so a long
// run's mean iteration is at least the bound. A single iteration can be shorter
// (with stash, iterations often alternate between short and long), and so can a median.

#include <cstdint>
#include <utility>
#include <vector>

#include "sim/pipeline_spec.h"

namespace ferry::sim {

// Where the job's nodes sit and what each stage's process set pushes.
struct PipelineCluster {
  std::vector<int> host_of_worker;  // by rank (stage = rank / replicas)
  std::vector<int> host_of_server;  // by server rank
  int hosts = 0;
  // One iteration's partitions of a stage's set: (server, bytes on the wire).
  using Parts = std::vector<std::pair<int, uint64_t>>;
  // By cut of the sets the run used (one or more: every set is cut again in each partition
  // size the global set switches to), by stage, by version of its tensors (one or more;
  // iterations take them in turn).
  std::vector<std::vector<std::vector<Parts>>> parts_by_cut;
  // One replica's push_pull_rows of its stage's table in one iteration (sim/pipeline_rows.h),
  // by server: ROWS_PUSH and ROWS_RESULT payload bytes (a worker of another stage moves
  // none). By cut of the global set the run used (a table cut again may change servers),
  // then by stage (a stage without a table: none); empty: no tables.
  struct RowsShare {
    int server = 0;
    uint64_t push_bytes = 0;
    uint64_t answer_bytes = 0;
  };
  using Rows = std::vector<RowsShare>;
  std::vector<std::vector<Rows>> rows_by_cut;
};

struct PipelineBound {
  double t_pipe_ms = 0;
  double push_pull_ms = 0;  // the largest P_s
  double t_schedule_ms = 0;
  double t_link_ms = 0;
  double bound_ms = 0;
};

PipelineBound ComputePipelineBound(const PipelineSpec& spec, const PipelineCluster& cluster,
                                   double rate_bits_per_s, double latency_us);

// The schedule above for `iterations` iterations (from 0, every stage free at 0): by stage,
// when each iteration starts, iterations + 1 of them (the last: when iteration
// `iterations` could start). `push_pull_us`: P_s by stage; `send_us`: one send. No
// simulated worker of stage s starts iteration t before [s][t] (every term above is less
// than or equal to what the simulation times, and the schedule is monotone in each).
std::vector<std::vector<double>> PipelineStartsUs(const PipelineSpec& spec, double send_us,
                                                  const std::vector<double>& push_pull_us,
                                                  int iterations);

// P_s of every stage (above), us.
std::vector<double> StagePushPullUs(const PipelineSpec& spec, const PipelineCluster& cluster,
                                    double rate_bits_per_s);

// One iteration with no push_pull and every stage free at 0: when its last compute or send
// ends (T_pipe), us.
double PipelineIterationUs(const PipelineSpec& spec, double send_us);

}  // namespace ferry::sim
