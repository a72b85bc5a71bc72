#include "server/param_protocol.h"

#include <glog/logging.h>

#include <utility>

#include "server/summation.h"

namespace ferry {

PushVerdict ParamState::Classify(int rank, uint32_t push_round, uint64_t push_length,
                                 DataType push_dtype, uint64_t push_hash, int num_workers) {
  if (!failure.empty()) return PushVerdict::kFailed;
  if (!defined) next_round.assign(num_workers, 0);
  if (!Define(rank, push_length, push_dtype, push_hash)) return PushVerdict::kMismatch;
  const uint32_t next = next_round[rank];
  if (push_round == next) return PushVerdict::kAccumulate;
  return push_round < next ? PushVerdict::kDuplicate : PushVerdict::kAhead;
}

ParamProtocol::ParamProtocol(ProtocolContext context) : KeyProtocolOf(std::move(context)) {}

void ParamProtocol::Push(Request& request) {
  const proto::Envelope& e = request.envelope();
  const uint64_t key = e.key();
  ParamState& state = keys_[key];
  if (state.updating) {  // classified once the parameters it would see are here
    state.queued.push_back(std::move(request));
    return;
  }
  if (e.frame_bytes() != 0) {  // async pushes update parameters whole (workers never cut them)
    Reject(request, ErrorCode::kBadMessage,
           StrCat("push of ", KeyName(key), " in ", e.frame_bytes(),
                  "-byte frames, but asynchronous training (FERRY_ENABLE_ASYNC) takes whole keys"));
    return;
  }
  PushVerdict verdict =
      state.Classify(request.rank, e.round(), e.length(), static_cast<DataType>(e.dtype()),
                     e.tensor_hash(), *context_.num_workers);
  if (verdict != PushVerdict::kAccumulate) {
    Refuse(request, state, verdict);  // a resend is answered with the parameters
    return;
  }
  Buffer& push = request.message.payload;
  bool applied = true;
  if (!state.has_params) {
    // The first push of the key: the initial parameters (kept: copied out of a lent slot).
    state.params = push.lent() ? Buffer::CopyOf(push.data(), push.size()) : std::move(push);
    state.has_params = true;
  } else if (e.round() > 0) {
    // new = delta + old, in the delta's frame (the CPU Summation adopts the first push):
    // the old parameters may still be on the wire in replies and are never written again.
    Summation& summation = *context_.summation;
    Buffer update;
    summation.Add(key, state.dtype, state.length, update, std::move(push));
    summation.Add(key, state.dtype, state.length, update, state.params);
    applied = summation.Finish(key, state.generation, update);
    if (applied) state.params = std::move(update);
    context_.counters->async_updates++;
  }  // else: another worker's initial values; the key has its parameters already
  context_.counters->bytes_summed += state.length;
  state.Record(request.rank);
  if (!applied) {  // answered from OnSumReady
    state.updating = true;
    state.updater = request.reply_to();
    state.update_round = e.round();
    sums_in_flight_++;
    return;
  }
  context_.reply(Result(request.reply_to(), key, state, e.round()));
}

void ParamProtocol::Refuse(const Request& request, ParamState& state, PushVerdict verdict) {
  const proto::Envelope& e = request.envelope();
  const uint64_t key = e.key();
  if (RefuseBrokenKey(
          request, verdict, state.failure, [&] { return MismatchReason(request, state); },
          [&](const std::string& reason) {
            LOG(ERROR) << reason;
            DropKey(key, state, ErrorCode::kMismatch, reason);
          })) {
    return;
  }
  if (verdict == PushVerdict::kDuplicate) {  // applied already: answer with the parameters
    context_.counters->duplicates++;
    VLOG(1) << "dropped a duplicate push of " << KeyName(key) << " round " << e.round()
            << " from worker " << request.rank;
    context_.reply(Result(request.reply_to(), key, state, e.round()));
    return;
  }
  // kAhead (Classify returns no other verdict)
  Reject(request, ErrorCode::kBadMessage,
         StrCat("push of ", KeyName(key), " for round ", e.round(), " but worker ", request.rank,
                "'s next round is ", state.next_round[request.rank],
                " (a worker may push a round only after receiving the previous one)"));
}

void ParamProtocol::Pull(const Request& request) {
  // Workers send RESEND_SUM only after an acknowledgement, which async mode never sends; answer
  // all the same while the push is on record: the parameters hold it.
  const proto::Envelope& e = request.envelope();
  const uint64_t key = e.key();
  auto it = keys_.find(key);
  if (it != keys_.end() && it->second.updating) {
    it->second.queued.push_back(request);
    return;
  }
  if (it != keys_.end() && it->second.has_params && it->second.failure.empty() &&
      e.round() < it->second.next_round[request.rank]) {
    context_.counters->results_resent++;
    context_.reply(Result(request.reply_to(), key, it->second, e.round()));
    return;
  }
  Reject(request, ErrorCode::kBadMessage,
         StrCat("worker ", request.rank, " asked for the parameters of ", KeyName(key),
                " after round ", e.round(), " but this server has no record of that push"));
}

void ParamProtocol::FailAll(const std::string& why) {
  sums_in_flight_ = 0;  // the engine stops looking for sums: none arrives any more
  for (auto& [key, state] : keys_) {
    if (state.failure.empty()) {
      DropKey(key, state, ErrorCode::kInternal, StrCat(KeyName(key), ": ", why));
    }
  }
}

void ParamProtocol::OnSumReady(uint64_t key, uint64_t generation, Buffer sum) {
  sums_in_flight_--;
  context_.counters->device_sums++;
  auto it = keys_.find(key);
  if (it == keys_.end() || it->second.generation != generation) {
    context_.counters->device_sums_dropped++;  // the key failed meanwhile
    return;
  }
  ParamState& state = it->second;
  CHECK(state.updating) << KeyName(key) << ": a sum arrived for a key that is not updating";
  state.updating = false;
  state.params = std::move(sum);
  context_.reply(Result(state.updater, key, state, state.update_round));
  Drain(state);
}

void ParamProtocol::Drain(ParamState& state) {
  while (!state.updating && !state.queued.empty()) {
    Request request = std::move(state.queued.front());
    state.queued.pop_front();
    if (request.message.type() == proto::RESEND_SUM) {
      Pull(request);
      continue;
    }
    try {
      Push(request);
    } catch (const FerryError& e) {  // the server fails the engine; this push is told why
      context_.reply(ErrorReply(request.reply_to(), request.envelope().key(), ErrorCode::kInternal,
                                StrCat(KeyName(request.envelope().key()),
                                       ": the server's summation failed: ", e.what())));
      throw;
    }
  }
}

Reply ParamProtocol::Result(const PendingReply& to, uint64_t key, const ParamState& state,
                            uint32_t round) const {
  // Contributors 1: one push applied, not a round's sum. The parameters are shared: they
  // are never written again.
  return SumReply(Reply::Kind::kSum, to, key,
                  {round, state.dtype, state.length, state.tensor_hash, 1}, state.params);
}

void ParamProtocol::DropKey(uint64_t key, ParamState& state, ErrorCode code,
                            const std::string& reason) {
  state.failure = reason;
  if (state.updating) context_.reply(ErrorReply(state.updater, key, code, reason));
  for (const Request& r : state.queued) context_.reply(ErrorReply(r.reply_to(), key, code, reason));
  state.queued.clear();
  state.params = Buffer();
  // An update still on its way answers nobody now (OnSumReady drops it).
  state.updating = false;
  state.generation++;
  context_.summation->Reset(key);
}

}  // namespace ferry
