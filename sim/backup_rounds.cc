#include "sim/backup_rounds.h"

#include <glog/logging.h>

#include <algorithm>

namespace ferry::sim {

BackupRounds::BackupRounds(int workers, int backups)
    : workers_(workers),
      backups_(std::min(backups, workers - 1)),
      late_pushes_(static_cast<size_t>(workers), 0) {
  CHECK_GE(backups_, 1) << "backup workers need at least 2 workers and b >= 1";
}

BackupRounds::Taken BackupRounds::Take(const SubPush& push, SimSender* from, int rank) {
  Key& k = keys_[push.key];
  if (k.open && push.round == k.round) {
    return push.sit_out ? SitOut(k, push, from, rank) : Current(k, push, from, rank);
  }
  if (k.has_last && push.round <= k.last_round) {
    return push.sit_out ? SitOutPrevious(k, push, rank) : Previous(k, push, rank);
  }
  // A worker pushes round r + 1 only with every sum of r back, and every frame of r went
  // out by then (the lag invariant keeps a late worker within one round).
  CHECK(!k.open) << "key " << push.key << ": worker " << rank << " pushed round " << push.round
                 << " while round " << k.round << " is open";
  Open(k, push);
  return push.sit_out ? SitOut(k, push, from, rank) : Current(k, push, from, rank);
}

void BackupRounds::Open(Key& k, const SubPush& push) {
  k.open = true;
  k.round = push.round;
  k.frames.assign(push.frames, Frame{});
  k.frames_sent = 0;
  k.pushed.assign(static_cast<size_t>(workers_), false);
  k.pushed_count = 0;
  k.sat_out.assign(static_cast<size_t>(workers_), false);
  k.sat_outs = 0;
  k.closed = false;
  k.contributors = 0;
  if (k.last_left_out.empty()) k.last_left_out.assign(static_cast<size_t>(workers_), LeftOut::kNo);
}

BackupRounds::Taken BackupRounds::Current(Key& k, const SubPush& push, SimSender* from, int rank) {
  if (k.closed && !k.contributed[static_cast<size_t>(rank)]) return Late(k, push, from, rank);
  Frame& f = k.frames.at(push.frame);
  Taken t;
  t.added = true;
  t.adopted = f.summed == 0;
  f.bytes = push.bytes;
  f.summed++;
  f.to.push_back(Reply{from, push.cookie, false});
  if (!k.pushed[static_cast<size_t>(rank)]) {
    k.pushed[static_cast<size_t>(rank)] = true;
    k.pushed_count++;
  }
  const bool was_closed = k.closed;
  MaybeClose(k, &t.complete);
  if (!was_closed && k.closed) return t;  // closing completed every frame it could
  if (!f.complete && f.summed == (k.closed ? k.contributors : workers_)) {
    f.complete = true;
    t.complete.push_back(push.frame);
  }
  return t;
}

BackupRounds::Taken BackupRounds::Late(Key& k, const SubPush& push, SimSender* from, int rank) {
  // Dropped, never added (its bytes crossed the links all the same); the first frame of it
  // gets every frame already sent, and the worker is answered with the others as they go.
  Taken t;
  if (k.pushed[static_cast<size_t>(rank)]) return t;  // a later frame of it
  k.pushed[static_cast<size_t>(rank)] = true;
  late_pushes_[static_cast<size_t>(rank)]++;
  for (uint32_t i = 0; i < k.frames.size(); ++i) {
    Frame& f = k.frames[i];
    if (f.sent) {
      t.answers.push_back(Answer{i, f.bytes, false, true});
    } else {
      f.to.push_back(Reply{from, push.cookie, true});
    }
  }
  return t;
}

BackupRounds::Taken BackupRounds::Previous(Key& k, const SubPush& push, int rank) {
  // The key moved on: answered from the last round's sum, this frame of it.
  Taken t;
  if (push.round != k.last_round) {  // a later frame of a round answered long ago
    t.answers.push_back(Answer{push.frame, push.bytes, true, true});
    return t;
  }
  LeftOut& left = k.last_left_out[static_cast<size_t>(rank)];
  CHECK(left != LeftOut::kNo) << "key " << push.key << ": worker " << rank << " pushed round "
                              << push.round << " twice";
  t.answers.push_back(Answer{push.frame, push.bytes, left == LeftOut::kAnswered, true});
  if (left == LeftOut::kBehind) {  // each frame answered as it comes
    uint32_t& in = k.resent[static_cast<size_t>(rank)];
    if (in++ == 0) late_pushes_[static_cast<size_t>(rank)]++;
    // Behind until its last frame is in: were the open round to close and go out before
    // that, the key would move on, and the sum of its frames still to come with it.
    if (in == push.frames) {
      left = LeftOut::kResent;
      k.behind--;
      if (k.open) MaybeClose(k, &t.complete);  // it may have held the open round up
    }
  }
  return t;
}

BackupRounds::Taken BackupRounds::SitOut(Key& k, const SubPush& push, SimSender* from, int rank) {
  // Not waited for: every frame's sum, those sent already at once, the others as they go.
  const size_t r = static_cast<size_t>(rank);
  CHECK(!k.pushed[r]) << "key " << push.key << ": worker " << rank << " sat out round "
                      << push.round << " after pushing it";
  k.pushed[r] = true;
  k.pushed_count++;
  k.sat_out[r] = true;
  k.sat_outs++;
  if (k.sat_outs == workers_ && !starved_) starved_.emplace(push.key, push.round);
  Taken t;
  for (uint32_t i = 0; i < k.frames.size(); ++i) {
    Frame& f = k.frames[i];
    if (f.sent) {
      t.answers.push_back(Answer{i, f.bytes, false, false});
    } else {
      f.to.push_back(Reply{from, push.cookie, false});
    }
  }
  MaybeClose(k, &t.complete);  // it may have been the last one the round waited for
  return t;
}

BackupRounds::Taken BackupRounds::SitOutPrevious(Key& k, const SubPush& push, int rank) {
  // The key moved on without it (it was left out, and behind): every frame of the last
  // round's sum at once, and the round it held up may close.
  LeftOut& left = k.last_left_out[static_cast<size_t>(rank)];
  CHECK(push.round == k.last_round && left == LeftOut::kBehind &&
        k.resent[static_cast<size_t>(rank)] == 0)
      << "key " << push.key << ": worker " << rank << " sat out round " << push.round
      << ", but the key is at round " << (k.open ? k.round : k.last_round + 1);
  Taken t;
  for (uint32_t i = 0; i < k.last_bytes.size(); ++i) {
    t.answers.push_back(Answer{i, k.last_bytes[i], false, false});
  }
  left = LeftOut::kAnswered;
  k.behind--;
  if (k.open) MaybeClose(k, &t.complete);
  return t;
}

void BackupRounds::MaybeClose(Key& k, std::vector<uint32_t>* complete) {
  // As RoundProtocol::MaybeCloseEarly: `workers - b` contributors, or every worker in,
  // some sitting out; never while a worker is behind (the lag invariant).
  const int contributors = k.pushed_count - k.sat_outs;
  if (k.closed || k.behind > 0 || contributors == 0 || contributors == workers_ ||
      (contributors < workers_ - backups_ && k.pushed_count < workers_)) {
    return;
  }
  k.closed = true;
  k.contributed = k.pushed;
  for (size_t r = 0; r < k.contributed.size(); ++r) {
    if (k.sat_out[r]) k.contributed[r] = false;
  }
  k.contributors = contributors;
  for (uint32_t i = 0; i < k.frames.size(); ++i) {
    Frame& f = k.frames[i];
    if (!f.complete && f.summed == k.contributors) {
      f.complete = true;
      complete->push_back(i);
    }
  }
}

std::vector<BackupRounds::Reply> BackupRounds::Send(uint64_t key, uint32_t frame, uint64_t* bytes) {
  Key& k = keys_.at(key);
  Frame& f = k.frames.at(frame);
  CHECK(f.complete && !f.sent) << "key " << key << " frame " << frame << " sent twice";
  f.sent = true;
  *bytes = f.bytes;
  std::vector<Reply> to = std::move(f.to);
  f.to.clear();
  if (++k.frames_sent == k.frames.size()) NextRound(k);
  return to;
}

void BackupRounds::NextRound(Key& k) {
  // Whom this round left out: behind until it pushes it (the lag invariant), or answered
  // already if it pushed while the round was open.
  k.behind = 0;
  k.resent.assign(k.pushed.size(), 0);
  for (size_t r = 0; r < k.pushed.size(); ++r) {
    LeftOut& left = k.last_left_out[r];
    left = LeftOut::kNo;
    if (!k.closed || k.contributed[r]) continue;
    left = k.pushed[r] ? LeftOut::kAnswered : LeftOut::kBehind;
    if (left == LeftOut::kBehind) k.behind++;
  }
  k.last_bytes.resize(k.frames.size());
  for (size_t i = 0; i < k.frames.size(); ++i) k.last_bytes[i] = k.frames[i].bytes;
  k.has_last = true;
  k.last_round = k.round;
  k.open = false;
}

}  // namespace ferry::sim
