#include "common/cluster/cluster_client.h"

#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "common/metrics/series.h"
#include "common/util/clock.h"
#include "common/util/error.h"

namespace ferry {

VanOptions VanOptionsFor(const std::string& name, const Config& config) {
  VanOptions o =
      VanOptions::Named(name, config.transport.max_message_bytes, config.transport.secret);
  o.link_timeout_ms = static_cast<int>(config.transport.link_timeout_ms);
  o.handshake_timeout_ms = static_cast<int>(config.transport.handshake_timeout_ms);
  o.control_lane = config.transport.control_lane;
  o.tcp_notsent_lowat = static_cast<int>(config.transport.tcp_notsent_lowat);
  o.watermark_bytes = static_cast<uint64_t>(config.transport.watermark_bytes);
  o.drop_percent = config.transport.test_drop_percent;
  o.delay_ms = static_cast<int>(config.transport.test_delay_ms);
  o.shm.enabled = config.transport.shm;
  o.shm.budget_bytes = static_cast<uint64_t>(config.transport.shm_bytes);
  // Listeners carry the job's scheduler address: two jobs on one host never meet.
  o.shm.job_tag = StrCat(std::hex, std::hash<std::string>()(
                                       StrCat(config.transport.root_host, ":", config.transport.root_port)));
  return o;
}
namespace {

proto::Role ToProto(NodeRole role) {
  switch (role) {
    case NodeRole::kScheduler: return proto::SCHEDULER;
    case NodeRole::kServer: return proto::SERVER;
    case NodeRole::kWorker: return proto::WORKER;
  }
  return proto::ROLE_UNSPECIFIED;
}

std::string Hostname() {
  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace

namespace {

// The routing id of this process's connections. The scheduler and the servers know
// each member by it, so it must survive a reconnect (after a link failure ZeroMQ
// reconnects, and the receiving ROUTER hands the id over to the new connection);
// random, so that nobody who was not given the node table can speak for this node.
std::string NewRoutingId() {
  std::random_device random;
  uint64_t token = (static_cast<uint64_t>(random()) << 32) | random();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(token));
  return StrCat("ferry-member-", getpid(), "-", hex);
}

}  // namespace

ClusterClient::ClusterClient(const Config& config, Van* van, int port)
    : config_(config),
      van_(van),
      port_(port),
      routing_id_(NewRoutingId()),
      link_(config, van, routing_id_) {}

ClusterClient::~ClusterClient() {
  stop_heartbeat_ = true;
  cv_.NotifyAll();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

int ClusterClient::my_rank() const {
  const NodeTable& table = this->table();
  const int id = my_id();
  return table.Contains(id) ? table.node(id).rank() : -1;
}

void ClusterClient::SetMembershipCallback(std::function<void(const NodeTable&)> callback) {
  MutexLock lock(mu_);
  on_membership_ = std::move(callback);
}

std::string ClusterClient::failure() const {
  MutexLock lock(mu_);
  return failure_;
}

void ClusterClient::SetFailureCallback(std::function<void(const std::string&)> callback) {
  MutexLock lock(mu_);
  on_failure_ = std::move(callback);
}


void ClusterClient::Register() {
  link_.Connect();
  Message m = MakeMessage(proto::REGISTER, -1);
  auto* r = m.envelope.mutable_register_request();
  r->set_role(ToProto(config_.role));
  r->set_host(config_.transport.node_host);
  r->set_port(port_);
  r->set_requested_rank(config_.role == NodeRole::kWorker ? config_.cluster.worker_id : -1);
  r->set_kind(config_.cluster.node_kind);
  r->set_hostname(Hostname());
  r->set_pid(getpid());
  r->set_spare(config_.cluster.spare);
  {
    MutexLock lock(mu_);
    register_ = *r;
  }
  LOG(INFO) << "registering with the " << link_.name() << " as a " << NodeRoleName(config_.role)
            << (config_.cluster.spare ? " (spare)" : "");
  // The scheduler names the missing nodes when its own deadline passes; wait a little
  // longer than that deadline so its verdict, not our timeout, is what users read.
  const int64_t wait_ms =
      config_.cluster.connect_timeout_ms + config_.cluster.connect_timeout_ms / 4 + 1000;
  const auto deadline = Clock::now() + Millis(wait_ms);
  {
    MutexLock lock(mu_);
    while (my_id() < 0 && !waiting_as_spare_) {
      if (failed_) throw FerryError(ErrorCode::kPeerFailed, failure_);
      FERRY_ENFORCE(Clock::now() < deadline, ErrorCode::kTimeout, "timed out after ", wait_ms,
                    " ms waiting for the node table from the ", link_.name(),
                    " (is the scheduler running, and did every node start?)");
      {
        // Again every heartbeat interval: a scheduler restarted meanwhile lost it.
        MutexUnlock unlock(mu_);
        link_.Send(m);
      }
      cv_.WaitForOnce(mu_, Millis(config_.cluster.heartbeat_interval_ms));
    }
  }
  if (my_id() < 0) {
    LOG(INFO) << "every server slot of the job is filled: waiting as a spare for a dead "
                 "server's slot";
    WaitForSlot();
    return;
  }
  StartHeartbeats();
}

void ClusterClient::StartHeartbeats() {
  heartbeat_thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "heartbeat");
    HeartbeatLoop();
  });
}

