// RoundProtocol's backup workers (server/stragglers.h): closing a round without the last
// pushes, late pushes, and rounds sat out (round_protocol.h).

#include <glog/logging.h>

#include <algorithm>
#include <vector>

#include "common/types/process_set.h"
#include "common/util/clock.h"
#include "server/round_protocol.h"
#include "server/stragglers.h"

namespace ferry {

bool RoundProtocol::MaybeCloseEarly(uint64_t key, KeyState& state) {
  BackupRound& backup = state.backup;
  if (!backup.eligible || backup.closed || state.frames.empty()) return false;
  const std::vector<bool>& absent = Absent(state);
  int live = 0;
  int pushed = 0;  // contributors: pushed, not sitting out
  int sat_out = 0;
  for (size_t r = 0; r < state.pushed.size(); ++r) {
    if (r < absent.size() && absent[r]) continue;
    live++;
    if (backup.Late(static_cast<int>(r))) {
      sat_out++;
    } else if (state.pushed[r]) {
      pushed++;
    } else if (backup.LatePrevious(static_cast<int>(r))) {
      return false;  // the lag invariant (stragglers.h): wait for it while it is behind
    }
  }
  const int backups = std::min(context_.backup_workers, live - 1);
  const bool enough = backups > 0 && pushed >= live - backups;
  if (pushed == 0 || pushed == live || !(enough || pushed + sat_out == live)) return false;
  state.CloseEarly(absent, NowUs());
  CompleteFrames(key, state);
  return true;
}

void RoundProtocol::Late(Request& request, KeyState& state, const FrameRef& frame) {
  const uint64_t key = request.envelope().key();
  const int rank = request.rank;
  context_.reply(AckReply(request.reply_to(), key, frame.offset));  // its credit; bytes dropped
  if (state.pushed[static_cast<size_t>(rank)]) return;  // a later frame of it, or a resend
  state.pushed[static_cast<size_t>(rank)] = true;
  state.waiting.push_back(request.reply_to());
  context_.stragglers->NoteLate(rank, key, state.round,
                                (NowUs() - state.backup.closed_us) / 1000);
  ResendSent(request.reply_to(), key, state);  // the frames summed before it came
}

bool RoundProtocol::ForClosedRound(const Request& request) const {
  const proto::Envelope& e = request.envelope();
  const KeyState* state = Find(e.key());
  if (state == nullptr || !state->failure.empty()) return false;
  if (e.round() + 1 == state->round && state->has_last) return true;  // from last_sums
  return e.round() == state->round && state->backup.closed;  // late into the open round
}

void RoundProtocol::SitOut(Request& request, KeyState& state) {
  const proto::Envelope& e = request.envelope();
  const uint64_t key = e.key();
  const int rank = request.rank;
  const size_t r = static_cast<size_t>(rank);
  if (context_.backup_workers == 0 || !state.failure.empty() ||
      (!state.frames.empty() && !state.backup.eligible)) {
    Reject(request, ErrorCode::kBadMessage,
           state.failure.empty()
               ? StrCat("worker ", rank, " sat out round ", e.round(), " of ", KeyName(key),
                        ", which waits for every worker: only rounds of averaged, raw "
                        "floating-point push_pulls, with FERRY_BACKUP_WORKERS > 0, may be sat "
                        "out")
               : state.failure);
    return;
  }
  const PendingReply to = request.reply_to();
  // A key nobody pushed yet (a new layout's) is defined by its first push.
  if (state.pushed.empty()) state.pushed.assign(*context_.num_workers, false);
  if (e.round() == state.round) {
    context_.reply(AckReply(to, key, 0));
    if (state.pushed[r]) return;  // a resend
    state.pushed[r] = true;
    state.backup.sat_out.resize(state.pushed.size(), false);
    state.backup.sat_out[r] = true;
    state.waiting.push_back(to);
    context_.counters->sat_out++;
    ResendSent(to, key, state);  // the frames summed already
    if (EveryoneSatOut(state)) {
      FailKey(key, state, StrCat(KeyName(key), " round ", e.round(), ": every worker sat it out, "
                                 "so no gradient is there to average; a worker should sit a "
                                 "step out only after one whose every sum left it out"));
      return;
    }
    MaybeCloseEarly(key, state);
  } else if (e.round() + 1 == state.round && state.has_last) {
    if (state.backup.LatePrevious(rank)) state.backup.behind[r] = false;
    if (IsProcessSetMember(state.backup.last_left_out, rank)) context_.counters->sat_out++;
    Resend(to, key, state, 0, 0);
    MaybeCloseEarly(key, state);
  } else {
    Reject(request, ErrorCode::kBadMessage,
           StrCat("worker ", rank, " sat out round ", e.round(), " of ", KeyName(key),
                  " but the key is at round ", state.round));
  }
}

bool RoundProtocol::EveryoneSatOut(KeyState& state) const {
  const std::vector<bool>& absent = Absent(state);
  for (size_t r = 0; r < state.pushed.size(); ++r) {
    const bool away = r < absent.size() && absent[r];
    if (!away && !(r < state.backup.sat_out.size() && state.backup.sat_out[r])) return false;
  }
  return true;
}

void RoundProtocol::LatePrevious(Request& request, KeyState& state, const FrameRef& frame) {
  const int rank = request.rank;
  BackupRound& backup = state.backup;
  if (!backup.LatePrevious(rank)) return;  // every frame of it came already: a resend
  std::vector<bool>& got = backup.late_frames[static_cast<size_t>(rank)];
  if (got.empty()) {  // its first frame: the push is late
    got.assign(std::max<size_t>(1, state.last_sums.size()), false);
    context_.stragglers->NoteLate(rank, request.envelope().key(), state.round - 1,
                                  (NowUs() - backup.last_closed_us) / 1000);
  }
  const uint64_t cut = state.last_frame_bytes;
  const size_t f = cut == 0 || frame.frame_bytes != cut ? 0 : frame.offset / cut;
  if (f < got.size()) got[f] = true;
  // Behind until its last frame is in: the next round may close, and the key move on past
  // the sum those frames need, only then.
  if (frame.frame_bytes != cut || std::find(got.begin(), got.end(), false) == got.end()) {
    backup.behind[static_cast<size_t>(rank)] = false;
    got.clear();
  }
}

}  // namespace ferry
