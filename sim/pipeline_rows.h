#pragma once

// PipelineRows: the sparse rows of a pipeline job (PipelineStage::sparse_rows) as
// push_pull_rows moves them (worker/rows_push_pull.h, server/rows_protocol.h), in
// simulated time; the third class of a hybrid job's traffic, beside the point-to-point
// sends and the stages' push_pulls (PipelineWorker).
//
//   PipelineRows rows(job, tables, servers, replicas);   // job.workload: the tables
//   rows.SetAnswered(rank, [&](size_t table) { ... });   // one server answered
//   rows.Push(rank, table, partition_bytes);
//
// Tables: each is a tensor of the global set, declared in stage order (the t-th table has
// id t), so it is cut and placed as the global set's tensors are (SimJob::LayoutFor, with
// the tables as the job's workload, whose model is the pipeline's name, for messages); a
// row belongs to the server that owns its first byte. The K rows a replica of the table's
// stage pushes per iteration are spread as K random rows are on average: in proportion to
// the rows each server owns, the rest one by one to the largest remainders (the lower rank
// first on a tie).
//
// A call: push_pull_rows has no process sets, so every worker calls it for every table
// once per iteration, the workers of other stages with no rows. It sends every server one
// ROWS_PUSH at the table's priority: n rows make n x (8 + W) bytes (ids, then values), a
// message with tensor bytes (queued by priority and held by a flow like a push; it takes
// no credit); no rows a header-only message (Fabric::SendEmpty). The server queues it on
// the engine that owns RowsKey(table, server), with the pushes: taking one that leaves the
// round open acknowledges it (PUSH_ACK); taking the round's last (every worker pushed) sums
// the round, its rows' values at the summation rate, then answers every pusher with the
// sums of its own rows (n x W bytes; none: header only). A call is done once every server
// answered: it waits for the slowest worker's push. The caller makes one call per table at
// a time (the Sequencer's order), so a server never sees a round before the last one ended.
// Not thread-safe (one event loop).

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "sim/job.h"
#include "sim/pipeline_spec.h"
#include "sim/sim_server.h"

namespace ferry::sim {

// Bytes of a row id in a ROWS_PUSH (an int64 before the values: rows_message.h).
constexpr uint64_t kRowIdBytes = 8;

struct RowsTable {
  int stage = 0;  // whose replicas push its rows
  SparseRows rows;
  int priority = 0;  // of the stage's first tensor: the most urgent of the stage's own
};

class PipelineRows : public EngineWork {
 public:
  // One server's answer to `table`'s call arrived.
  using Answered = std::function<void(size_t table)>;

  // `servers`: by rank; `replicas`: workers per stage (rank / replicas is a worker's stage).
  PipelineRows(SimJob& job, std::vector<RowsTable> tables, std::vector<SimServer*> servers,
               int replicas);

  size_t tables() const { return tables_.size(); }
  const RowsTable& table(size_t t) const { return tables_[t]; }
  void SetAnswered(int rank, Answered answered);
  // Worker `rank` calls push_pull_rows of `table`, the global set's tensors cut in
  // `partition_bytes`. REQUIRES: its last call of `table` was answered by every server.
  void Push(int rank, size_t table, uint64_t partition_bytes);
  // The rows a replica of `table`'s stage sends each server (by rank) in one call, the
  // global set cut in `partition_bytes`. Throws FerryError(kInvalidConfig) when one server's
  // ROWS_PUSH would be over FERRY_MAX_MESSAGE_BYTES, as a real worker refuses it.
  const std::vector<uint64_t>& RowsPerServer(size_t table, uint64_t partition_bytes);

  // Every call, us: from the call to its last answer.
  const std::vector<double>& call_us() const { return call_us_; }
  // Payload bytes of every ROWS_PUSH and ROWS_RESULT so far (ids and values; the sums).
  uint64_t pushed_bytes() const { return pushed_bytes_; }
  uint64_t answered_bytes() const { return answered_bytes_; }

  double Take(int server, uint64_t tag) override;

 private:
  struct Call {
    const std::vector<uint64_t>* rows = nullptr;  // by server; null: none (another stage's)
    int answers_left = 0;
    SimTime called = 0;
  };
  uint64_t RowsTo(const Call& call, int server) const {
    return call.rows == nullptr ? 0 : (*call.rows)[static_cast<size_t>(server)];
  }
  // `table`'s round on `server` is summed: every pusher gets the sums of its rows.
  void SendAnswers(size_t table, int server);
  // One server's answer to worker `rank`'s call of `table` arrived.
  void OnAnswer(size_t table, int rank);

  SimJob& job_;
  const std::vector<RowsTable> tables_;
  const std::vector<SimServer*> servers_;
  const int replicas_;
  std::vector<Answered> answered_;  // by rank
  std::vector<Call> calls_;         // by table x workers + rank (a push's tag)
  // By table x servers + server: the open round's pushes taken, and their values' bytes.
  std::vector<int> pushed_;
  std::vector<uint64_t> round_bytes_;
  // By (table, partition size): RowsPerServer's answer (stable: a map's nodes never move).
  std::map<std::pair<size_t, uint64_t>, std::vector<uint64_t>> spread_;
  std::vector<double> call_us_;
  uint64_t pushed_bytes_ = 0;
  uint64_t answered_bytes_ = 0;
};

}  // namespace ferry::sim