void ClusterClient::WaitForSlot() {
  // The heartbeats (id -1) tell the scheduler this spare lives and tell us the scheduler
  // does: a silent scheduler fails the wait (HeartbeatLoop), so it never hangs.
  StartHeartbeats();
  MutexLock lock(mu_);
  while (my_id() < 0) {
    if (failed_) throw FerryError(ErrorCode::kPeerFailed, failure_);
    FERRY_ENFORCE(!shut_down_, ErrorCode::kShutdown,
                  "the job ended before this spare server was needed");
    cv_.WaitForOnce(mu_, Millis(config_.cluster.heartbeat_interval_ms));
  }
}

void ClusterClient::OnNodeTable(const proto::NodeTable& t) {
  std::function<void(const NodeTable&)> callback;
  std::string failure;  // this node cannot go on with the table
  {
    MutexLock lock(mu_);
    const bool first = my_id() < 0;
    if (first && t.spare()) {  // no slot yet: Register() waits as a spare
      waiting_as_spare_ = true;
      cv_.NotifyAll();
      return;
    }
    if (!first && t.epoch() <= epoch()) return;  // a duplicate changes nothing
    NodeTable next(t);
    if (!first && !config_.cluster.elastic) {
      failure = StrCat("the ", link_.name(), " runs an elastic job (it started membership ",
                       "epoch ", t.epoch(), ") but this node has FERRY_ELASTIC=0: set it alike ",
                       "on every node");
    } else if (!next.Contains(t.your_id())) {
      if (first) {
        LOG(ERROR) << "the scheduler's node table does not contain my id " << t.your_id();
        return;
      }
      failure = StrCat("the ", link_.name(), " dropped this node from the job at membership ",
                       "epoch ", t.epoch(), " (it presumed it dead: were its heartbeats late?)");
    } else {
      if (first && t.has_catalog()) {
        joined_catalog_ = t.catalog();
        joined_with_catalog_ = true;
      }
      tables_.push_back(std::move(next));
      const NodeTable& table = tables_.back();
      table_.store(&table, std::memory_order_release);
      my_id_.store(t.your_id(), std::memory_order_release);
      LOG(INFO) << (first ? "joined the cluster as " : StrCat("membership epoch ", t.epoch(), ": "))
                << table.Describe(t.your_id()) << " (" << table.Servers().size() << " servers, "
                << table.num_workers() << " workers)"
                << (table.IsServer(t.your_id())
                        ? StrCat("; kind ", table.node(t.your_id()).kind(), ", weight ",
                                 table.node(t.your_id()).weight(), " of the bytes")
                        : "");
      if (!first) {
        for (auto& [id, wait] : barriers_) wait.interrupted_at = t.epoch();
      }
      callback = on_membership_;
      cv_.NotifyAll();
    }
  }
  if (!failure.empty()) Fail(failure);
  if (callback) callback(table());
}

