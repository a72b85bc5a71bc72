#include "worker/dense_push_pull.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstring>

#include "common/transport/fused_push.h"
#include "common/types/process_set.h"
#include "common/util/clock.h"
#include "common/util/logging.h"
#include "common/util/status.h"

namespace ferry {

namespace {

// PUSH messages for one server, to go as one message: fused if more than one.
struct Pack {
  int server = 0;
  uint64_t bytes = 0;
  std::vector<Message> pushes;
};

}  // namespace

DensePushPull::DensePushPull(WorkerContext& ctx, ScheduledQueue& queue)
    : ctx_(ctx),
      queue_(queue),
      in_flight_(ctx.config.transport.resend_timeout_ms),
      compression_(ctx.counters) {}

void DensePushPull::Start(const std::shared_ptr<Operation>& op) {
  ctx_.mu.AssertHeld();
  const Cut& cut = op->tensor->cuts[op->layout];
  op->replies_left = static_cast<int>(cut.parts.size());
  const int64_t now = NowUs();
  ctx_.counters.urgency.Observe(op->priority, cut.parts.size());
  for (uint32_t i = 0; i < cut.parts.size(); ++i) {
    if (op->released.empty() || op->released[i]) Enqueue(op, i, now);  // else: at ReleasePart
  }
}

void DensePushPull::Enqueue(const std::shared_ptr<Operation>& op, uint32_t part, int64_t now_us) {
  const PartitionSpec& p = op->tensor->cuts[op->layout].parts[part];
  InFlight f;
  f.op = op;
  f.part = part;
  f.task = PushTask{op->priority, 0, PushCompression::WireBytes(*op, p), p.server, next_cookie_++,
                    {}};
  f.ready_us = now_us;
  if (ctx_.config.scheduling.decompose_per_layer) {
    ctx_.layer_times.OnReady(op->tensor->id, op->tensor->bytes, now_us);
  }
  queued_[f.task.cookie] = f;
  queue_.Push(f.task, /*notify=*/false);  // the thread that queued it sends (SendReady)
}

void DensePushPull::ReleasePart(const std::shared_ptr<Operation>& op, uint32_t part) {
  ctx_.mu.AssertHeld();
  if (part >= op->released.size() || op->released[part]) return;
  op->released[part] = true;
  op->releases_pending--;
  if (op->started && !op->done) Enqueue(op, part, NowUs());
}

const PartitionSpec& DensePushPull::PartOf(const InFlight& f) const {
  return f.op->tensor->cuts[f.op->layout].parts[f.part];
}

uint64_t DensePushPull::KeyOf(const InFlight& f) const {
  return MakeLayoutKey(f.op->tensor->id, f.op->layout, PartOf(f).index);
}

int DensePushPull::SendReady() {
  MutexLock lock(send_mu_);
  int sent = 0;
  Batch batch;
  while (queue_.TryNext(&batch)) {
    SendBatch(batch);
    sent++;
  }
  return sent;
}

void DensePushPull::SendBatch(const Batch& batch) {
  // Packs per server, in batch order; a pack is full at fuse_bytes or kMaxFusedPushes.
  std::vector<Pack> packs;
  std::vector<size_t> open;  // by server rank: index in packs + 1 of its open pack; 0 none
  std::vector<Handle> held;  // operations whose inputs a fused copy reads
  MutexLock lock(ctx_.mu);
  const int64_t now_us = NowUs();
  for (const PushTask& task : batch.tasks) {
    auto it = queued_.find(task.cookie);
    CHECK(it != queued_.end()) << "task without a partition";
    InFlight f = std::move(it->second);
    queued_.erase(it);
    if (f.op->done) {  // failed while queued: never sent
      queue_.Done(task, /*acked=*/false, /*notify=*/false);  // SendReady's loop goes on
      continue;
    }
    f.task = task;  // as handed out: its window sample comes back with its credit
    const uint64_t request = ctx_.next_request++;
    f.round = f.op->tensor->cuts[f.op->layout].rounds[f.part]++;
    f.sent_us = now_us;
    CutFrames(f);
    const bool borrowed = PartOf(f).bytes > 0;
    ctx_.counters.partitions_pushed++;
    if (f.op->sit_out) {  // alone, header only; no payload to release: its timer runs now
      packs.push_back(Pack{task.server, 0, {}});
      packs.back().pushes.push_back(BuildPush(f, request));
      in_flight_.Add(request, std::move(f), /*borrowed=*/false);
      continue;
    }
    if (PushCompression::Compressed(*f.op, PartOf(f))) {  // alone, as its compressed bytes
      f.wire = compression_.Compress(*f.op, PartOf(f), KeyOf(f), f.round, ctx_.rank);
      Message push = BuildPush(f, request);
      packs.push_back(Pack{task.server, push.payload.size(), {}});
      packs.back().pushes.push_back(std::move(push));
      f.unreleased = 1;
      in_flight_.Add(request, std::move(f), borrowed);
      continue;
    }
    if (f.frames > 1) {
      ctx_.counters.frames_pushed += f.frames;  // frames go alone, each its own message
      for (uint32_t i = 0; i < f.frames; ++i) {
        Message frame = BuildPush(f, request, i);
        const uint64_t bytes = frame.payload.size();
        packs.push_back(Pack{task.server, bytes, {}});
        packs.back().pushes.push_back(std::move(frame));
      }
      f.unreleased = f.frames;
      in_flight_.Add(request, std::move(f), borrowed);
      continue;
    }
    if (open.size() <= static_cast<size_t>(task.server)) open.resize(task.server + 1, 0);
    size_t& slot = open[task.server];
    if (slot == 0 || batch.fuse_bytes == 0 ||
        packs[slot - 1].bytes + task.bytes > batch.fuse_bytes ||
        packs[slot - 1].pushes.size() >= kMaxFusedPushes) {
      packs.push_back(Pack{task.server, 0, {}});
      slot = packs.size();
    }
    packs[slot - 1].bytes += task.bytes;
    packs[slot - 1].pushes.push_back(BuildPush(f, request));
    f.unreleased = 1;
    in_flight_.Add(request, std::move(f), borrowed);
  }
  for (const Pack& pack : packs) {
    if (pack.pushes.size() < 2) continue;
    for (const Message& m : pack.pushes) {
      InFlight* f = in_flight_.Find(m.envelope.request_id());
      f->fused = true;
      // A fused pack is copied outside the lock: a failed operation's Wait() returns
      // only once its holds are gone, so a caller never frees an input we read.
      ctx_.table.Hold(f->op->handle);
      held.push_back(f->op->handle);
    }
  }
  lock.Unlock();
  for (Pack& pack : packs) {
    ctx_.counters.bytes_pushed += pack.bytes;
    ctx_.counters.servers.AddSent(pack.server, pack.bytes);
    if (pack.pushes.size() == 1) {
      ctx_.van.Send(ServerId(pack.server), std::move(pack.pushes.front()));
      continue;
    }
    std::vector<const Message*> parts;
    std::vector<uint64_t> requests;
    for (const Message& m : pack.pushes) {
      parts.push_back(&m);
      requests.push_back(m.envelope.request_id());
    }
    Message fused = MakeFusedPush(ctx_.my_id, parts);
    if (!fused.payload.empty()) {
      // The parts' resend timers start once ZeroMQ let go of the fused copy.
      Buffer copy = fused.payload;
      fused.payload = Buffer::Borrow(copy.data(), copy.size(), [this, copy, requests] {
        NoteRelease(Release{nullptr, 0, requests});
      });
    }
    ctx_.counters.fused_messages++;
    ctx_.counters.partitions_fused += pack.pushes.size();
    pack.pushes.clear();  // releases the borrowed inputs (their hooks note it)
    ctx_.van.Send(ServerId(pack.server), std::move(fused));
  }
  for (Handle h : held) ctx_.table.Unhold(h);
}

void DensePushPull::CutFrames(InFlight& f) const {
  const PartitionSpec& p = PartOf(f);
  const uint64_t bytes = p.bytes;
  const size_t server = static_cast<size_t>(p.server);  // per link; none: one size for all
  uint64_t frame = server < ctx_.link_frame_bytes.size() ? ctx_.link_frame_bytes[server]
                                                         : ctx_.frame_bytes;
  auto layer = ctx_.layer_frame_bytes.find(f.op->tensor->id);  // FERRY_DECOMPOSE=per-layer
  if (layer != ctx_.layer_frame_bytes.end()) {
    frame = frame == 0 ? layer->second : std::min(frame, layer->second);
  }
  const bool cut = frame > 0 && !ctx_.config.server.async && bytes > frame &&
                   !PushCompression::Compressed(*f.op, PartOf(f));
  f.frame_bytes = cut ? frame : 0;
  f.frames = FrameCount(bytes, f.frame_bytes);
  f.frame_acked.assign(f.frames, false);
  f.frame_summed_bytes.assign(f.frames, 0);
  f.sum_cut = 0;
  f.sum_got.clear();
  f.frames_acked = f.frames_summed = 0;
}

uint64_t DensePushPull::FrameLength(const InFlight& f, uint32_t frame) const {
  const uint64_t bytes = PartOf(f).bytes;
  return f.frames > 1 ? std::min<uint64_t>(f.frame_bytes, bytes - frame * f.frame_bytes) : bytes;
}

Message DensePushPull::BuildPush(const InFlight& f, uint64_t request, uint32_t frame) {
  const TensorInfo& t = *f.op->tensor;
  const PartitionSpec& p = PartOf(f);
  const uint64_t offset = frame * f.frame_bytes;
  const uint64_t length = FrameLength(f, frame);
  Message m = ctx_.NewMessage(proto::PUSH);
  m.envelope.set_request_id(request);
  m.envelope.set_key(KeyOf(f));
  m.envelope.set_round(f.round);
  m.envelope.set_dtype(static_cast<proto::DataTypeProto>(t.dtype));
  m.envelope.set_length(length);
  m.envelope.set_priority(f.op->priority);
  m.envelope.set_tensor_hash(t.hash);
  m.envelope.set_reduce_op(static_cast<proto::ReduceOpProto>(f.op->reduce));
  if (!t.members.empty()) m.envelope.set_members(t.members);
  m.envelope.set_async_mode(ctx_.config.server.async);
  m.envelope.set_backup_workers(static_cast<uint32_t>(ctx_.config.server.backup_workers));
  m.envelope.set_average(f.op->average);
  if (f.op->sit_out) {  // header only (of the whole key): the round's sum, no contribution
    m.envelope.set_sit_out(true);
    m.envelope.set_length(0);
    return m;
  }
  if (f.frames > 1) {
    SetFrame(&m.envelope, offset, p.bytes, f.frame_bytes);
  }
  if (!f.wire.empty()) {  // compressed: the round's bytes, the same for every resend
    PushCompression::Label(*f.op, p, &m);
    m.envelope.set_length(f.wire.size());
    std::shared_ptr<Operation> op = f.op;
    op->releases_left++;
    ctx_.counters.payloads_lent++;
    m.payload = Buffer::Borrow(f.wire.data(), f.wire.size(), [this, op, request, wire = f.wire] {
      ctx_.counters.send_releases++;
      NoteRelease(Release{op, request, {}});
    });
  } else if (length > 0) {
    std::shared_ptr<Operation> op = f.op;
    op->releases_left++;
    ctx_.counters.payloads_lent++;
    // Zero copy: ZeroMQ sends straight from the caller's input (or MakeFusedPush
    // copies it); the release hook tells us when it no longer reads it.
    m.payload = Buffer::Borrow(const_cast<uint8_t*>(op->input) + p.offset + offset, length,
                               [this, op, request] {
                                 ctx_.counters.send_releases++;
                                 NoteRelease(Release{op, request, {}});
                               });
  }
  return m;
}

void DensePushPull::NoteRelease(Release r) {
  bool first = false;
  {
    MutexLock lock(release_mu_);
    first = releases_.empty();
    releases_.push_back(std::move(r));
  }
  // One drain per batch: later releases join the inbox until it runs.
  if (first) {
    ctx_.table.Post([this] {
      {
        MutexLock lock(ctx_.mu);
        DrainReleases();
      }
      SendReady();  // a completion may have started the tensor's next operation
    });
  }
}

void DensePushPull::DrainReleases() {
  std::vector<Release> batch;
  {
    MutexLock lock(release_mu_);
    batch.swap(releases_);
  }
  for (Release& r : batch) {
    if (!r.op) {
      for (uint64_t request : r.requests) in_flight_.OnWire(request);
      continue;
    }
    InFlight* f = in_flight_.Find(r.request);
    // A part of a fused push was copied, not sent: the fused copy starts its timer
    // (above). Its resends go alone (attempts > 0) and start their own, as do frames once
    // the last frame of their send was released.
    if (f && (!f->fused || f->attempts > 0) && f->unreleased > 0 && --f->unreleased == 0) {
      in_flight_.OnWire(r.request);
    }
    r.op->releases_left--;
    ctx_.sequencer->MaybeComplete(r.op);
  }
}

void DensePushPull::ResendOverdue(int64_t now_ms, std::vector<std::pair<int, Message>>* out) {
  ctx_.mu.AssertHeld();
  in_flight_.ResendOverdue(
      now_ms, [](const InFlight& f) { return f.op->done; }, /*erase_skipped=*/false,
      [&](uint64_t request, InFlight& f) {
        ctx_.mu.AssertHeld();  // held by our caller (the analysis checks lambdas alone)
        const TensorInfo& t = *f.op->tensor;
        const PartitionSpec& p = PartOf(f);
        // A resent payload starts its timer when ZeroMQ has sent it (OnWire from its
        // release); a RESEND_SUM's runs from now.
        const bool payload = !f.credit_returned && p.bytes > 0;
        if (f.credit_returned) {
          // The server has the push; only its sum may have been lost.
          Message pull = ctx_.NewMessage(proto::RESEND_SUM);
          pull.envelope.set_request_id(request);
          pull.envelope.set_key(KeyOf(f));
          pull.envelope.set_round(f.round);
          pull.envelope.set_priority(f.op->priority);  // its sum's place in the server's queue
          out->emplace_back(p.server, std::move(pull));
          ctx_.counters.pulls++;
        } else {
          // Resends go alone (a fused push's parts each resend on their own timer), and
          // only the frames not yet acknowledged.
          f.unreleased = 0;
          for (uint32_t i = 0; i < f.frames; ++i) {
            if (f.frame_acked[i]) continue;
            out->emplace_back(p.server, BuildPush(f, request, i));
            f.unreleased++;
            ctx_.counters.resends++;
          }
        }
        LOG_EVERY_N(WARNING, 100) << "no answer from "
                                  << ctx_.cluster.table().Describe(ServerId(p.server)) << " for "
                                  << KeyName(KeyOf(f)) << " of tensor '" << t.name << "' round "
                                  << f.round << "; sending "
                                  << (f.credit_returned ? "a PULL for its sum" : "the push again")
                                  << " (attempt " << f.attempts << "; " << google::COUNTER
                                  << " resends so far)";
        return payload;
      });
}

void DensePushPull::AbandonInFlight() {
  ctx_.mu.AssertHeld();
  compression_.Clear();  // the residuals of the old membership (the servers clear theirs)
  for (InFlight& f : in_flight_.TakeAll()) ReturnCredit(f, /*acked=*/false);
  // Partitions still queued belong to failed operations: SendBatch drops them (and
  // their credit) when the queue hands them out.
}

void DensePushPull::ReturnCredit(InFlight& f, bool acked) {
  if (f.credit_returned) return;
  f.credit_returned = true;
  queue_.Done(f.task, acked, /*notify=*/false);  // on van-io, which sends after the reply
}

bool DensePushPull::OnAck(const Message& m) {
  MutexLock lock(ctx_.mu);
  DrainReleases();
  const uint64_t request = m.envelope.request_id();
  InFlight* f = in_flight_.Find(request);
  if (!f) {
    ctx_.NoteLateReply(m);
    return true;
  }
  const uint64_t offset = m.envelope.offset();
  const uint32_t frame = f->frames > 1 ? static_cast<uint32_t>(offset / f->frame_bytes) : 0;
  if (frame >= f->frames || (f->frames > 1 && offset % f->frame_bytes != 0)) {
    LOG(WARNING) << ctx_.cluster.table().Describe(m.sender()) << " acknowledged offset "
                 << offset << " of " << KeyName(KeyOf(*f)) << ", which has no frame there";
    return true;
  }
  if (f->op->sit_out) {  // one header for the whole partition: every frame's credit back
    for (uint32_t i = 0; i < f->frames; ++i) NoteFrameAcked(request, *f, i);
    return true;
  }
  NoteFrameAcked(request, *f, frame);
  return true;
}

void DensePushPull::NoteFrameAcked(uint64_t request, InFlight& f, uint32_t frame, bool by_sum) {
  if (!f.frame_acked[frame]) {
    f.frame_acked[frame] = true;
    f.frames_acked++;
    // The path's rate (link_sizing.h), from the acks of first sends only: a sum waited for the
    // other workers, a resend for its timeout.
    if (!by_sum && !f.fused && !f.op->sit_out && f.attempts == 0) {
      ctx_.link_rates.OnAck(PartOf(f).server, FrameLength(f, frame), f.sent_us, NowUs());
    }
    // The frame's credit comes back now (the window's sample); the last frame's with
    // ReturnCredit below.
    if (f.frames_acked < f.frames && !f.credit_returned) {
      queue_.ReturnPart(f.task, FrameLength(f, frame), /*notify=*/false);  // as Done
    }
  }
  if (f.frames_acked < f.frames) return;
  // From now on only sums are missing: ask for them if they do not come in time (the
  // tracker backs off; see request_tracker.h). An ack again (a RESEND_SUM answered while
  // others hold the sum up) restarts the wait.
  in_flight_.Ack(request);
  ReturnCredit(f);
  if (f.acked_us == 0) f.acked_us = NowUs();
}

bool DensePushPull::NoteSum(uint64_t request, InFlight& f, uint64_t offset, uint64_t cut) {
  const uint64_t bytes = PartOf(f).bytes;
  if (bytes == 0) {  // an empty partition: one empty frame, one sum (cut 0)
    if (f.frames_summed == f.frames) return false;
    f.frames_summed = f.frames;
    NoteFrameAcked(request, f, 0, /*by_sum=*/true);
    return true;
  }
  if (f.sum_cut == 0) {  // the round's cut: CheckResult holds later sums to it
    f.sum_cut = cut;
    f.sum_got.assign(FrameCount(bytes, cut), false);
  }
  const size_t piece = static_cast<size_t>(offset / cut);
  if (f.sum_got[piece]) return false;
  f.sum_got[piece] = true;
  const uint64_t length = std::min(cut, bytes - offset);
  // Every frame of ours that [offset, offset + length) overlaps gets the overlap's bytes.
  const uint64_t own = f.frames > 1 ? f.frame_bytes : bytes;
  for (uint64_t at = offset; at < offset + length;) {
    const uint32_t frame = static_cast<uint32_t>(at / own);
    const uint64_t end = std::min(offset + length, std::min<uint64_t>((frame + 1) * own, bytes));
    f.frame_summed_bytes[frame] += end - at;
    if (f.frame_summed_bytes[frame] == FrameLength(f, frame)) {
      f.frames_summed++;
      NoteFrameAcked(request, f, frame, /*by_sum=*/true);  // its ack may be on its way, or lost
    }
    at = end;
  }
  return true;
}

int DensePushPull::Divisor(const TensorInfo& t) const {
  return t.set_size > 0 ? t.set_size : ctx_.num_workers.load();
}

std::string DensePushPull::Deliver(const Operation& op, const PartitionSpec& p,
                                   const Message& m) {
  const TensorInfo& t = *op.tensor;
  // The output slice belongs to this frame alone until the operation completes.
  uint8_t* out = op.output + p.offset + m.envelope.offset();
  ctx_.counters.bytes_received += m.payload.size();
  if (!m.envelope.compression().empty()) {
    std::string why;
    if (PushCompression::Deliver(op, p, m, Divisor(t), out, &why)) return "";
    return StrCat(ctx_.cluster.table().Describe(m.sender()), " sent a corrupt compressed sum of ",
                  KeyName(m.envelope.key()), ": ", why);
  }
  if (op.average) {
    // Over every worker, as Horovod: a worker that joined counts as zeros; a round closed
    // without some workers (FERRY_BACKUP_WORKERS) over those it holds. One pass.
    const int over = Divisor(t) - MaskCount(m.envelope.left_out());
    CopyScaled(out, m.payload.data(), 1.0 / std::max(over, 1),
               m.payload.size() / DataTypeSize(t.dtype), t.dtype);
  } else {
    std::memcpy(out, m.payload.data(), m.payload.size());
  }
  return "";
}

std::string DensePushPull::CheckResult(const InFlight& f, const Message& m) const {
  const proto::Envelope& e = m.envelope;
  const PartitionSpec& p = PartOf(f);
  // The server's cut (a whole-key sum: the partition), nested with ours, one per round.
  const uint64_t own = f.frames > 1 ? f.frame_bytes : p.bytes;
  const uint64_t cut = e.frame_bytes() != 0 ? e.frame_bytes() : p.bytes;
  const uint64_t frame_length = e.offset() < p.bytes ? std::min(cut, p.bytes - e.offset()) : 0;
  const bool frame_ok =
      (e.frame_bytes() != 0 ? e.key_length() == p.bytes && CutsNest(cut, own, p.bytes) &&
                                  e.offset() % cut == 0 && e.offset() < p.bytes
                            : e.offset() == 0) &&
      (f.sum_cut == 0 || f.sum_cut == cut);
  const bool compressed = !f.wire.empty();
  const std::string compression = compressed ? PushCompression::CheckSum(*f.op, p, m) : "";
  const bool length_ok = compressed ? compression.empty()
                                    : e.length() == frame_length && e.compression().empty();
  if (e.key() == KeyOf(f) && frame_ok && length_ok &&
      e.dtype() == static_cast<int>(f.op->tensor->dtype) && m.sender() == ServerId(p.server)) {
    return std::string();
  }
  return StrCat(ctx_.cluster.table().Describe(m.sender()), " answered the push of ",
                KeyName(KeyOf(f)), " with ", ::ferry::Describe(m),
                ", which does not match the request", compression.empty() ? "" : ": ",
                compression);
}

bool DensePushPull::OnResult(Message&& m) {
  const proto::Envelope& e = m.envelope;
  MutexLock lock(ctx_.mu);
  DrainReleases();  // so that the last sum completes an operation whose payloads went
  const uint64_t request = e.request_id();
  InFlight* found = in_flight_.Find(request);
  if (!found) {
    ctx_.NoteLateReply(m);
    return true;
  }
  std::string error = CheckResult(*found, m);
  if (error.empty()) {
    const uint64_t cut = e.frame_bytes() != 0 ? e.frame_bytes() : PartOf(*found).bytes;
    if (!NoteSum(request, *found, e.offset(), cut)) {  // a resend's answer crossed the first
      ctx_.NoteLateReply(m);
      return true;
    }
    if (!e.left_out().empty()) MergeMask(&found->op->left_out, e.left_out());
  }
  const bool last = !error.empty() || found->frames_summed == found->frames;
  // The partition's record: taken out with its last frame; earlier frames read it in place
  // (only this thread answers frames, and nothing else erases a request).
  std::optional<InFlight> taken;
  if (last) taken = in_flight_.Take(request);
  InFlight& f = last ? *taken : *found;
  const int64_t result_us = NowUs();
  const TensorInfo& t = *f.op->tensor;
  const PartitionSpec p = PartOf(f);  // a copy: used after the lock is let go
  // The copy runs outside the lock, under a hold: a failed operation's Wait() returns
  // only once its holds are gone, and a failure marks every operation done, so no copy
  // starts after it: a caller that frees its buffers after catching the error never
  // races with us.
  const bool deliver = error.empty() && !f.op->done && !m.payload.empty();
  if (deliver) ctx_.table.Hold(f.op->handle);
  if (last) ReturnCredit(f);
  std::shared_ptr<Operation> op = f.op;
  lock.Unlock();
  if (deliver) {
    error = Deliver(*op, p, m);
    if (last && error.empty() && op->part_summed) op->part_summed(f.part);  // under the hold
    ctx_.table.Unhold(op->handle);
  }
  if (!last) return true;
  if (error.empty()) {
    ctx_.counters.partition_round_us.Record(static_cast<uint64_t>(std::max<int64_t>(0, result_us - f.sent_us)));
    if (ctx_.counters.urgency.Urgent(f.op->priority)) {
      ctx_.counters.urgent_queue_delay_us.Record(
          static_cast<uint64_t>(std::max<int64_t>(0, f.sent_us - f.ready_us)));
    }
  }
  if (ctx_.trace && error.empty()) {
    ctx_.trace->Partition(PartitionTimes{t.name, f.part, e.key(), p.server, p.bytes, f.op->priority,
                                         f.round, f.fused, f.ready_us, f.sent_us, f.acked_us,
                                         result_us, NowUs()});
  }
  ctx_.sequencer->FinishPartition(f.op, error);
  return true;
}

bool DensePushPull::OnError(const Message& m) {
  const proto::Envelope& e = m.envelope;
  MutexLock lock(ctx_.mu);
  std::optional<InFlight> taken = in_flight_.Take(e.request_id());
  if (!taken) {
    // E.g. the other frames of a partition whose first refused frame failed it already: a
    // server refuses each frame of a key cut wrong (up to kMaxFramesPerKey of them).
    FERRY_LOG_EVERY_T(WARNING, 1) << ctx_.cluster.table().Describe(m.sender())
                                  << " reported: " << e.error().reason();
    return true;
  }
  InFlight& f = *taken;
  const TensorInfo& t = *f.op->tensor;
  std::string error = StrCat("push_pull of tensor '", t.name, "' (id ", t.id, ", ",
                             DataTypeName(t.dtype), ShapeString(t.shape), ") failed at ",
                             ctx_.cluster.table().Describe(m.sender()), ": ", e.error().reason());
  ReturnCredit(f, /*acked=*/false);
  lock.Unlock();
  ctx_.sequencer->FinishPartition(f.op, error);
  return true;
}

std::string DensePushPull::Describe(const Operation& op) const {
  ctx_.mu.AssertHeld();
  const TensorInfo& t = *op.tensor;
  const std::vector<PartitionSpec>& parts = t.cuts[op.layout].parts;
  std::string s = StrCat("push_pull of tensor '", t.name, "' (id ", t.id, ", ", t.bytes,
                         " bytes in ", parts.size(), " partitions)");
  if (!op.started) return s + " is queued behind an earlier push_pull of the same tensor";
  s += StrCat(": ", op.replies_left, " partition(s) without a reply");
  int listed = 0;
  for (const auto& [request, f] : in_flight_.requests()) {
    if (f.op.get() != &op || listed++ >= 4) continue;
    s += StrCat("; partition ", f.part, " sent to ",
                ctx_.cluster.table().Describe(ServerId(parts[f.part].server)));
  }
  if (op.replies_left == 0) s += StrCat("; ZeroMQ still holds ", op.releases_left, " partition(s)");
  return s;
}

}  // namespace ferry
