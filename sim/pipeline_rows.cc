#include "sim/pipeline_rows.h"

#include <glog/logging.h>

#include <algorithm>
#include <utility>

#include "common/transport/rows_message.h"
#include "common/util/error.h"

namespace ferry::sim {
namespace {

// The rows of `table` whose first byte each server owns, cut and placed as `parts`.
std::vector<uint64_t> RowsOwned(const std::vector<SimPart>& parts, const SparseRows& table,
                                int servers) {
  auto rows_before = [&](uint64_t byte) { return (byte + table.row_bytes - 1) / table.row_bytes; };
  std::vector<uint64_t> owned(static_cast<size_t>(servers), 0);
  uint64_t offset = 0;
  for (const SimPart& p : parts) {
    owned[static_cast<size_t>(p.server)] += rows_before(offset + p.bytes) - rows_before(offset);
    offset += p.bytes;
  }
  return owned;
}

// K rows over the servers in proportion to the rows each owns: the floors, then one more to
// each of the largest remainders (lower rank first). K x owned fits: pipeline_spec.h's limits.
std::vector<uint64_t> Spread(const std::vector<uint64_t>& owned, const SparseRows& table) {
  std::vector<uint64_t> rows(owned.size(), 0);
  std::vector<std::pair<uint64_t, size_t>> remainders;
  uint64_t given = 0;
  for (size_t s = 0; s < owned.size(); ++s) {
    rows[s] = table.rows * owned[s] / table.table_rows;
    given += rows[s];
    remainders.emplace_back(table.rows * owned[s] % table.table_rows, s);
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < table.rows; ++i, ++given) rows[remainders[i].second]++;
  return rows;
}

}  // namespace

PipelineRows::PipelineRows(SimJob& job, std::vector<RowsTable> tables,
                           std::vector<SimServer*> servers, int replicas)
    : job_(job), tables_(std::move(tables)), servers_(std::move(servers)), replicas_(replicas) {
  CHECK_EQ(job.workload.layers.size(), tables_.size()) << "the tables are the job's workload";
  answered_.resize(static_cast<size_t>(job.num_workers));
  calls_.resize(tables_.size() * static_cast<size_t>(job.num_workers));
  pushed_.assign(tables_.size() * servers_.size(), 0);
  round_bytes_.assign(tables_.size() * servers_.size(), 0);
}

void PipelineRows::SetAnswered(int rank, Answered answered) {
  answered_.at(static_cast<size_t>(rank)) = std::move(answered);
}

const std::vector<uint64_t>& PipelineRows::RowsPerServer(size_t t, uint64_t partition_bytes) {
  const auto found = spread_.find({t, partition_bytes});
  if (found != spread_.end()) return found->second;
  const SparseRows& table = tables_[t].rows;
  const std::vector<uint64_t> rows =
      Spread(RowsOwned(job_.LayoutFor(partition_bytes).parts[t], table, job_.num_servers), table);
  const uint64_t limit = static_cast<uint64_t>(job_.config.transport.max_message_bytes);
  for (size_t s = 0; s < rows.size(); ++s) {
    const uint64_t bytes = rows[s] * (kRowIdBytes + table.row_bytes);
    FERRY_ENFORCE(bytes <= limit, ErrorCode::kInvalidConfig, "the pipeline ", job_.workload.model,
                  ": stages[", tables_[t].stage, "].sparse_rows: ", rows[s], " rows for server ", s,
                  " make a ROWS_PUSH of ", bytes, " bytes, more than FERRY_MAX_MESSAGE_BYTES (",
                  limit, "), which a real worker refuses: push fewer rows per call");
  }
  return spread_.emplace(std::make_pair(t, partition_bytes), rows).first->second;
}

void PipelineRows::Push(int rank, size_t t, uint64_t partition_bytes) {
  const size_t tag = t * static_cast<size_t>(job_.num_workers) + static_cast<size_t>(rank);
  Call& call = calls_[tag];
  CHECK_EQ(call.answers_left, 0) << "worker " << rank << ": table " << t << " called again";
  const RowsTable& table = tables_[t];
  call.rows = rank / replicas_ == table.stage ? &RowsPerServer(t, partition_bytes) : nullptr;
  call.answers_left = static_cast<int>(servers_.size());
  call.called = job_.events.now();
  const int from = job_.WorkerNode(rank);
  for (size_t s = 0; s < servers_.size(); ++s) {
    SimServer* server = servers_[s];
    const uint64_t key = RowsKey(static_cast<uint32_t>(t), static_cast<uint32_t>(s));
    const int priority = table.priority;
    Action arrived = [this, server, key, priority, tag] {
      server->Enqueue(key, priority, *this, tag);
    };
    const int to = job_.ServerNode(static_cast<int>(s));
    const uint64_t rows = RowsTo(call, static_cast<int>(s));
    if (rows == 0) {
      job_.fabric->SendEmpty(from, to, std::move(arrived));
      continue;
    }
    const uint64_t bytes = rows * (kRowIdBytes + table.rows.row_bytes);
    pushed_bytes_ += bytes;
    job_.fabric->SendData(from, to, bytes, priority, DataKind::kPush, std::move(arrived));
  }
}

double PipelineRows::Take(int server, uint64_t tag) {
  const size_t workers = static_cast<size_t>(job_.num_workers);
  const size_t t = tag / workers;
  const int rank = static_cast<int>(tag % workers);
  const size_t round = t * servers_.size() + static_cast<size_t>(server);
  round_bytes_[round] += RowsTo(calls_[tag], server) * tables_[t].rows.row_bytes;
  if (++pushed_[round] < job_.num_workers) {
    job_.fabric->SendControl(job_.ServerNode(server), job_.WorkerNode(rank), nullptr);  // PUSH_ACK
    return 0;
  }
  // The round's last push: its sums double as its acknowledgement.
  const double work_us = static_cast<double>(round_bytes_[round]) / job_.sum_bytes_per_us;
  pushed_[round] = 0;
  round_bytes_[round] = 0;
  job_.events.After(work_us, [this, t, server] { SendAnswers(t, server); });
  return work_us;
}

void PipelineRows::SendAnswers(size_t t, int server) {
  const int from = job_.ServerNode(server);
  for (int rank = 0; rank < job_.num_workers; ++rank) {
    const size_t tag = t * static_cast<size_t>(job_.num_workers) + static_cast<size_t>(rank);
    Action delivered = [this, t, rank] { OnAnswer(t, rank); };
    const uint64_t rows = RowsTo(calls_[tag], server);
    if (rows == 0) {
      job_.fabric->SendEmpty(from, job_.WorkerNode(rank), std::move(delivered));
      continue;
    }
    const uint64_t bytes = rows * tables_[t].rows.row_bytes;
    answered_bytes_ += bytes;
    job_.fabric->SendData(from, job_.WorkerNode(rank), bytes, tables_[t].priority, DataKind::kSum,
                          std::move(delivered));
  }
}

void PipelineRows::OnAnswer(size_t t, int rank) {
  Call& call = calls_[t * static_cast<size_t>(job_.num_workers) + static_cast<size_t>(rank)];
  if (--call.answers_left == 0) call_us_.push_back(job_.events.now() - call.called);
  const Answered& answered = answered_[static_cast<size_t>(rank)];
  if (answered) answered(t);
}

}  // namespace ferry::sim
