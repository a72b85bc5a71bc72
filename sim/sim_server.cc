#include "sim/sim_server.h"

#include <glog/logging.h>

#include "server/key_state.h"
#include "sim/sim_worker.h"

namespace ferry::sim {

SimServer::SimServer(SimJob& job, int rank)
    : job_(job), rank_(rank), engines_(std::max(1, job.config.server.engine_threads)) {}

void SimServer::OnPushes(SimWorker& from, const std::vector<SubPush>& pushes) {
  const int node = job_.ServerNode(rank_);
  for (const SubPush& p : pushes) {
    SimWorker* worker = &from;
    const uint64_t cookie = p.cookie;
    const uint32_t frame = p.frame;
    const SimTime sent = job_.events.now();
    job_.fabric->SendControl(node, from.node(), [worker, cookie, frame, sent] {
      worker->OnAck(cookie, frame, sent);
    });
    const int engine = EngineForKey(p.key, static_cast<int>(engines_.size()));
    engines_[engine].queue.push(Item{p.priority, next_seq_++, &from, p});
    if (!engines_[engine].busy) Work(engine);
  }
}

void SimServer::Work(int engine) {
  Engine& e = engines_[engine];
  if (e.queue.empty()) {
    e.busy = false;
    return;
  }
  e.busy = true;
  Item item = e.queue.top();
  e.queue.pop();
  const uint64_t id = item.push.key * 65537 + item.push.frame;
  const bool first = open_.find(id) == open_.end() || open_[id].summed == 0;
  const double work_us =
      first ? 0.0 : static_cast<double>(item.push.bytes) / job_.sum_bytes_per_us;
  job_.events.After(work_us, [this, engine, item] {
    Summed(item);
    Work(engine);
  });
}

void SimServer::Summed(const Item& item) {
  const uint64_t id = item.push.key * 65537 + item.push.frame;
  Round& round = open_[id];
  round.summed++;
  round.pushers.emplace_back(item.from, item.push.cookie);
  bytes_summed_ += item.push.bytes;
  if (round.summed < job_.num_workers) return;
  const int node = job_.ServerNode(rank_);
  const uint32_t frame = item.push.frame;
  for (const auto& [worker, cookie] : round.pushers) {
    SimWorker* w = worker;
    const uint64_t c = cookie;
    job_.fabric->SendData(node, w->node(), item.push.bytes, item.push.priority, DataKind::kSum,
                          [w, c, frame] { w->OnSum(c, frame); });
  }
  open_.erase(id);
  rounds_completed_++;
}

}  // namespace ferry::sim