bool ClusterClient::HandleMessage(const Message& m, const Origin& origin) {
  switch (link_.Check(m, origin)) {
    case SchedulerLink::Verdict::kNotScheduler: return false;
    case SchedulerLink::Verdict::kRefused: return true;
    case SchedulerLink::Verdict::kAccept: break;
  }
  const proto::Envelope& e = m.envelope;
  switch (e.type()) {
    case proto::NODE_TABLE:
      OnNodeTable(e.node_table());
      return true;
    case proto::BARRIER_RELEASE: {
      MutexLock lock(mu_);
      auto it = barriers_.find(e.request_id());
      if (it != barriers_.end()) {
        BarrierWait& wait = it->second;
        if (wait.group >= 0 && !wait.released && !wait.interrupted_at) {
          Done& done = done_[wait.group];
          if (done.epoch != wait.epoch) done = Done{wait.epoch, 0, {}};
          done.count = std::max(done.count, wait.body.seq());
          done.release = e.barrier();
          done.release.clear_catalog();
        }
        it->second.released = true;
        it->second.last_rank = e.has_barrier() ? e.barrier().last_rank() : -1;
        it->second.catalogs_differ = e.has_barrier() && e.barrier().catalogs_differ();
        if (e.has_barrier() && e.barrier().has_catalog()) it->second.catalog = e.barrier().catalog();
      }
      cv_.NotifyAll();
      return true;
    }
    case proto::HEARTBEAT_ACK:
      workers_waiting_ = e.workers_waiting();
      metrics_wanted_ = e.metrics_wanted();
      if (e.has_stall_watch()) {
        MutexLock lock(mu_);
        stall_watch_ = e.stall_watch();
      }
      return true;
    case proto::STALL:  // the scheduler's warning that operations wait (stall_check.h)
      LOG(WARNING) << e.stall().message();
      return true;
    case proto::ERROR:
      if (my_id() >= 0) {
        // A scheduler of other settings at the job's address: the job goes on, waiting
        // for the right one (SchedulerLink::Watch).
        link_.NoteRefusal(e.error().reason());
        return true;
      }
      // The scheduler refuses us (job full, rank taken, ...): nothing to wait for.
      Fail(StrCat("the ", link_.name(), " refused this node: ", e.error().reason()));
      return true;
    case proto::REJOIN_ASK:
      SendRejoin();
      return true;
    case proto::NODE_FAILED:
      Fail(e.failure().reason());
      return true;
    case proto::SHUTDOWN: {
      {
        // Under mu_, as Resume() decides: a RESUME either saw the end (and threw) or
        // crossed it (and this worker fails here), never neither.
        MutexLock lock(mu_);
        if (!resumed_) {
          LOG(INFO) << "the scheduler ended the job";
          shut_down_ = true;
          cv_.NotifyAll();
          return true;
        }
      }
      Fail("the scheduler ended the job as this worker called init() again (every other "
           "worker had shut down, at least one for good)");
      return true;
    }
    default:
      return false;
  }
}

void ClusterClient::Fail(const std::string& reason) {
  std::function<void(const std::string&)> callback;
  {
    MutexLock lock(mu_);
    if (failed_ || shut_down_) return;
    failure_ = reason;
    failed_ = true;
    callback = on_failure_;
  }
  LOG(ERROR) << "cluster failure: " << reason;
  cv_.NotifyAll();
  if (callback) callback(reason);
}

void ClusterClient::WaitUntil(const std::function<bool()>& done, int64_t timeout_ms,
                              const std::string& what) {
  MutexLock lock(mu_);
  auto deadline = Clock::now() + Millis(timeout_ms);
  while (!done()) {
    if (failed_) throw FerryError(ErrorCode::kPeerFailed, failure_);
    if (cv_.WaitUntilOnce(mu_, deadline) == std::cv_status::timeout && !done()) {
      if (failed_) throw FerryError(ErrorCode::kPeerFailed, failure_);
      throw FerryError(ErrorCode::kTimeout,
                       StrCat("timed out after ", timeout_ms, " ms waiting for ", what));
    }
  }
}

void ClusterClient::SetStallReporter(StallReporter reporter) {
  MutexLock lock(mu_);
  stall_reporter_ = std::move(reporter);
}


namespace {

// The stall check's label of a barrier group's waits; empty: not reported.
std::string BarrierLabel(proto::BarrierGroup group) {
  switch (group) {
    case proto::GROUP_WORKERS: return "barrier";
    case proto::GROUP_JOIN: return "join";
    default: return "";
  }
}

// Whether `label` is one of BarrierLabel's (this client counts those itself).
bool IsBarrierLabel(const std::string& label) {
  return label == BarrierLabel(proto::GROUP_WORKERS) || label == BarrierLabel(proto::GROUP_JOIN);
}

}  // namespace

void ClusterClient::SetMetricsReporter(MetricsReporter reporter) {
  MutexLock lock(reporter_mu_);
  metrics_reporter_ = std::move(reporter);
}

