#include "server/rows_protocol.h"

#include <glog/logging.h>

#include <utility>

#include "common/transport/rows_message.h"

namespace ferry {

RowsProtocol::RowsProtocol(ProtocolContext context, bool async_training)
    : KeyProtocolOf(std::move(context)), async_training_(async_training) {}

void RowsProtocol::Push(Request& request) {
  const proto::Envelope& e = request.envelope();
  const uint64_t key = e.key();
  const int rank = request.rank;
  ServerCounters& counters = *context_.counters;
  counters.rows_pushes++;
  if (async_training_ || (*context_.joined)[rank]) {
    Reject(
        request, ErrorCode::kInvalidArgument,
        StrCat("worker ", rank, " pushed ", RowsKeyName(key),
               async_training_ ? " but sparse rows need synchronous training (FERRY_ENABLE_ASYNC=0)"
                               : " after joining; a worker may push again only once every worker "
                                 "has joined"));
    return;
  }
  RowKeyState& state = keys_[key];
  const proto::RowsHeader& h = e.rows();
  PushVerdict verdict =
      state.Classify(rank, e.round(), h.total_rows(), h.row_elements(),
                     static_cast<DataType>(e.dtype()), e.tensor_hash(), *context_.num_workers);
  if (verdict != PushVerdict::kAccumulate) {
    Refuse(request, state, verdict);
    return;
  }
  AlignRowsPayload(request.message);
  std::string bad = state.CheckRowIds(RowIdsOf(request.message), h.num_rows());
  if (!bad.empty()) {
    // The round can never complete without this worker's push: fail the key, so the
    // other workers waiting on it get the reason instead of a timeout.
    std::string reason =
        StrCat("worker ", rank, " pushed ", RowsKeyName(key), " round ", e.round(), ": ", bad);
    Reject(request, ErrorCode::kInvalidArgument, reason);
    FailKey(key, state, reason);
    return;
  }
  counters.rows_summed += h.num_rows();
  RowsPush push{std::move(request.message.payload), h.num_rows(), request.reply_to()};
  if (state.Record(rank, std::move(push), *context_.joined)) {
    SendRound(key, state);  // the rows' sums double as this push's acknowledgement
  } else {
    context_.reply(AckReply(request.reply_to(), key));
  }
}

void RowsProtocol::Refuse(const Request& request, RowKeyState& state, PushVerdict verdict) {
  const proto::Envelope& e = request.envelope();
  const uint64_t key = e.key();
  auto mismatch = [&] {
    const proto::RowsHeader& h = e.rows();
    return StrCat(
        "workers disagree on ", RowsKeyName(key), ": worker ", request.rank, " pushed rows of ",
        h.row_elements(), " ", DataTypeName(static_cast<DataType>(e.dtype())),
        " elements of a tensor of ", h.total_rows(), " rows (tensor hash ", std::hex,
        e.tensor_hash(), std::dec, ") but worker ", state.defined_by_rank, " pushed rows of ",
        state.row_elements, " ", DataTypeName(state.dtype), " elements of a tensor of ",
        state.total_rows, " rows (tensor hash ", std::hex, state.tensor_hash, std::dec,
        "); declare the same tensors (name, dtype, shape) in the same order on every worker");
  };
  if (RefuseBrokenKey(request, verdict, state.failure, mismatch,
                      [&](const std::string& reason) { FailKey(key, state, reason); })) {
    return;
  }
  ServerCounters& counters = *context_.counters;
  switch (verdict) {
    case PushVerdict::kDuplicate:
      counters.duplicates++;
      context_.reply(AckReply(request.reply_to(), key));
      return;
    case PushVerdict::kPrevious:
      counters.duplicates++;
      counters.results_resent++;
      context_.reply(Result(request.reply_to(), key, state, state.round - 1,
                            state.last_results[request.rank], state.last_contributors));
      return;
    default:  // kStale, kAhead
      Reject(request, ErrorCode::kBadMessage,
             StrCat("push of ", RowsKeyName(key), " for round ", e.round(),
                    " but the key is at round ", state.round,
                    " (a worker may push a round only after receiving the previous one)"));
      return;
  }
}

void RowsProtocol::Pull(const Request& request) {
  const proto::Envelope& e = request.envelope();
  const uint64_t key = e.key();
  const int rank = request.rank;
  auto it = keys_.find(key);
  if (it != keys_.end() && it->second.defined) {
    RowKeyState& state = it->second;
    if (!state.failure.empty()) {
      context_.reply(ErrorReply(request.reply_to(), key, ErrorCode::kMismatch, state.failure));
      return;
    }
    if (e.round() == state.round && state.pushed[rank]) {  // still waiting for others
      context_.reply(AckReply(request.reply_to(), key));
      return;
    }
    if (e.round() + 1 == state.round && state.has_last && state.answered_last[rank]) {
      context_.counters->results_resent++;
      context_.reply(Result(request.reply_to(), key, state, e.round(), state.last_results[rank],
                            state.last_contributors));
      return;
    }
  }
  Reject(request, ErrorCode::kBadMessage,
         StrCat("worker ", rank, " asked for the sums of ", RowsKeyName(key), " round ", e.round(),
                " but this server has no record of its push"));
}

void RowsProtocol::Join() {
  for (auto& [key, state] : keys_) {
    if (state.failure.empty() && state.defined && state.Complete(*context_.joined)) {
      SendRound(key, state);
    }
  }
}

void RowsProtocol::Restart(RestartCause cause) {
  for (auto& [key, state] : keys_) {
    if (state.failure.empty() && state.Contributors() > 0 && cause == RestartCause::kAllJoined) {
      FailKey(key, state,
              StrCat(RowsKeyName(key), " had pushes waiting when every worker had joined"));
    }
    state.Restart(*context_.num_workers);
  }
}

void RowsProtocol::RefuseOpenRounds(uint32_t tensor, const std::string& reason) {
  ForEachKeyOf(tensor, [&](uint64_t key, RowKeyState& state) {
    if (state.failure.empty() && state.Contributors() > 0) {
      FailKey(key, state, StrCat(RowsKeyName(key), ": ", reason));
    }
  });
}

void RowsProtocol::Retire(uint32_t tensor, const std::string& reason) {
  RefuseOpenRounds(tensor, reason);
  EraseTensor(tensor, [](uint64_t, RowKeyState&) {});
}

void RowsProtocol::SendRound(uint64_t key, RowKeyState& state) {
  std::vector<Buffer> results = state.SumRound();
  const uint32_t contributors = static_cast<uint32_t>(state.Contributors());
  for (size_t r = 0; r < state.pushed.size(); ++r) {
    if (!state.pushed[r]) continue;
    context_.reply(
        Result(state.pushes[r].reply, key, state, state.round, results[r], contributors));
  }
  state.NextRound(std::move(results), *context_.num_workers);
  context_.counters->rounds++;
}

Reply RowsProtocol::Result(const PendingReply& to, uint64_t key, const RowKeyState& state,
                           uint32_t round, const Buffer& values, uint32_t contributors) const {
  // `values` shared with last_results, kept for resends.
  Reply r = SumReply(Reply::Kind::kRowsSum, to, key,
                     {round, state.dtype, values.size(), state.tensor_hash, contributors}, values);
  r.row_elements = state.row_elements;
  return r;
}

void RowsProtocol::FailKey(uint64_t key, RowKeyState& state, const std::string& reason) {
  LOG(ERROR) << reason;
  state.failure = reason;
  for (size_t r = 0; r < state.pushed.size(); ++r) {
    if (!state.pushed[r]) continue;
    context_.reply(ErrorReply(state.pushes[r].reply, key, ErrorCode::kMismatch, reason));
  }
  state.DropPushes();
}

}  // namespace ferry
