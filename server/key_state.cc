#include "server/key_state.h"

#include <algorithm>

#include "common/transport/message.h"
#include "common/types/process_set.h"

namespace ferry {

int EngineForKey(uint64_t key, int engines) {
  uint64_t x = key;  // splitmix64's finalizer: every input bit moves every output bit
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<int>(x % static_cast<uint64_t>(engines));
}

bool KeyDefinition::Define(int rank, uint64_t push_length, DataType push_dtype,
                           uint64_t push_hash) {
  if (!defined) {
    defined = true;
    length = push_length;
    dtype = push_dtype;
    tensor_hash = push_hash;
    defined_by_rank = rank;
  }
  return push_length == length && push_dtype == dtype && push_hash == tensor_hash;
}

PushVerdict KeyState::Classify(int rank, uint32_t push_round, const FrameRef& frame,
                               uint64_t key_length, DataType push_dtype, uint64_t push_hash,
                               int num_workers) {
  if (!failure.empty()) return PushVerdict::kFailed;
  if (!defined && pushed.empty()) pushed.assign(num_workers, false);  // (a sit-out may size it)
  if (!Define(rank, key_length, push_dtype, push_hash)) return PushVerdict::kMismatch;
  if (push_round == round) {
    if (frames.empty()) return PushVerdict::kAccumulate;  // the round's first frame
    if (Recut(frame) && (backup.eligible || !CutsNest(frame.frame_bytes, frame_bytes, length))) {
      return PushVerdict::kBadFrame;
    }
    // A coarser frame is a duplicate when its first grid frame is; a finer one when its grid
    // frame is recorded or the piece is staged already.
    const uint32_t f = FrameIndex(frame.offset);
    if (f >= frames.size()) return PushVerdict::kBadFrame;
    if (frames[f].got[rank]) return PushVerdict::kDuplicate;
    auto s = staged.find({rank, f});
    if (s == staged.end()) return PushVerdict::kAccumulate;
    const std::vector<uint64_t>& in = s->second.pieces;
    return std::find(in.begin(), in.end(), frame.offset) != in.end() ? PushVerdict::kDuplicate
                                                                     : PushVerdict::kAccumulate;
  }
  if (push_round > round) return PushVerdict::kAhead;
  return push_round + 1 == round && has_last ? PushVerdict::kPrevious : PushVerdict::kStale;
}

PushVerdict KeyState::ClassifyPull(int rank, uint32_t pull_round) const {
  if (!failure.empty()) return PushVerdict::kFailed;
  const size_t r = static_cast<size_t>(rank);
  if (pull_round == round && r < pushed.size() && pushed[r]) return PushVerdict::kDuplicate;
  if (!defined) return PushVerdict::kStale;
  if (pull_round + 1 == round && has_last) return PushVerdict::kPrevious;
  return pull_round > round ? PushVerdict::kAhead : PushVerdict::kStale;
}

uint32_t KeyState::Record(int rank, const PendingReply& reply, const FrameRef& frame) {
  const size_t workers = pushed.size();
  if (frames.empty()) {  // the round's first frame fixes its cut
    frame_bytes = frame.frame_bytes;
    frames.resize(FrameCount(length, frame_bytes));
    for (FrameSum& f : frames) {
      f.got.assign(workers, false);
      f.held.assign(workers, Buffer());
    }
  }
  NotePusher(rank, reply);
  const uint32_t f = FrameIndex(frame.offset);
  frames[f].got[rank] = true;
  frames[f].count++;
  bytes_pushed += frame.length;
  return f;
}

void KeyState::NotePusher(int rank, const PendingReply& reply) {
  if (pushed[rank]) return;
  pushed[rank] = true;
  waiting.push_back(reply);
}

uint64_t KeyState::FrameLength(uint32_t f) const {
  if (frame_bytes == 0) return length;
  const uint64_t offset = FrameOffset(f);
  return offset >= length ? 0 : std::min(frame_bytes, length - offset);
}

bool KeyState::FrameComplete(uint32_t f, const std::vector<bool>& joined) const {
  if (waiting.empty() || f >= frames.size()) return false;
  const FrameSum& frame = frames[f];
  if (frame.summing || frame.sent) return false;
  for (size_t r = 0; r < frame.got.size(); ++r) {
    if (frame.got[r]) continue;
    if (backup.closed ? backup.contributed[r] : !(r < joined.size() && joined[r])) return false;
  }
  return true;
}

void KeyState::CloseEarly(const std::vector<bool>& absent, int64_t now_us) {
  backup.closed = true;
  backup.closed_us = now_us;
  backup.contributed = pushed;
  std::vector<int> left_out;
  for (size_t r = 0; r < pushed.size(); ++r) {
    if (r < backup.sat_out.size() && backup.sat_out[r]) backup.contributed[r] = false;
    if (!backup.contributed[r] && !(r < absent.size() && absent[r])) {
      left_out.push_back(static_cast<int>(r));
    }
  }
  backup.left_out = ProcessSetMask(left_out);
}

bool KeyState::Complete(const std::vector<bool>& joined) const {
  for (uint32_t f = 0; f < frames.size(); ++f) {
    if (FrameComplete(f, joined)) return true;
  }
  return false;
}

void KeyState::NextRound(int num_workers) {
  last_contributors = static_cast<uint32_t>(
      backup.closed ? std::count(backup.contributed.begin(), backup.contributed.end(), true)
                    : static_cast<std::ptrdiff_t>(waiting.size()));
  backup.behind.assign(num_workers, false);
  backup.late_frames.assign(num_workers, {});
  for (size_t r = 0; r < pushed.size() && r < backup.behind.size(); ++r) {
    backup.behind[r] = !pushed[r] && IsProcessSetMember(backup.left_out, static_cast<int>(r));
  }
  backup.last_left_out = backup.closed ? backup.left_out : std::string();
  backup.last_closed_us = backup.closed_us;
  backup.eligible = backup.closed = false;
  backup.contributed.clear();
  backup.sat_out.clear();
  backup.left_out.clear();
  // The old last_sums are freed once ZeroMQ released them.
  last_sums.clear();
  for (FrameSum& f : frames) last_sums.push_back(std::move(f.sum));
  last_frame_bytes = frame_bytes;
  last_compression = compression;
  frames.clear();
  staged.clear();
  frames_sent = 0;
  has_last = true;
  waiting.clear();
  pushed.assign(num_workers, false);
  round++;
  rounds_completed++;
}

void KeyState::Restart(int num_workers) {
  ++generation;
  round = 0;
  frames.clear();
  staged.clear();
  frames_sent = 0;
  pushed.assign(num_workers, false);
  has_last = false;
  last_sums.clear();
  last_contributors = 0;
  backup = BackupRound();
}

}  // namespace ferry