Message ClusterClient::MakeHeartbeat() {
  Message m = MakeMessage(proto::HEARTBEAT, my_id());
  if (metrics_wanted_) {
    metrics::AddVanRefusals(m.envelope.mutable_metrics(), van_->stats());
    MutexLock lock(reporter_mu_);
    if (metrics_reporter_) metrics_reporter_(m.envelope.mutable_metrics());
  }
  StallReporter reporter;
  int64_t report_after_ms;
  std::vector<std::string> labels;  // the reporter's; this client's own are its barriers'
  {
    MutexLock lock(mu_);
    if (!stall_reporter_ || stall_watch_.report_after_ms() <= 0) return m;
    reporter = stall_reporter_;
    report_after_ms = stall_watch_.report_after_ms();
    for (const std::string& label : stall_watch_.labels()) {
      if (!IsBarrierLabel(label)) labels.push_back(label);
    }
  }
  proto::StallReport* report = m.envelope.mutable_stall_report();
  reporter(report_after_ms, labels, report);
  MutexLock lock(mu_);
  const int64_t now = NowMs();
  for (const auto& [id, wait] : barriers_) {
    if (wait.released || wait.label.empty() || now - wait.start_ms < report_after_ms) continue;
    auto* p = report->add_pending();
    p->set_label(wait.label);
    p->set_seq(wait.seq);
    p->set_age_ms(now - wait.start_ms);
  }
  for (const std::string& label : stall_watch_.labels()) {
    if (!IsBarrierLabel(label)) continue;
    auto it = barriers_entered_.find(label);
    auto* c = report->add_counts();
    c->set_label(label);
    c->set_count(it == barriers_entered_.end() ? 0 : it->second);
  }
  return m;
}

int ClusterClient::Barrier(proto::BarrierGroup group, int64_t timeout_ms, JoinInfo* join,
                           std::optional<uint32_t> epoch) {
  uint64_t id;
  const uint32_t in_epoch = epoch ? *epoch : this->epoch();
  Message m = MakeMessage(proto::BARRIER, my_id());
  {
    MutexLock lock(mu_);
    FERRY_ENFORCE(in_epoch >= this->epoch(), ErrorCode::kMembershipChanged, "a ",
                  proto::BarrierGroup_Name(group), " barrier of membership epoch ", in_epoch,
                  ": the job's membership changed (epoch ", this->epoch(), ")");
    id = next_request_++;
    BarrierWait& wait = barriers_[id];
    wait.label = BarrierLabel(group);
    if (!wait.label.empty()) wait.seq = ++barriers_entered_[wait.label];
    wait.start_ms = NowMs();
    wait.group = group;
    wait.epoch = in_epoch;
    const Done& done = done_[group];
    proto::Barrier& body = wait.body;
    body.set_group(group);
    body.set_seq((done.epoch == in_epoch ? done.count : 0) + 1);
    if (join) {
      body.set_join_position(join->position);
      body.set_catalog_digest(join->catalog_digest);
      body.set_catalog_next_id(join->catalog_next_id);
      if (join->catalog) *body.mutable_catalog() = *join->catalog;
    }
    m.envelope.set_epoch(in_epoch);
    m.envelope.set_request_id(id);
    *m.envelope.mutable_barrier() = body;
  }
  link_.Send(std::move(m));
  // Erased however the wait ends: a barrier no longer waited for is no stall to report.
  uint32_t interrupted_at = 0;
  auto forget = [this, id, join, &interrupted_at]() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    const int last_rank = barriers_[id].last_rank;
    if (join) {
      join->catalogs_differ = barriers_[id].catalogs_differ;
      join->adopt = std::move(barriers_[id].catalog);
    }
    interrupted_at = barriers_[id].interrupted_at;
    barriers_.erase(id);
    return last_rank;
  };
  int last_rank;
  try {
    WaitUntil(
        [this, id]() REQUIRES(mu_) { return barriers_[id].released || barriers_[id].interrupted_at; },
        timeout_ms > 0 ? timeout_ms : config_.cluster.op_timeout_ms,
        StrCat("a ", proto::BarrierGroup_Name(group), " barrier at the ", link_.name()));
  } catch (...) {
    forget();
    throw;
  }
  last_rank = forget();
  FERRY_ENFORCE(interrupted_at == 0, ErrorCode::kMembershipChanged, "a ",
                proto::BarrierGroup_Name(group), " barrier was abandoned: the job's membership "
                "changed (epoch ", interrupted_at, ")");
  return last_rank;
}

void ClusterClient::Finalize() {
  resumed_ = false;
  if (shut_down_) return;  // the job ended while this worker was suspended: nobody to tell
  finalized_ = true;
  link_.Send(MakeMessage(proto::FINALIZE, my_id()));
  WaitForShutdown();
}

void ClusterClient::Admit(const proto::CatalogSnapshot* catalog) {
  Message m = MakeMessage(proto::ADMIT, my_id());
  m.envelope.set_epoch(epoch());
  if (catalog) *m.envelope.mutable_catalog() = *catalog;
  link_.Send(std::move(m));
}

