#include "sim/sim_server.h"

#include <glog/logging.h>

#include <algorithm>

#include "common/transport/message.h"
#include "common/util/strings.h"
#include "server/key_state.h"
#include "sim/backup_rounds.h"
#include "sim/sim_sender.h"

namespace ferry::sim {

SimServer::SimServer(SimJob& job, int rank)
    : job_(job), rank_(rank), engines_(std::max(1, job.config.server.engine_threads)) {
  if (job.config.server.backup_workers > 0 && job.num_workers >= 2) {
    backup_ = std::make_unique<BackupRounds>(job.num_workers, job.config.server.backup_workers);
  }
}

SimServer::~SimServer() = default;

void SimServer::OnPushes(SimSender& from, const std::vector<SubPush>& pushes) {
  const int node = job_.ServerNode(rank_);
  for (const SubPush& p : pushes) {
    SimSender* worker = &from;
    const uint64_t cookie = p.cookie;
    const uint32_t frame = p.frame;
    const SimTime sent = job_.events.now();
    job_.fabric->SendControl(node, from.node(), [worker, cookie, frame, sent] {
      worker->OnAck(cookie, frame, sent);
    });
    const int engine = EngineForKey(p.key, static_cast<int>(engines_.size()));
    engines_[engine].queue.push(Item{p.priority, next_seq_++, &from, p, nullptr});
    Work(engine);
  }
}

void SimServer::Enqueue(uint64_t key, int priority, EngineWork& work, uint64_t tag) {
  SubPush push;
  push.cookie = tag;
  push.key = key;
  push.priority = priority;
  const int engine = EngineForKey(key, static_cast<int>(engines_.size()));
  engines_[engine].queue.push(Item{priority, next_seq_++, nullptr, push, &work});
  Work(engine);
}

void SimServer::Work(int engine) {
  // Starts what waits while the engine is free. A push's place in the round is fixed when
  // it starts (the engine sums one at a time, and all of a key's pushes go to one engine,
  // so the earlier ones are through by then); only the push that completes its round
  // needs an event, at its end, to send the sums; a wake-up at busy_until serves the rest.
  Engine& e = engines_[engine];
  while (!e.queue.empty() && e.busy_until <= job_.events.now()) {
    Item item = e.queue.top();
    e.queue.pop();
    if (item.work != nullptr) {
      e.busy_until = job_.events.now() + item.work->Take(rank_, item.push.cookie);
      continue;
    }
    if (ByRange(item.push)) {
      TakeByRange(e, item);
      continue;
    }
    if (backup_ && ClosesEarly(item.push)) {
      TakeWithBackups(e, item);
      continue;
    }
    CHECK(!item.push.sit_out) << "worker " << item.from->rank() << " sat out key "
                              << item.push.key << ", whose rounds wait for every worker";
    Round& round = RoundOf(item.push);
    const int members = job_.Members(item.push.key);
    if (round.summed == 0) round.pushers.reserve(members);  // one from each
    // A compressed push is decompressed, then added; the round's last one compresses the
    // sum too (SumCompression).
    const uint64_t values = item.push.raw_bytes > 0 ? item.push.raw_bytes : item.push.bytes;
    double work_us = round.summed == 0 ? 0.0 : static_cast<double>(values) / job_.sum_bytes_per_us;
    if (item.push.raw_bytes > 0) {
      work_us += static_cast<double>(values) / job_.codec.decompress;
      if (round.summed + 1 == members) {
        work_us += static_cast<double>(values) / job_.codec.compress;
      }
    }
    e.busy_until = job_.events.now() + work_us;
    round.summed++;
    round.pushers.emplace_back(item.from, item.push.cookie);
    bytes_summed_ += values;
    if (round.summed == members) {
      job_.events.At(e.busy_until, [this, item] { SendSums(item); });
    }
  }
  if (!e.queue.empty() && !e.wake_scheduled) {
    e.wake_scheduled = true;
    job_.events.At(e.busy_until, [this, engine] {
      engines_[engine].wake_scheduled = false;
      Work(engine);
    });
  }
}

SimServer::Round& SimServer::RoundOf(const SubPush& push) {
  const RoundId id = IdOf(push);
  if (last_round_ == nullptr || !(last_id_ == id)) {
    last_id_ = id;
    last_round_ = &open_[id];
  }
  return *last_round_;
}

void SimServer::SendSums(const Item& item) {
  const RoundId id = IdOf(item.push);
  Round& round = open_[id];
  const int node = job_.ServerNode(rank_);
  const uint32_t frame = item.push.frame;
  // A compressed sum is decompressed by each worker before its partition is done.
  const double decompress_us =
      item.push.raw_bytes > 0 ? static_cast<double>(item.push.raw_bytes) / job_.codec.decompress
                              : 0.0;
  for (const auto& [worker, cookie] : round.pushers) {
    SimSender* w = worker;
    const uint64_t c = cookie;
    SimJob* job = &job_;
    job_.fabric->SendData(node, w->node(), item.push.bytes, item.push.priority, DataKind::kSum,
                          [job, w, c, frame, decompress_us] {
                            if (decompress_us <= 0) return w->OnSum(c, frame);
                            job->events.At(job->events.now() + decompress_us,
                                           [w, c, frame] { w->OnSum(c, frame); });
                          });
  }
  if (last_round_ == &round) last_round_ = nullptr;
  open_.erase(id);
  rounds_completed_++;
}

bool SimServer::ByRange(const SubPush& push) const {
  return job_.CutsMayDiffer() && !backup_ && push.raw_bytes == 0 && !push.sit_out &&
         job_.InGlobalSet(push.key);
}

void SimServer::TakeByRange(Engine& e, const Item& item) {
  const SubPush& p = item.push;
  Grid& g = grids_[p.key];
  const uint64_t cut = p.cut > 0 ? p.cut : p.key_bytes;
  if (g.frames.empty()) {  // the first piece sets the grid
    g.round = p.round;
    g.cut = cut;
    g.bytes = p.key_bytes;
    g.frames.resize((g.bytes + g.cut - 1) / g.cut);
  }
  CHECK_EQ(g.round, p.round) << "key " << p.key << ": a piece of another round";
  CHECK(g.bytes == p.key_bytes &&
        (cut % g.cut == 0 || g.cut % cut == 0 || cut >= g.bytes || g.cut >= g.bytes))
      << "key " << p.key << ": a piece cut in " << cut << " does not nest with the grid's "
      << g.cut;
  const int rank = item.from->rank();
  const int members = job_.Members(p.key);
  const uint64_t begin = static_cast<uint64_t>(p.frame) * cut;
  const uint64_t end = begin + p.bytes;
  double work_us = 0;
  std::vector<uint32_t> complete;
  for (uint64_t f = begin / g.cut; f < g.frames.size() && f * g.cut < end; ++f) {
    GridFrame& frame = g.frames[f];
    const uint64_t length = std::min(g.cut, g.bytes - f * g.cut);
    const uint64_t overlap = std::min(end, f * g.cut + length) - std::max(begin, f * g.cut);
    if (frame.got.empty()) frame.got.assign(static_cast<size_t>(job_.num_workers), 0);
    uint64_t& got = frame.got[static_cast<size_t>(rank)];
    if (got == 0) frame.pushers.emplace_back(item.from, p.cookie);
    const bool adopted = frame.whole == 0 && overlap == length;
    if (!adopted) work_us += static_cast<double>(overlap) / job_.sum_bytes_per_us;
    got += overlap;
    CHECK_LE(got, length) << "key " << p.key << ": worker " << rank << " sent bytes twice";
    if (got == length && ++frame.whole == members) complete.push_back(static_cast<uint32_t>(f));
  }
  e.busy_until = job_.events.now() + work_us;
  bytes_summed_ += p.bytes;
  for (uint32_t f : complete) {
    const uint64_t key = p.key;
    const int priority = p.priority;
    job_.events.At(e.busy_until, [this, key, f, priority] { SendGridSum(key, f, priority); });
  }
}

void SimServer::SendGridSum(uint64_t key, uint32_t frame, int priority) {
  auto it = grids_.find(key);
  CHECK(it != grids_.end()) << "key " << key << ": a grid frame's sum of no round";
  Grid& g = it->second;
  const int node = job_.ServerNode(rank_);
  const uint64_t offset = static_cast<uint64_t>(frame) * g.cut;
  const uint64_t length = std::min(g.cut, g.bytes - offset);
  for (const auto& [worker, cookie] : g.frames[frame].pushers) {
    SimSender* w = worker;
    const uint64_t c = cookie;
    job_.fabric->SendData(node, w->node(), length, priority, DataKind::kSum,
                          [w, c, offset, length] { w->OnSumRange(c, offset, length); });
  }
  rounds_completed_++;
  if (++g.sent == g.frames.size()) grids_.erase(it);
}

bool SimServer::ClosesEarly(const SubPush& push) const {
  return push.raw_bytes == 0 && job_.InGlobalSet(push.key);
}

void SimServer::TakeWithBackups(Engine& e, const Item& item) {
  const SubPush& p = item.push;
  const BackupRounds::Taken t = backup_->Take(p, item.from, item.from->rank());
  // A late push is dropped and a sit-out adds nothing: no work. The first of a frame is
  // adopted, as without backups.
  const double work_us =
      t.added && !t.adopted ? static_cast<double>(p.bytes) / job_.sum_bytes_per_us : 0.0;
  e.busy_until = job_.events.now() + work_us;
  if (t.added) bytes_summed_ += p.bytes;
  for (const BackupRounds::Answer& a : t.answers) {
    SendSumTo(item.from, p.cookie, a.frame, a.bytes, p.priority, a.duplicate, a.late);
  }
  for (uint32_t frame : t.complete) {
    const uint64_t key = p.key;
    const int priority = p.priority;
    job_.events.At(e.busy_until,
                   [this, key, frame, priority] { SendBackupSum(key, frame, priority); });
  }
}

void SimServer::SendBackupSum(uint64_t key, uint32_t frame, int priority) {
  uint64_t bytes = 0;
  for (const BackupRounds::Reply& to : backup_->Send(key, frame, &bytes)) {
    SendSumTo(to.worker, to.cookie, frame, bytes, priority, false, to.late);
  }
  rounds_completed_++;
}

void SimServer::SendSumTo(SimSender* to, uint64_t cookie, uint32_t frame, uint64_t bytes,
                          int priority, bool duplicate, bool late) {
  const int node = job_.ServerNode(rank_);
  if (duplicate) {
    job_.fabric->SendData(node, to->node(), bytes, priority, DataKind::kSum, [] {});
    return;
  }
  job_.fabric->SendData(node, to->node(), bytes, priority, DataKind::kSum,
                        [to, cookie, frame, late] { to->OnSum(cookie, frame, late); });
}

std::string SimServer::Starved() const {
  if (!backup_ || !backup_->starved()) return "";
  const auto [key, round] = *backup_->starved();
  const uint64_t layer = KeyTensor(key);  // the global set's tensors: the layers, in order
  const std::string name =
      layer < job_.workload.layers.size() ? job_.workload.layers[layer].name : "?";
  return StrCat("round ", round, " of layer ", layer, " (", name, ")");
}

std::vector<uint64_t> SimServer::late_pushes() const {
  return backup_ ? backup_->late_pushes() : std::vector<uint64_t>();
}

}  // namespace ferry::sim
