#include "server/round_protocol.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstring>
#include <tuple>
#include <utility>

#include "common/types/process_set.h"
#include "common/util/clock.h"
#include "server/stragglers.h"
#include "server/summation.h"

namespace ferry {

RoundProtocol::RoundProtocol(ProtocolContext context, bool deterministic)
    : KeyProtocolOf(std::move(context)),
      deterministic_(deterministic),
      compression_(context_.max_message_bytes) {}

namespace {

// The frame a push carries, in the key's cut (a whole-key push: one frame of the key).
FrameRef FrameOf(const proto::Envelope& e) {
  const uint64_t key_length = FrameKeyLength(e);
  const uint64_t cut = std::min(FrameSize(e), key_length);  // one frame: the key's length
  return FrameRef{e.offset(), e.length(), cut};
}

constexpr uint64_t kFrameSumIdBit = 1ull << 63;

}  // namespace

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
  if (e.sit_out()) {
    SitOut(request, state);
    return;
  }
  if (!e.compression().empty()) {
    if (std::string why = compression_.DecodePush(request); !why.empty()) {
      if (state.failure.empty()) FailKey(key, state, why);
      Reject(request, ErrorCode::kBadMessage, why);
      return;
    }
  }
  if (RefuseOutsider(request, state)) return;
  const FrameRef frame = FrameOf(e);
  PushVerdict verdict =
      state.Classify(rank, e.round(), frame, FrameKeyLength(e), static_cast<DataType>(e.dtype()),
                     e.tensor_hash(), *context_.num_workers);
  if (verdict != PushVerdict::kAccumulate) {
    Refuse(request, state, verdict, frame);
  } else if (!RefuseDisagreement(request, state, frame)) {
    Accumulate(request, state, frame);
  }
}

bool RoundProtocol::RefuseDisagreement(Request& request, KeyState& state, const FrameRef& frame) {
  const proto::Envelope& e = request.envelope();
  const ReduceOp op = static_cast<ReduceOp>(e.reduce_op());
  if (state.frames.empty()) {  // the round's first frame
    state.reduce_op = op;
    state.compression = e.compression();
    state.backup.eligible = context_.backup_workers > 0 && e.average() &&
                            IsFloatingPoint(state.dtype) && op == ReduceOp::kSum &&
                            state.compression.empty() && state.members.empty();
    if (state.backup.eligible || state.backup.sat_out.empty()) return false;
    FailKey(e.key(), state,
            StrCat(KeyName(e.key()), " round ", e.round(), ": a worker sat it out, but it "
                   "waits for every worker (only averaged, raw floating-point push_pulls of "
                   "every worker may close without some, with FERRY_BACKUP_WORKERS > 0)"));
    Refuse(request, state, PushVerdict::kFailed, frame);
    return true;
  }
  auto name = [](const std::string& c) { return c.empty() ? std::string("none") : c; };
  std::string why;
  if (op != state.reduce_op) {
    why = StrCat("workers disagree on how to combine ", KeyName(e.key()), " round ", e.round(),
                 ": worker ", request.rank, " asks for the ", ReduceOpName(op),
                 ", an earlier push of the round for the ", ReduceOpName(state.reduce_op),
                 "; every worker must reduce a tensor with the same op");
  } else if (e.compression() != state.compression) {
    why = StrCat("workers disagree on the compression of ", KeyName(e.key()), " round ",
                 e.round(), ": worker ", request.rank, " compresses it with ",
                 name(e.compression()), ", an earlier push of the round with ",
                 name(state.compression), "; set FERRY_COMPRESSION (and each tensor's "
                 "compression) alike on every worker");
  } else {
    return false;
  }
  FailKey(e.key(), state, why);
  Refuse(request, state, PushVerdict::kFailed, frame);
  return true;
}