void ClusterClient::Suspend() {
  resumed_ = false;
  suspended_ = true;
  link_.Send(MakeMessage(proto::SUSPEND, my_id()));
}

void ClusterClient::Resume() {
  {
    MutexLock lock(mu_);
    if (failed_) throw FerryError(ErrorCode::kPeerFailed, failure_);
    FERRY_ENFORCE(!shut_down_, ErrorCode::kShutdown,
                  "init() after shutdown(): the job has ended meanwhile (every worker had shut "
                  "down, and at least one for good, e.g. its process exited), so there is no job "
                  "to rejoin");
    resumed_ = true;
  }
  // Returns once the scheduler has counted this worker back in (its acknowledgement):
  // otherwise this worker's next push_pull could complete, through the servers, before the
  // scheduler heard the RESUME, and another worker that then finalizes would end the job
  // under it (the scheduler would still count this one suspended).
  uint64_t id;
  {
    MutexLock lock(mu_);
    id = next_request_++;
    barriers_[id];  // no label: not a stall-checked wait
  }
  Message m = MakeMessage(proto::RESUME, my_id());
  m.envelope.set_request_id(id);
  suspended_ = false;
  link_.Send(std::move(m));
  try {
    WaitUntil([this, id]() REQUIRES(mu_) { return barriers_[id].released; },
              config_.cluster.op_timeout_ms,
              StrCat("the ", link_.name(), " to acknowledge init() after shutdown()"));
  } catch (...) {
    MutexLock lock(mu_);
    barriers_.erase(id);
    throw;
  }
  MutexLock lock(mu_);
  barriers_.erase(id);
}

void ClusterClient::WaitForShutdown() {
  // A server waits as long as the job runs: failures end the wait, not a deadline
  // (the scheduler's heartbeat watch bounds how long a dead job can go unnoticed, and
  // FERRY_SCHEDULER_TIMEOUT_MS how long a job without a scheduler can).
  MutexLock lock(mu_);
  while (!shut_down_) {
    if (failed_) throw FerryError(ErrorCode::kPeerFailed, failure_);
    cv_.WaitForOnce(mu_, Millis(config_.cluster.heartbeat_interval_ms));
  }
}

void ClusterClient::HeartbeatLoop() {
  MutexLock lock(mu_);
  while (!stop_heartbeat_ && !shut_down_ && !failed_) {
    {
      MutexUnlock unlock(mu_);
      link_.Send(MakeHeartbeat());
      const std::string failure = link_.Watch(NowMs());
      if (!failure.empty()) Fail(failure);
    }
    cv_.WaitForOnce(mu_, Millis(config_.cluster.heartbeat_interval_ms));
  }
}

}  // namespace ferry

namespace ferry {

void ClusterClient::SendRejoin() {
  if (my_id() < 0) {  // registering, or a spare waiting for a slot: its REGISTER again
    Message m = MakeMessage(proto::REGISTER, -1);
    {
      MutexLock lock(mu_);
      *m.envelope.mutable_register_request() = register_;
    }
    link_.Send(std::move(m));
    return;
  }
  Message m = MakeMessage(proto::REJOIN, my_id());
  proto::Rejoin* r = m.envelope.mutable_rejoin();
  {
    MutexLock lock(mu_);
    *r->mutable_table() = table().proto();
    r->mutable_table()->set_your_id(my_id());
    r->mutable_table()->clear_catalog();
    r->set_term(link_.term());
    r->set_job_workers(config_.cluster.num_workers);
    r->set_job_servers(config_.cluster.num_servers);
    r->set_elastic(config_.cluster.elastic);
    r->set_finalized(finalized_);
    r->set_suspended(suspended_);
    for (const auto& [id, wait] : barriers_) {
      if (wait.group < 0 || wait.released || wait.interrupted_at) continue;
      proto::Rejoin::Waiting* w = r->add_waiting();
      w->set_request_id(id);
      w->set_epoch(wait.epoch);
      *w->mutable_barrier() = wait.body;
    }
    for (const auto& [group, done] : done_) {
      proto::Rejoin::Done* d = r->add_done();
      d->set_group(static_cast<proto::BarrierGroup>(group));
      d->set_epoch(done.epoch);
      d->set_count(done.count);
      *d->mutable_release() = done.release;
    }
  }
  LOG(INFO) << "the " << link_.name() << " asks this node to rejoin: sending its part of the job ("
            << r->waiting_size() << " barrier(s) waiting)";
  link_.Send(std::move(m));
}

}  // namespace ferry
