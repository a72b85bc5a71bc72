#include "sim/sim_sender.h"

#include <glog/logging.h>

#include <algorithm>
#include <limits>

#include "common/transport/fused_push.h"
#include "common/util/strings.h"
#include "worker/partition_scheduling/policies.h"

namespace ferry::sim {
namespace {

constexpr int64_t kNoTimer = std::numeric_limits<int64_t>::max();
// ScheduledQueue's least wait on the policy's timer, which bounds a spin on a passed one.
constexpr SimTime kPassedTimerUs = 100;

}  // namespace

SimSender::SimSender(SimJob& job, int rank, std::vector<SimServer*> servers)
    : job_(job),
      rank_(rank),
      servers_(std::move(servers)),
      frame_bytes_(static_cast<uint64_t>(job.config.transport.frame_bytes)) {
  const Config::Scheduling& c = job_.config.scheduling;
  const int64_t partition = c.InitialPartitionBytes();
  core_ = std::make_unique<SchedulingCore>(MakePolicy(PolicyOptionsOf(c)),
                                           static_cast<uint64_t>(c.CreditBytesFor(partition)));
  // As SchedulingControl: the estimator samples under every policy; the credit follows it
  // only under `credit` with FERRY_WINDOW=bdp.
  core_->UseWindow(WindowOptions{c.window_gain, static_cast<uint64_t>(c.window_min_bytes),
                                 static_cast<uint64_t>(c.window_max_bytes),
                                 static_cast<uint64_t>(c.CreditBytesFor(partition))});
  if (!(c.window_bdp && CreditLike(c.policy))) {
    core_->SetCredit(static_cast<uint64_t>(c.CreditBytesFor(partition)));
  }
}

void SimSender::Push(uint32_t layer, const std::vector<SimPart>& parts, int priority,
                     int iteration, bool sit_out) {
  const SimTime now = job_.events.now();
  for (const SimPart& p : parts) {
    Task t;
    t.layer = layer;
    t.part = &p;
    t.sit_out = sit_out;
    t.task.priority = priority;
    t.task.bytes = p.wire_bytes;  // the credit counts wire bytes
    t.task.server = p.server;
    t.record.iteration = iteration;
    t.record.layer = static_cast<int>(layer);
    t.record.server = p.server;
    t.record.bytes = p.bytes;
    t.record.ready_us = now;
    const uint64_t cookie = AddTask(std::move(t));
    core_->Push(FindTask(cookie)->task, static_cast<int64_t>(now));
  }
  Pump();
}

void SimSender::Pump() {
  const SimTime now = job_.events.now();
  Batch batch;
  while (core_->TryNext(static_cast<int64_t>(now), &batch)) {
    SendBatch(batch);
    batch = Batch();
  }
  const int64_t wake = core_->WakeAtUs();
  if (wake != kNoTimer) {
    // A timer that has passed handed nothing out now (the loop above ran): as the worker's
    // ScheduledQueue, try again kPassedTimerUs on instead of spinning at this instant (a
    // profiled policy's prediction can end in the past and stay there until a partition is
    // ready: a pipeline stage's push_pulls between its iterations).
    const SimTime at =
        static_cast<SimTime>(wake) > now ? static_cast<SimTime>(wake) : now + kPassedTimerUs;
    if (timer_at_ < now || at < timer_at_) {
      timer_at_ = at;
      job_.events.At(at, [this, at] {
        if (timer_at_ == at) timer_at_ = -1;
        Pump();
      });
    }
  }
}

void SimSender::SendBatch(const Batch& batch) {
  // Packs per server, in batch order (DensePushPull::SendBatch): a pack is full at
  // fuse_bytes or kMaxFusedPushes; frames go alone.
  struct Pack {
    int server;
    uint64_t bytes = 0;
    std::vector<SubPush> pushes;
  };
  std::vector<Pack> packs;
  std::vector<size_t>& open = open_packs_;  // by server: index + 1 of its open pack
  for (const PushTask& handed : batch.tasks) {
    Task& t = *FindTask(handed.cookie);
    t.task = handed;
    t.record.sent_us = job_.events.now();
    const uint64_t bytes = t.part->bytes;
    if (t.sit_out) {  // alone, header only, of the whole key; its sum comes in its frames
      const bool cut = frame_bytes_ > 0 && bytes > frame_bytes_;
      t.frame_bytes = cut ? frame_bytes_ : 0;
      t.frames = cut ? static_cast<uint32_t>((bytes + frame_bytes_ - 1) / frame_bytes_) : 1;
      if (cut) t.acked.assign(t.frames, false);
      SubPush push{handed.cookie, t.part->key, 0, t.frames, 0, handed.priority};
      push.round = static_cast<uint32_t>(t.record.iteration);
      push.sit_out = true;
      packs.push_back(Pack{handed.server, 0, {push}});
      continue;
    }
    if (t.part->compressed()) {  // whole and alone, once this worker compressed it
      Compressed(t, handed);
      continue;
    }
    const uint64_t frame_bytes = FrameBytesOf(t);
    const bool cut = frame_bytes > 0 && bytes > frame_bytes;
    t.frame_bytes = cut ? frame_bytes : 0;
    t.frames = cut ? static_cast<uint32_t>((bytes + frame_bytes - 1) / frame_bytes) : 1;
    if (cut) t.acked.assign(t.frames, false);  // a whole one needs none (frames_acked)
    t.summed_bytes.assign(t.frames, 0);
    if (cut) {
      for (uint32_t i = 0; i < t.frames; ++i) {
        const uint64_t length = std::min(frame_bytes, bytes - i * frame_bytes);
        packs.push_back(Pack{handed.server, length, {}});
        packs.back().pushes.push_back(
            SubPush{handed.cookie, t.part->key, i, t.frames, length, handed.priority});
        packs.back().pushes.back().round = static_cast<uint32_t>(t.record.iteration);
        packs.back().pushes.back().cut = frame_bytes;
        packs.back().pushes.back().key_bytes = bytes;
      }
      continue;
    }
    if (open.size() <= static_cast<size_t>(handed.server)) open.resize(handed.server + 1, 0);
    size_t& slot = open[handed.server];
    if (slot == 0 || batch.fuse_bytes == 0 || packs[slot - 1].bytes + bytes > batch.fuse_bytes ||
        packs[slot - 1].pushes.size() >= kMaxFusedPushes) {
      packs.push_back(Pack{handed.server, 0, {}});
      slot = packs.size();
    }
    packs[slot - 1].bytes += bytes;
    packs[slot - 1].pushes.push_back(
        SubPush{handed.cookie, t.part->key, 0, 1, bytes, handed.priority});
    packs[slot - 1].pushes.back().round = static_cast<uint32_t>(t.record.iteration);
    packs[slot - 1].pushes.back().key_bytes = bytes;
  }
  for (Pack& pack : packs) {
    if (static_cast<size_t>(pack.server) < open.size()) open[pack.server] = 0;  // all 0 again
    if (pack.pushes.size() > 1) {
      for (const SubPush& p : pack.pushes) FindTask(p.cookie)->fused = true;
    }
    SimServer* server = servers_.at(pack.server);
    const int priority = pack.pushes.front().priority;
    job_.fabric->SendData(
        node(), job_.ServerNode(pack.server), pack.bytes, priority, DataKind::kPush,
        [this, server, pushes = std::move(pack.pushes)] { server->OnPushes(*this, pushes); });
  }
}

uint64_t SimSender::FrameBytesOf(const Task& t) const {
  const auto server = static_cast<size_t>(t.part->server);
  uint64_t frame = server < link_pieces_.size() ? link_pieces_[server] : frame_bytes_;
  const uint64_t layer = t.layer < layer_pieces_.size() ? layer_pieces_[t.layer] : 0;
  if (layer > 0) frame = frame == 0 ? layer : std::min(frame, layer);
  return frame;
}

void SimSender::Compressed(const Task& t, const PushTask& handed) {
  // One thread compresses (under the worker's lock): a partition waits for the ones
  // before it.
  const SimTime now = job_.events.now();
  compress_until_ =
      std::max(compress_until_, now) + static_cast<double>(t.part->bytes) / job_.codec.compress;
  SimServer* server = servers_.at(handed.server);
  std::vector<SubPush> push = {SubPush{handed.cookie, t.part->key, 0, 1, t.part->wire_bytes,
                                       handed.priority, t.part->bytes,
                                       static_cast<uint32_t>(t.record.iteration)}};
  job_.events.At(compress_until_, [this, server, handed, push = std::move(push)] {
    job_.fabric->SendData(node(), job_.ServerNode(handed.server), push.front().bytes,
                          handed.priority, DataKind::kPush,
                          [this, server, push] { server->OnPushes(*this, push); });
  });
}

void SimSender::OnAck(uint64_t cookie, uint32_t frame, SimTime sent) {
  ack_delays_us_.push_back(job_.events.now() - sent);
  Task* t = FindTask(cookie);
  if (!t) return;  // its sum came first and finished it
  if (t->sit_out) {
    // Header only: nothing of it is on the way, so none of its credit waits for its sums.
    // (Were the frames after the first to wait for theirs, a worker's credit could fill
    // with sit-outs of rounds that wait for its sit-outs queued behind them.)
    for (uint32_t f = 0; f < t->frames; ++f) Acked(*t, f);
  } else {
    Acked(*t, frame);
  }
  Pump();
}

void SimSender::Acked(Task& t, uint32_t frame) {
  if (t.frames == 1 ? t.frames_acked > 0 : t.acked[frame]) return;
  if (t.frames > 1) t.acked[frame] = true;
  t.frames_acked++;
  const int64_t now = static_cast<int64_t>(job_.events.now());
  const uint64_t length =
      t.frames > 1 ? std::min(t.frame_bytes, t.part->bytes - frame * t.frame_bytes) : t.part->bytes;
  if (!t.fused && !t.sit_out) {  // the path's rate, as DensePushPull::NoteFrameAcked
    link_rates_.OnAck(t.part->server, length, static_cast<int64_t>(t.record.sent_us), now);
  }
  if (t.frames_acked < t.frames) {
    core_->ReturnPart(t.task, length, now);
  } else {
    t.record.acked_us = job_.events.now();
    core_->Done(t.task, /*acked=*/true, now);
  }
}

SimSender::StepSums SimSender::TakeStepSums() {
  const StepSums sums = step_sums_;
  step_sums_ = StepSums();
  late_layers_.assign(late_layers_.size(), false);
  return sums;
}

void SimSender::OnSum(uint64_t cookie, uint32_t frame, bool late) {
  Task* found = FindTask(cookie);
  CHECK(found) << "worker " << rank_ << ": a sum for no task";
  Task& t = *found;
  t.late = t.late || late;
  Acked(t, frame);  // a frame's sum counts as its acknowledgement
  if (++t.frames_summed < t.frames) {
    Pump();
    return;
  }
  step_sums_.parts++;
  if (t.late) {
    step_sums_.late_parts++;
    if (late_layers_.size() <= t.layer) late_layers_.resize(t.layer + 1, false);
    if (!late_layers_[t.layer]) step_sums_.late_layers++;
    late_layers_[t.layer] = true;
  }
  const uint32_t layer = t.layer;
  if (record_parts_) {
    t.record.result_us = job_.events.now();
    parts_log_.push_back(t.record);
  }
  EraseTask(cookie);
  Pump();
  if (part_summed_) part_summed_(layer);
}

void SimSender::OnSumRange(uint64_t cookie, uint64_t offset, uint64_t length) {
  Task* t = FindTask(cookie);
  CHECK(t) << "worker " << rank_ << ": a sum for no task";
  const uint64_t cut = t->frames > 1 ? t->frame_bytes : t->part->bytes;
  std::vector<uint32_t> complete;
  for (uint64_t f = offset / cut; f < t->frames && f * cut < offset + length; ++f) {
    const uint64_t begin = f * cut;
    const uint64_t end = std::min(begin + cut, t->part->bytes);
    t->summed_bytes[f] += std::min(end, offset + length) - std::max(begin, offset);
    CHECK_LE(t->summed_bytes[f], end - begin) << "worker " << rank_ << ": a sum twice";
    if (t->summed_bytes[f] == end - begin) complete.push_back(static_cast<uint32_t>(f));
  }
  // OnSum may finish the task (its last frame) and start others: by cookie each time.
  for (uint32_t f : complete) OnSum(cookie, f);
}

uint64_t SimSender::AddTask(Task t) {
  uint32_t slot;
  if (free_slots_.empty()) {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
    generation_.push_back(0);
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  const uint64_t cookie = (static_cast<uint64_t>(++generation_[slot]) << 32) | slot;
  t.task.cookie = cookie;
  slots_[slot] = std::move(t);
  live_tasks_++;
  return cookie;
}

SimSender::Task* SimSender::FindTask(uint64_t cookie) {
  const uint32_t slot = static_cast<uint32_t>(cookie);
  if (slot >= slots_.size() || generation_[slot] != static_cast<uint32_t>(cookie >> 32)) {
    return nullptr;
  }
  return &slots_[slot];
}

void SimSender::EraseTask(uint64_t cookie) {
  const uint32_t slot = static_cast<uint32_t>(cookie);
  generation_[slot]++;  // odd generations are live, even ones free
  free_slots_.push_back(slot);
  live_tasks_--;
}

std::string SimSender::Describe() const {
  return StrCat(live_tasks_, " partitions without a sum, ", core_->queued(), " queued, ",
                core_->in_flight(), " in flight");
}

}  // namespace ferry::sim