void RoundProtocol::Refuse(Request& request, KeyState& state, PushVerdict verdict,
                           const FrameRef& frame) {
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
              << " offset " << frame.offset << " from worker " << request.rank;
      context_.reply(AckReply(request.reply_to(), key, frame.offset));
      return;
    case PushVerdict::kPrevious:
      if (IsProcessSetMember(state.backup.last_left_out, request.rank)) {
        LatePrevious(request, state, frame);  // late, not a resend: answered like one
      } else {
        counters.duplicates++;
      }
      Resend(request.reply_to(), key, state, frame.offset, frame.frame_bytes);
      MaybeCloseEarly(key, state);  // it may have held one up
      return;
    case PushVerdict::kBadFrame: {
      // The round can never be whole: every pusher is told why (the key fails).
      const std::string why = StrCat(
          "worker ", request.rank, " cuts round ", e.round(), " of ", KeyName(key), " in ",
          frame.frame_bytes, "-byte frames, but the round is cut in ", state.frame_bytes,
          "-byte frames (offset ", frame.offset, "); ",
          state.backup.eligible
              ? "with FERRY_BACKUP_WORKERS every worker must cut a key alike"
              : "cuts must nest (the larger a multiple of the smaller): set FERRY_FRAME_BYTES "
                "to sizes that divide each other");
      FailKey(key, state, why);
      Reject(request, ErrorCode::kMismatch, why);
      return;
    }
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

void RoundProtocol::Accumulate(Request& request, KeyState& state, const FrameRef& frame) {
  const uint64_t key = request.envelope().key();
  const int rank = request.rank;
  if (state.backup.Late(rank)) {
    Late(request, state, frame);
    return;
  }
  // Acknowledge first, every frame, the one completing the frame's sum too: the ack returns
  // the worker's credit, so it must not wait for the summation nor travel behind the sum.
  // (When the sum doubled as the last push's ack, credit 1 became stop-and-wait: 2.4x
  // LB1 with 1 MiB partitions, 2.8x with 4 MiB; docs/benchmarks.md.)
  context_.reply(AckReply(request.reply_to(), key, frame.offset));
  if (state.Recut(frame)) {
    AccumulateRecut(request, state, frame);
    return;
  }
  AddFrame(rank, request.reply_to(), key, state, frame, std::move(request.message.payload));
}

void RoundProtocol::AccumulateRecut(Request& request, KeyState& state, const FrameRef& frame) {
  const uint64_t key = request.envelope().key();
  const int rank = request.rank;
  const PendingReply& to = request.reply_to();
  Buffer& payload = request.message.payload;
  context_.counters->frames_recut++;
  const uint64_t grid = state.frame_bytes;
  uint32_t f = state.FrameIndex(frame.offset);
  if (frame.frame_bytes > grid) {  // coarser: a view of each grid frame it covers
    const uint32_t round = state.round;
    for (uint64_t at = 0; at < frame.length; ++f) {
      const uint64_t length = state.FrameLength(f);
      // The round cannot end (nor fail) before this rank's last grid frame of it is in.
      CHECK(state.round == round && !state.frames.empty() && state.failure.empty())
          << KeyName(key) << ": a round ended inside a recut frame";
      AddFrame(rank, to, key, state, FrameRef{state.FrameOffset(f), length, grid},
               payload.Slice(at, length));
      at += length;
    }
    return;
  }
  state.NotePusher(rank, to);  // finer: gathered until its grid frame is whole
  StagedFrame& staged = state.staged[{rank, f}];
  const uint64_t length = state.FrameLength(f);
  if (staged.bytes.empty()) staged.bytes = Buffer::Allocate(length);
  std::memcpy(staged.bytes.bytes() + (frame.offset - state.FrameOffset(f)), payload.data(),
              frame.length);
  staged.filled += frame.length;
  staged.pieces.push_back(frame.offset);
  if (staged.filled < length) return;
  Buffer whole = std::move(staged.bytes);
  state.staged.erase({rank, f});
  AddFrame(rank, to, key, state, FrameRef{state.FrameOffset(f), length, grid}, std::move(whole));
}

void RoundProtocol::AddFrame(int rank, const PendingReply& to, uint64_t key, KeyState& state,
                             const FrameRef& frame, Buffer payload) {
  const uint32_t f = state.Record(rank, to, frame);
  // A frame summing or sent has every worker recorded or joined, and joined workers'
  // pushes are refused before Classify: a push of it can only be a duplicate.
  CHECK(!state.frames[f].summing && !state.frames[f].sent)
      << KeyName(key) << ": a push accepted into a frame already summed";
  Summation& summation = *context_.summation;
  const uint64_t id = SumId(key, state, f);
  const uint64_t length = state.FrameLength(f);
  auto add = [&](Buffer push) {
    summation.Add(id, state.dtype, length, state.frames[f].sum, std::move(push), state.reduce_op);
  };
  if (deterministic_) {
    state.frames[f].held[rank] = std::move(payload);  // summed in its turn
  } else {
    add(std::move(payload));
  }
  context_.counters->bytes_summed += frame.length;
  if (deterministic_) {
    state.TakeInRankOrder(Absent(state), add, f);
    if (state.frames[f].next_rank <= rank) context_.counters->pushes_held++;  // waits
  }
  if (MaybeCloseEarly(key, state)) return;  // it completed every frame it could
  if (state.FrameComplete(f, Absent(state))) CompleteFrame(key, state, f);
}

const std::vector<bool>& RoundProtocol::Absent(KeyState& state) const {
  const std::vector<bool>& joined = *context_.joined;
  if (state.members.empty()) return joined;
  state.absent.assign(joined.size(), false);
  for (size_t r = 0; r < joined.size(); ++r) {
    state.absent[r] = joined[r] || !IsProcessSetMember(state.members, static_cast<int>(r));
  }
  return state.absent;
}

bool RoundProtocol::RefuseOutsider(Request& request, KeyState& state) {
  const proto::Envelope& e = request.envelope();
  if (!state.defined) {
    state.members = e.members();  // the first push defines the key's process set
  } else if (e.members() != state.members) {
    Reject(request, ErrorCode::kMismatch,
           StrCat("worker ", request.rank, " pushed ", KeyName(e.key()), " as a tensor of process "
                  "set {", ProcessSetRanks(e.members()), "}, but the key belongs to {",
                  ProcessSetRanks(state.members), "} (every member must add the same sets in "
                  "the same order)"));
    return true;
  }
  if (!e.members().empty() && !IsProcessSetMember(e.members(), request.rank)) {
    Reject(request, ErrorCode::kBadMessage,
           StrCat("worker ", request.rank, " pushed ", KeyName(e.key()), " of process set {",
                  ProcessSetRanks(e.members()), "}, which it is not a member of"));
    return true;
  }
  return false;
}

void RoundProtocol::Pull(const Request& request) {
  const proto::Envelope& e = request.envelope();
  const uint64_t key = e.key();
  auto it = keys_.find(key);
  PushVerdict verdict =
      it == keys_.end() ? PushVerdict::kStale : it->second.ClassifyPull(request.rank, e.round());
  switch (verdict) {
    case PushVerdict::kPrevious:
      Resend(request.reply_to(), key, it->second, 0, 0);
      return;
    case PushVerdict::kDuplicate:  // still waiting for other workers: say so again
      context_.reply(AckReply(request.reply_to(), key));
      ResendSent(request.reply_to(), key, it->second);
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
  for (auto& [key, state] : keys_) {
    const std::vector<bool>& joined = Absent(state);
    if (deterministic_ && state.defined && state.failure.empty()) {
      // A frame held for this rank's turn may go now. (A failed key holds nothing.)
      for (uint32_t f = 0; f < state.frames.size(); ++f) {
        const uint64_t id = SumId(key, state, f);
        const uint64_t length = state.FrameLength(f);
        KeyState& s = state;
        s.TakeInRankOrder(
            joined,
            [&](Buffer push) {
              context_.summation->Add(id, s.dtype, length, s.frames[f].sum, std::move(push),
                                      s.reduce_op);
            },
            f);
      }
    }
    CompleteFrames(key, state);
  }
}

void RoundProtocol::CompleteFrames(uint64_t key, KeyState& state) {
  if (MaybeCloseEarly(key, state)) return;  // a join may leave enough pushes to close it
  // SendFrame of the round's last frame moves the key on (frames empty): the loop ends.
  const uint32_t round = state.round;
  for (uint32_t f = 0; f < state.frames.size() && state.round == round; ++f) {
    if (state.FrameComplete(f, Absent(state))) CompleteFrame(key, state, f);
  }
}

void RoundProtocol::Restart(RestartCause cause) {
  for (auto& [key, state] : keys_) {
    // Only a worker pushing after its own JOIN leaves pushes waiting (a summing round
    // too: its pushers get the sum only once it arrived, and join only after that).
    if (!state.waiting.empty() && cause == RestartCause::kAllJoined) {
      FailKey(key, state, StrCat(KeyName(key), " had pushes waiting when every worker had joined"));
    }
    state.waiting.clear();
    ResetSums(key, state);                 // no open round may carry over into round 0
    state.Restart(*context_.num_workers);  // new generation: a sum still on its way is dropped
  }
  if (cause == RestartCause::kNewEpoch) compression_.Clear();  // residuals of the old workers
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

void RoundProtocol::RefuseOpenRounds(uint32_t tensor, const std::string& reason) {
  ForEachKeyOf(tensor, [&](uint64_t key, KeyState& state) {
    if (state.failure.empty() && !state.waiting.empty()) {
      FailKey(key, state, StrCat(KeyName(key), ": ", reason));
    }
  });
}

void RoundProtocol::Retire(uint32_t tensor, const std::string& reason) {
  RefuseOpenRounds(tensor, reason);
  EraseTensor(tensor, [this](uint64_t key, KeyState& state) {
    ResetSums(key, state);  // a sum on its way is dropped when it arrives
    compression_.Forget(key);
    // The device keeps nothing of it: the whole-key sum and every frame's sum.
    context_.summation->Forget(key);
    auto first = sum_ids_.lower_bound({key, 0, 0});
    auto last = first;
    for (; last != sum_ids_.end() && std::get<0>(last->first) == key; ++last) {
      context_.summation->Forget(last->second);
      frame_of_sum_.erase(last->second);
    }
    sum_ids_.erase(first, last);
  });
}

uint64_t RoundProtocol::SumId(uint64_t key, const KeyState& state, uint32_t f) {
  if (state.frames.size() <= 1) return key;
  auto [it, added] = sum_ids_.try_emplace({key, state.frame_bytes, f}, 0);
  if (added) {
    it->second = kFrameSumIdBit | next_sum_id_++;
    frame_of_sum_[it->second] = {key, f};
  }
  return it->second;
}

void RoundProtocol::ResetSums(uint64_t key, KeyState& state) {
  if (state.frames.empty()) {
    context_.summation->Reset(key);
    return;
  }
  for (uint32_t f = 0; f < state.frames.size(); ++f) {
    context_.summation->Reset(SumId(key, state, f));
  }
}

void RoundProtocol::CompleteFrame(uint64_t key, KeyState& state, uint32_t f) {
  if (context_.summation->Finish(SumId(key, state, f), state.generation, state.frames[f].sum)) {
    SendFrame(key, state, f);  // the sum is in the frame's sum now
    return;
  }
  // The sum comes to OnSumReady. Until then the frame stays open with every pusher
  // recorded: resent frames and RESEND_SUMs of it are acknowledged again.
  state.frames[f].summing = true;
  sums_in_flight_++;
}

void RoundProtocol::OnSumReady(uint64_t id, uint64_t generation, Buffer sum) {
  sums_in_flight_--;
  context_.counters->device_sums++;
  uint64_t key = id;
  uint32_t f = 0;
  if (id & kFrameSumIdBit) {
    auto frame = frame_of_sum_.find(id);
    if (frame == frame_of_sum_.end()) {  // its key was retired meanwhile
      context_.counters->device_sums_dropped++;
      return;
    }
    std::tie(key, f) = frame->second;
  }
  auto it = keys_.find(key);  // looked up, never held
  if (it == keys_.end() || it->second.generation != generation) {
    // The round was abandoned (the key failed or was retired, or every worker joined)
    // after Finish: nobody waits for this sum. Dropping it returns its pinned block to
    // the pool.
    context_.counters->device_sums_dropped++;
    return;
  }
  KeyState& state = it->second;
  // Only FailKey and Restart end a summing frame, and both change the generation.
  CHECK(f < state.frames.size() && state.frames[f].summing)
      << KeyName(key) << ": a sum arrived for a frame that is not summing";
  state.frames[f].summing = false;
  state.frames[f].sum = std::move(sum);
  SendFrame(key, state, f);
}

void RoundProtocol::SendFrame(uint64_t key, KeyState& state, uint32_t f) {
  FrameSum& frame = state.frames[f];
  if (!state.compression.empty()) {  // one compressed sum for every pusher, and resends
    frame.sum = compression_.CompressSum(key, state.round, state.compression, state.dtype,
                                         frame.sum);
  }
  for (const PendingReply& p : state.waiting) {
    context_.reply(Result(p, key, state, OpenRound(state), f, frame.sum, frame.count));
  }
  frame.sent = true;
  context_.counters->frames_completed++;
  if (++state.frames_sent < state.frames.size()) return;
  if (context_.backup_workers > 0) {  // streaks end (stragglers.h); nothing to do without
    for (size_t r = 0; r < state.pushed.size(); ++r) {
      if (state.pushed[r] && !state.backup.Late(static_cast<int>(r))) {
        context_.stragglers->NoteContributed(static_cast<int>(r));
      }
    }
  }
  state.NextRound(*context_.num_workers);
  context_.counters->rounds++;
}

RoundProtocol::RoundOf RoundProtocol::OpenRound(const KeyState& state) {
  return RoundOf{state.round, state.frame_bytes, state.frames.size(), state.compression,
                 state.backup.left_out};
}

RoundProtocol::RoundOf RoundProtocol::LastRound(const KeyState& state) {
  return RoundOf{state.round - 1, state.last_frame_bytes, state.last_sums.size(),
                 state.last_compression, state.backup.last_left_out};
}

Reply RoundProtocol::Result(const PendingReply& to, uint64_t key, const KeyState& state,
                            const RoundOf& round, uint32_t f, const Buffer& sum,
                            uint32_t contributors) const {
  Reply::Sum header{round.round, state.dtype, sum.size(), state.tensor_hash, contributors};
  if (round.frames > 1) {  // a frame: the wire's frame fields (a whole key leaves them 0)
    header.key_length = state.length;
    header.frame_bytes = round.frame_bytes;
  }
  Reply r = SumReply(Reply::Kind::kSum, to, key, header, sum);
  r.offset = round.frames > 1 ? f * round.frame_bytes : 0;
  if (!round.compression.empty()) {  // a compressed key: whole, never cut in frames
    r.compression = round.compression;
    r.raw_length = state.length;
  }
  r.left_out = round.left_out;
  return r;
}

void RoundProtocol::Resend(const PendingReply& to, uint64_t key, const KeyState& state,
                           uint64_t offset, uint64_t frame_bytes) {
  const uint64_t cut = state.last_frame_bytes;
  const size_t frames = state.last_sums.size();
  // A resent piece gets the grid frames it overlaps (cut alike: its own frame); a RESEND_SUM
  // (frame_bytes 0) every frame.
  const uint64_t end = frame_bytes == 0 ? UINT64_MAX : offset + frame_bytes;
  for (uint32_t f = 0; f < frames; ++f) {
    const uint64_t start = frames > 1 ? f * cut : 0;
    if (frames > 1 && (start + cut <= offset || start >= end)) continue;
    context_.counters->results_resent++;
    VLOG(1) << "sending the sum of " << KeyName(key) << " round " << state.round - 1
            << " frame " << f << " again for request " << to.request_id;
    context_.reply(Result(to, key, state, LastRound(state), f, state.last_sums[f],
                          state.last_contributors));
  }
}

void RoundProtocol::ResendSent(const PendingReply& to, uint64_t key, const KeyState& state) {
  for (uint32_t f = 0; f < state.frames.size(); ++f) {
    const FrameSum& frame = state.frames[f];
    if (!frame.sent) continue;
    context_.counters->results_resent++;
    context_.reply(Result(to, key, state, OpenRound(state), f, frame.sum, frame.count));
  }
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
  // A sum still on its way answers nobody now (OnSumReady drops it), and the device
  // keeps no open round for the key.
  ResetSums(key, state);
  state.frames.clear();
  state.staged.clear();
  state.frames_sent = 0;
  state.generation++;
}

}  // namespace ferry
