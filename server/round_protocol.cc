#include "server/round_protocol.h"

#include <glog/logging.h>

#include <utility>

#include "server/summation.h"

namespace ferry {

RoundProtocol::RoundProtocol(ProtocolContext context, bool deterministic)
    : KeyProtocolOf(std::move(context)), deterministic_(deterministic) {}

void RoundProtocol::Push(Request& request) {
  const proto::Envelope& e = request.envelope();
  const uint64_t key = e.key();
  const int rank = request.rank;
  KeyState& state = keys_[key];
  if ((*context_.joined)[rank]) {
    Reject(request, ErrorCode::kBadMessage,
           StrCat("worker ", rank, " pushed ", KeyName(key),
                  " after joining; a worker may push again only once every worker has joined"));
    return;
  }
  PushVerdict verdict =
      state.Classify(rank, e.round(), e.length(), static_cast<DataType>(e.dtype()), e.tensor_hash(),
                     context_.num_workers);
  if (verdict == PushVerdict::kAccumulate) {
    Accumulate(request, state);
  } else {
    Refuse(request, state, verdict);
  }
}

void RoundProtocol::Refuse(Request& request, KeyState& state, PushVerdict verdict) {
  const proto::Envelope& e = request.envelope();
  const uint64_t key = e.key();
  if (RefuseBrokenKey(
          request, verdict, state.failure, [&] { return MismatchReason(request, state); },
          [&](const std::string& reason) { FailKey(key, state, reason); })) {
    return;
  }
  ServerCounters& counters = *context_.counters;
  switch (verdict) {
    case PushVerdict::kDuplicate:
      counters.duplicates++;
      VLOG(1) << "dropped a duplicate push of " << KeyName(key) << " round " << e.round()
              << " from worker " << request.rank;
      context_.reply(AckReply(request.reply_to(), key));
      return;
    case PushVerdict::kPrevious:
      counters.duplicates++;
      Resend(request.reply_to(), key, state);
      return;
    case PushVerdict::kStale:
      Reject(request, ErrorCode::kBadMessage,
             StrCat("push of ", KeyName(key), " for round ", e.round(), " but the key is at round ",
                    state.round, ": only the previous round's sum is kept for resends"));
      return;
    case PushVerdict::kAhead:
      Reject(request, ErrorCode::kBadMessage,
             StrCat("push of ", KeyName(key), " for round ", e.round(), " but the key is at round ",
                    state.round,
                    " (a worker may push a round only after receiving the previous one)"));
      return;
    default:  // kAccumulate (not refused), kFailed and kMismatch (above)
      return;
  }
}

void RoundProtocol::Accumulate(Request& request, KeyState& state) {
  const proto::Envelope& e = request.envelope();
  const uint64_t key = e.key();
  const int rank = request.rank;
  // A summing round has every worker recorded or joined, and joined workers' pushes are
  // refused before Classify: a push of it can only be a duplicate.
  CHECK(!state.summing) << KeyName(key) << ": a push accepted into a round already summing";
  // Acknowledge first, every push, the one completing the round too: the ack returns the
  // worker's credit, so it must not wait for the summation nor travel behind the sum.
  // (When the sum doubled as the last push's ack, credit 1 became stop-and-wait: 2.4x
  // LB1 with 1 MiB partitions, 2.8x with 4 MiB; docs/benchmarks.md.)
  context_.reply(AckReply(request.reply_to(), key));
  Summation& summation = *context_.summation;
  auto add = [&](Buffer push) {
    summation.Add(key, state.dtype, state.length, state.sum, std::move(push));
  };
  if (deterministic_) {
    state.held[rank] = std::move(request.message.payload);  // summed when its turn comes
  } else {
    add(std::move(request.message.payload));
  }
  context_.counters->bytes_summed += state.length;
  const bool complete = state.Record(rank, request.reply_to(), *context_.joined);
  if (deterministic_) {
    state.TakeInRankOrder(*context_.joined, add);
    if (state.next_rank <= rank) context_.counters->pushes_held++;  // waits for a lower rank
  }
  if (complete) CompleteRound(key, state);
}

void RoundProtocol::Pull(const Request& request) {
  const proto::Envelope& e = request.envelope();
  const uint64_t key = e.key();
  auto it = keys_.find(key);
  PushVerdict verdict =
      it == keys_.end() ? PushVerdict::kStale : it->second.ClassifyPull(request.rank, e.round());
  switch (verdict) {
    case PushVerdict::kPrevious:
      Resend(request.reply_to(), key, it->second);
      return;
    case PushVerdict::kDuplicate:  // still waiting for other workers: say so again
      context_.reply(AckReply(request.reply_to(), key));
      return;
    case PushVerdict::kFailed:
      context_.reply(ErrorReply(request.reply_to(), key, ErrorCode::kMismatch, it->second.failure));
      return;
    default:
      Reject(request, ErrorCode::kBadMessage,
             StrCat("worker ", request.rank, " asked for the sum of ", KeyName(key), " round ",
                    e.round(), " but this server has no record of its push",
                    it == keys_.end() ? std::string()
                                      : StrCat(" (the key is at round ", it->second.round, ")")));
  }
}

void RoundProtocol::Join() {
  const std::vector<bool>& joined = *context_.joined;
  for (auto& [key, state] : keys_) {
    if (deterministic_ && state.defined && state.failure.empty()) {
      // A push held for this rank's turn may go now. (A failed key holds nothing.)
      const uint64_t k = key;
      KeyState& s = state;
      s.TakeInRankOrder(joined, [&](Buffer push) {
        context_.summation->Add(k, s.dtype, s.length, s.sum, std::move(push));
      });
    }
    if (state.Complete(joined)) CompleteRound(key, state);
  }
}

void RoundProtocol::Restart() {
  for (auto& [key, state] : keys_) {
    // Only a worker pushing after its own JOIN leaves pushes waiting (a summing round
    // too: its pushers get the sum only once it arrived, and join only after that).
    if (!state.waiting.empty()) {
      FailKey(key, state, StrCat(KeyName(key), " had pushes waiting when every worker had joined"));
    }
    context_.summation->Reset(key);       // no open round may carry over into round 0
    state.Restart(context_.num_workers);  // new generation: a sum still on its way is dropped
  }
}

void RoundProtocol::FailAll(const std::string& why) {
  // Sums still on their way are never delivered: the engine stops looking for them.
  sums_in_flight_ = 0;
  for (auto& [key, state] : keys_) {
    if (state.failure.empty()) {
      DropKey(key, state, ErrorCode::kInternal, StrCat(KeyName(key), ": ", why));
    }
  }
}

void RoundProtocol::CompleteRound(uint64_t key, KeyState& state) {
  if (context_.summation->Finish(key, state.generation)) {
    SendRound(key, state);  // the sum is in state.sum now
    return;
  }
  // The sum comes to OnSumReady. Until then the key stays at this round with every
  // pusher recorded: resent pushes and RESEND_SUMs of it are acknowledged again.
  state.summing = true;
  sums_in_flight_++;
}

void RoundProtocol::OnSumReady(uint64_t key, uint64_t generation, Buffer sum) {
  sums_in_flight_--;
  context_.counters->device_sums++;
  auto it = keys_.find(key);  // keys are never erased; looked up, never held
  if (it == keys_.end() || it->second.generation != generation) {
    // The round was abandoned (the key failed, or every worker joined) after Finish:
    // nobody waits for this sum. Dropping it returns its pinned block to the pool.
    context_.counters->device_sums_dropped++;
    return;
  }
  KeyState& state = it->second;
  // Only FailKey and Restart end a summing round, and both change the generation.
  CHECK(state.summing) << KeyName(key) << ": a sum arrived for a round that is not summing";
  state.summing = false;
  state.sum = std::move(sum);
  SendRound(key, state);
}

void RoundProtocol::SendRound(uint64_t key, KeyState& state) {
  for (const PendingReply& p : state.waiting) {
    context_.reply(
        Result(p, key, state, state.round, state.sum, static_cast<uint32_t>(state.waiting.size())));
  }
  state.NextRound(context_.num_workers);
  context_.counters->rounds++;
}

Reply RoundProtocol::Result(const PendingReply& to, uint64_t key, const KeyState& state,
                            uint32_t round, const Buffer& sum, uint32_t contributors) const {
  return SumReply(Reply::Kind::kSum, to, key,
                  {round, state.dtype, state.length, state.tensor_hash, contributors}, sum);
}

void RoundProtocol::Resend(const PendingReply& to, uint64_t key, const KeyState& state) {
  context_.counters->results_resent++;
  VLOG(1) << "sending the sum of " << KeyName(key) << " round " << state.round - 1
          << " again for request " << to.request_id;
  context_.reply(Result(to, key, state, state.round - 1, state.last_sum, state.last_contributors));
}

void RoundProtocol::FailKey(uint64_t key, KeyState& state, const std::string& reason) {
  LOG(ERROR) << reason;
  DropKey(key, state, ErrorCode::kMismatch, reason);
}

void RoundProtocol::DropKey(uint64_t key, KeyState& state, ErrorCode code,
                            const std::string& reason) {
  state.failure = reason;
  for (const PendingReply& p : state.waiting) context_.reply(ErrorReply(p, key, code, reason));
  state.waiting.clear();
  state.sum = Buffer();
  state.held.assign(state.held.size(), Buffer());
  // A sum still on its way answers nobody now (OnSumReady drops it), and the device
  // keeps no open round for the key.
  state.summing = false;
  state.generation++;
  context_.summation->Reset(key);
}

}  // namespace ferry
