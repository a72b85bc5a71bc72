#include "sim/sim_server.h"

#include <glog/logging.h>

#include "server/key_state.h"
#include "sim/sim_sender.h"

namespace ferry::sim {

SimServer::SimServer(SimJob& job, int rank)
    : job_(job), rank_(rank), engines_(std::max(1, job.config.server.engine_threads)) {}

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

}  // namespace ferry::sim
