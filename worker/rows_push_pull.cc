#include "worker/rows_push_pull.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstring>

#include "common/transport/rows_message.h"
#include "common/util/clock.h"
#include "common/util/status.h"

namespace ferry {

namespace {

// The server rank owning the row that starts at byte `row_offset`: the server of the
// partition holding that byte in the dense placement. REQUIRES: parts sorted by
// offset, covering the tensor, row_offset inside it.
int ServerOfRow(const std::vector<PartitionSpec>& parts, uint64_t row_offset) {
  auto it = std::upper_bound(parts.begin(), parts.end(), row_offset,
                             [](uint64_t at, const PartitionSpec& p) { return at < p.offset; });
  return std::prev(it)->server;
}

}  // namespace

RowsPushPull::RowsPushPull(WorkerContext& ctx)
    : ctx_(ctx), in_flight_(ctx.config.transport.resend_timeout_ms) {}

std::unique_ptr<RowsPlan> RowsPushPull::Plan(const TensorInfo& t, uint32_t layout, int priority,
                                             const int64_t* rows, uint64_t num_rows,
                                             const void* values) {
  ctx_.mu.AssertHeld();
  auto plan = std::make_unique<RowsPlan>();
  plan->row_elements = t.count / static_cast<uint64_t>(t.shape[0]);
  plan->row_bytes = plan->row_elements * DataTypeSize(t.dtype);
  const std::vector<PartitionSpec>& parts = t.cuts[layout].parts;
  plan->positions.assign(ctx_.num_servers, {});
  for (uint64_t j = 0; j < num_rows; ++j) {
    const uint64_t row = static_cast<uint64_t>(rows[j]);
    plan->positions[ServerOfRow(parts, row * plan->row_bytes)].push_back(j);
  }
  const uint64_t limit = static_cast<uint64_t>(ctx_.config.transport.max_message_bytes);
  for (int s = 0; s < ctx_.num_servers; ++s) {
    const std::vector<uint64_t>& positions = plan->positions[s];
    const uint64_t n = positions.size();
    uint64_t bytes = 0;
    FERRY_ENFORCE(RowsPayloadBytes(n, plan->row_elements, t.dtype, true, &bytes) && bytes <= limit,
                  ErrorCode::kInvalidArgument, "push_pull_rows of tensor '", t.name, "': ", n,
                  " rows for server ", s, " make a message of more than ", limit,
                  " bytes (FERRY_MAX_MESSAGE_BYTES); push fewer rows per call");
    Message m = ctx_.NewMessage(proto::ROWS_PUSH);
    m.envelope.set_key(RowsKey(t.id, static_cast<uint32_t>(s)));
    m.envelope.set_dtype(static_cast<proto::DataTypeProto>(t.dtype));
    m.envelope.set_length(bytes);
    m.envelope.set_priority(priority);
    m.envelope.set_tensor_hash(t.hash);
    proto::RowsHeader* h = m.envelope.mutable_rows();
    h->set_num_rows(n);
    h->set_row_elements(plan->row_elements);
    h->set_total_rows(static_cast<uint64_t>(t.shape[0]));
    if (n > 0) {
      m.payload = Buffer::Allocate(bytes);
      int64_t* ids = static_cast<int64_t*>(m.payload.data());
      uint8_t* dst = m.payload.bytes() + n * sizeof(int64_t);
      const uint8_t* src = static_cast<const uint8_t*>(values);
      for (uint64_t k = 0; k < n; ++k) {
        ids[k] = rows[positions[k]];
        std::memcpy(dst + k * plan->row_bytes, src + positions[k] * plan->row_bytes,
                    plan->row_bytes);
      }
    }
    plan->pushes.push_back(std::move(m));
  }
  return plan;
}

void RowsPushPull::Start(const std::shared_ptr<Operation>& op) {
  ctx_.mu.AssertHeld();
  TensorInfo& t = *op->tensor;
  if (t.rows_rounds.empty()) t.rows_rounds.assign(ctx_.num_servers, 0);
  op->replies_left = static_cast<int>(
      std::count(ctx_.live_servers.begin(), ctx_.live_servers.end(), true));
  for (int s = 0; s < ctx_.num_servers; ++s) {
    // Every live server gets a push each round, also with no rows: its round completes
    // only once every worker pushed it. (A slot with no server holds no partition, so
    // no row: worker.h, "Elastic training".)
    if (!ctx_.live_servers[s]) continue;
    Message m = std::move(op->rows->pushes[s]);
    const uint64_t request = ctx_.next_request++;
    m.envelope.set_request_id(request);
    m.envelope.set_round(t.rows_rounds[s]++);
    ctx_.counters.rows_bytes_pushed += m.payload.size();
    ctx_.counters.servers.AddSent(s, m.payload.size());
    InFlight f;
    f.op = op;
    f.server = s;
    f.push = m;
    in_flight_.Add(request, std::move(f), /*on_wire_later=*/!in_flight_.resends_on());
    // Under mu: safe because the payload is owned (Plan), so the Van runs no release
    // hook of ours; Send never blocks.
    ctx_.van.Send(ServerId(s), std::move(m));
  }
  op->rows->pushes.clear();
}

void RowsPushPull::AbandonInFlight() {
  ctx_.mu.AssertHeld();
  in_flight_.TakeAll();  // rows pushes hold no credit
}

bool RowsPushPull::OnAck(const Message& m) {
  MutexLock lock(ctx_.mu);
  // From now on only the sums are missing: ask for them if they do not come in time,
  // backing off (a RESEND_SUM while other workers still hold the round up is acknowledged
  // again, as for dense partitions).
  return in_flight_.Ack(m.envelope.request_id()) != nullptr;
}

void RowsPushPull::ResendOverdue(int64_t now_ms, std::vector<std::pair<int, Message>>* out) {
  ctx_.mu.AssertHeld();
  // A failed operation (another server's error): nobody waits for its replies.
  in_flight_.ResendOverdue(
      now_ms, [](const InFlight& f) { return f.op->done; }, /*erase_skipped=*/true,
      [&](uint64_t request, InFlight& f) {
        if (f.acked) {
          // The server holds the rows: a header-only RESEND_SUM (with the rows body, which
          // marks a rows key) asks for the sums again.
          Message pull = ctx_.NewMessage(proto::RESEND_SUM);
          pull.envelope.set_request_id(request);
          pull.envelope.set_key(f.push.envelope.key());
          pull.envelope.set_round(f.push.envelope.round());
          *pull.envelope.mutable_rows() = f.push.envelope.rows();
          out->emplace_back(f.server, std::move(pull));
          ctx_.counters.pulls++;
        } else {
          out->emplace_back(f.server, f.push);  // shares the payload; the server deduplicates
          ctx_.counters.resends++;
        }
        LOG_EVERY_N(WARNING, 100) << "no answer from "
                                  << ctx_.cluster.table().Describe(ServerId(f.server)) << " for "
                                  << RowsKeyName(f.push.envelope.key()) << " round "
                                  << f.push.envelope.round() << "; sending "
                                  << (f.acked ? "a PULL for its sums" : "the rows again")
                                  << " (attempt " << f.attempts << ")";
        return false;  // owned payloads: the timer runs from now
      });
}

bool RowsPushPull::OnResult(Message&& m) {
  const proto::Envelope& e = m.envelope;
  MutexLock lock(ctx_.mu);
  std::optional<InFlight> taken = in_flight_.Take(e.request_id());
  if (!taken) {
    ctx_.NoteLateReply(m);
    return true;
  }
  const InFlight& f = *taken;
  const std::shared_ptr<Operation> op = f.op;
  const TensorInfo& t = *op->tensor;
  const RowsPlan& plan = *op->rows;
  const std::vector<uint64_t>& positions = plan.positions[f.server];
  std::string error;
  if (m.sender() != ServerId(f.server) || e.key() != f.push.envelope.key() ||
      e.dtype() != static_cast<int>(t.dtype) || e.rows().num_rows() != positions.size() ||
      e.rows().row_elements() != plan.row_elements) {
    error = StrCat(ctx_.cluster.table().Describe(m.sender()), " answered the rows of tensor '",
                   t.name, "' with ", ::ferry::Describe(m), ", which does not match the request");
  }
  // The copy runs outside the lock, under a hold, as for dense sums.
  const bool deliver = error.empty() && !op->done && !positions.empty();
  if (deliver) ctx_.table.Hold(op->handle);
  lock.Unlock();
  if (deliver) {
    // Rows of different servers go to disjoint rows of `output` (each position once).
    const uint32_t n = static_cast<uint32_t>(ctx_.num_workers);  // joined workers count as zeros
    for (size_t j = 0; j < positions.size(); ++j) {
      uint8_t* dst = op->output + positions[j] * plan.row_bytes;
      std::memcpy(dst, m.payload.bytes() + j * plan.row_bytes, plan.row_bytes);
      if (op->average) Scale(dst, 1.0 / n, plan.row_elements, t.dtype);
    }
    ctx_.counters.rows_bytes_received += m.payload.size();
    ctx_.table.Unhold(op->handle);
  }
  ctx_.sequencer->FinishPartition(op, error);
  return true;
}

bool RowsPushPull::OnError(const Message& m) {
  const proto::Envelope& e = m.envelope;
  MutexLock lock(ctx_.mu);
  std::optional<InFlight> taken = in_flight_.Take(e.request_id());
  if (!taken) return false;
  const std::shared_ptr<Operation> op = taken->op;
  const TensorInfo& t = *op->tensor;
  std::string error = StrCat("push_pull_rows of tensor '", t.name, "' (id ", t.id, ", ",
                             DataTypeName(t.dtype), ShapeString(t.shape), ") failed at ",
                             ctx_.cluster.table().Describe(m.sender()), ": ", e.error().reason());
  lock.Unlock();
  ctx_.sequencer->FinishPartition(op, error);
  return true;
}

std::string RowsPushPull::Describe(const Operation& op) const {
  ctx_.mu.AssertHeld();
  const TensorInfo& t = *op.tensor;
  std::string s = StrCat("push_pull_rows of tensor '", t.name, "' (id ", t.id, ")");
  if (!op.started) return s + " is queued behind an earlier operation on the same tensor";
  s += StrCat(": ", op.replies_left, " server(s) without a reply");
  for (const auto& [request, f] : in_flight_.requests()) {
    if (f.op.get() != &op) continue;
    s += StrCat(
        "; ", ctx_.cluster.table().Describe(ServerId(f.server)),
        f.acked ? " holds its rows, waiting for other workers" : " has not acknowledged its rows");
  }
  return s;
}

}  // namespace ferry
