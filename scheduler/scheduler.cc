#include "scheduler/scheduler.h"

#include <glog/logging.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "common/metrics/series.h"
#include "common/util/clock.h"
#include "common/util/error.h"
#include "scheduler/status_page.h"

namespace ferry {

namespace {

// The scheduler carries no tensor data: small frames, and no fault injection.
VanOptions SchedulerVanOptions(const Config& config,
                               std::function<void(const Message&, const Origin&)> on_version) {
  VanOptions o = VanOptions::Named("scheduler", 1u << 20, config.transport.secret);
  o.link_timeout_ms = static_cast<int>(config.transport.link_timeout_ms);
  o.handshake_timeout_ms = static_cast<int>(config.transport.handshake_timeout_ms);
  o.on_version_mismatch = std::move(on_version);
  return o;
}

}  // namespace

Scheduler::Scheduler(const Config& config)
    : config_(config),
      van_(SchedulerVanOptions(config,
                               [this](const Message& m, const Origin& o) { RefuseVersion(m, o); })),
      membership_(config.cluster.num_servers),
      stalls_(config.cluster.num_workers, config.cluster.stall_warning_ms,
              config.cluster.stall_shutdown_ms),
      adoption_(config.cluster) {
  port_ = van_.Bind(config.transport.bind_host, config.transport.node_port);
  if (config.diagnostics.metrics_port > 0) {
    http_ = std::make_unique<HttpEndpoint>(
        config.diagnostics.metrics_bind, config.diagnostics.metrics_port,
        [this](const std::string& path) { return ServeHttp(path); });
    LOG(INFO) << "metrics and status page on http://" << config.diagnostics.metrics_bind << ":"
              << config.diagnostics.metrics_port << "/ (FERRY_METRICS_PORT)";
  }
}

Scheduler::~Scheduler() {
  van_.Stop();    // the IO thread reads http_ (OnHeartbeat)
  http_.reset();  // its thread reads metrics_
}

HttpResponse Scheduler::ServeHttp(const std::string& path) const {
  if (path == "/metrics") {
    return {200, "text/plain; version=0.0.4; charset=utf-8", metrics_.Exposition()};
  }
  if (path == "/api/status") return {200, "application/json", metrics_.StatusJson()};
  if (path == "/" || path == "/index.html") {
    return {200, "text/html; charset=utf-8", kStatusPageHtml};
  }
  return {404, "text/plain; charset=utf-8",
          StrCat("not found: ", path, " (this endpoint serves /, /metrics and /api/status)\n")};
}

int Scheduler::Run() {
  van_.Start([this](Message&& m, const Origin& o) { OnMessage(std::move(m), o); });
  const auto& own = config_.transport.schedulers[config_.transport.scheduler_index];
  LOG(INFO) << "scheduler listening on " << config_.transport.bind_host << ":" << port_
            << ", waiting for " << config_.cluster.num_servers << " servers and "
            << config_.cluster.num_workers << " workers, or for the nodes of a running job"
            << (config_.transport.schedulers.size() > 1
                    ? StrCat(" (scheduler ", config_.transport.scheduler_index + 1, " of ",
                             config_.transport.schedulers.size(), " in FERRY_SCHEDULERS, ",
                             own.host, ":", own.port, ")")
                    : std::string());
  // A standby waits for as long as the job runs; the first scheduler registers the job.
  const bool standby = config_.transport.scheduler_index > 0;
  int64_t start = NowMs();
  int64_t last_tick = start;
  MutexLock lock(mu_);
  while (phase_ == Phase::kRegistering || phase_ == Phase::kRunning) {
    int64_t tick = std::max<int64_t>(10, config_.cluster.heartbeat_interval_ms / 2);
    cv_.WaitForOnce(mu_, Millis(tick));
    const int64_t now = NowMs();
    if (now - last_tick > config_.cluster.heartbeat_timeout_ms && phase_ == Phase::kRunning) {
      // This process did not run (paused, or starved): nobody's silence is its own fault.
      LOG(WARNING) << "this scheduler did not run for " << now - last_tick
                   << " ms (paused?): heartbeats count from now; asking the nodes whether it "
                      "still leads the job";
      for (auto& [id, member] : members_) {
        member.last_heartbeat_ms = now;
        SendTo(id, MakeMessage(proto::HEARTBEAT_ACK, kSchedulerId));
      }
    }
    last_tick = now;
    if (phase_ == Phase::kRegistering && adoption_.started()) {
      if (adoption_.Ready(now, config_.cluster.heartbeat_timeout_ms)) LeadAdoptedJob();
    } else if (phase_ == Phase::kRegistering && !standby &&
               now - start > config_.cluster.connect_timeout_ms) {
      FailJob(-1, StrCat("registration timed out after ", config_.cluster.connect_timeout_ms,
                         " ms (FERRY_CONNECT_TIMEOUT_MS): ", MissingNodes()));
    } else if (phase_ == Phase::kRunning) {
      if (http_) {
        proto::MetricsSnapshot own_metrics;
        metrics::AddVanRefusals(&own_metrics, van_.stats());
        metrics_.SetOwn(own_metrics);
      }
      CheckHeartbeats();
      CheckSpares();
      if (phase_ == Phase::kRunning && below_min_since_ms_ > 0 &&
          NowMs() - below_min_since_ms_ > config_.cluster.min_workers_timeout_ms) {
        FailJob(-1, StrCat(below_min_why_, "; no worker joined within ",
                           config_.cluster.min_workers_timeout_ms,
                           " ms (FERRY_MIN_WORKERS_TIMEOUT_MS)"));
      }
      if (phase_ == Phase::kRunning) CheckStalls();
    }
  }
  bool ok = phase_ == Phase::kDone || phase_ == Phase::kFenced;
  lock.Unlock();
  van_.Stop();  // flushes the SHUTDOWN / NODE_FAILED messages
  if (ok) LOG(INFO) << "every worker finalized; job finished";
  if (http_ && config_.diagnostics.metrics_linger_ms > 0) {
    LOG(INFO) << "serving metrics and the status page for "
              << config_.diagnostics.metrics_linger_ms << " ms more (FERRY_METRICS_LINGER_MS)";
    std::this_thread::sleep_for(Millis(config_.diagnostics.metrics_linger_ms));
  }
  Status written = WriteStatsFile(config_.diagnostics.stats_file, "scheduler", 0,
                                  VanCounterValues(van_.stats()));
  if (!written.ok()) LOG(ERROR) << written.message();
  return ok ? 0 : 1;
}

void Scheduler::OnMessage(Message&& m, const Origin& origin) {
  if (!origin.inbound) return;
  MutexLock lock(mu_);
  const auto type = m.envelope.type();
  if (phase_ == Phase::kRunning && m.envelope.term() > term_) {
    // A node follows another scheduler of a higher term: that one adopted the job.
    LOG(ERROR) << "another scheduler leads this job (term " << m.envelope.term()
               << ", this one's " << term_ << ", said node " << m.sender()
               << "): this scheduler stops";
    phase_ = Phase::kFenced;
    cv_.NotifyAll();
    return;
  }
  if (type == proto::FENCED) return;
  if (type == proto::REGISTER) {
    // Nodes send their REGISTER again every heartbeat interval until they have an answer:
    // one that crosses it is no new node (a member's must never become a spare's).
    auto same = [&origin](const auto& node) { return node.identity == origin.identity; };
    if (std::any_of(pending_.begin(), pending_.end(), same) ||
        std::any_of(joiners_.begin(), joiners_.end(), same) ||
        std::any_of(members_.begin(), members_.end(),
                    [&same](const auto& entry) { return same(entry.second); })) {
      return;
    }
  }
  if ((type == proto::REGISTER && m.envelope.register_request().spare()) ||
      (type == proto::HEARTBEAT && m.sender() < 0)) {
    OnSpare(m, origin.identity);
    return;
  }
  if (type == proto::REGISTER) {
    OnRegister(m, origin.identity);
    return;
  }
  if (type == proto::REJOIN) {
    OnRejoin(m, origin.identity);
    return;
  }
  auto member = members_.find(m.sender());
  if (member == members_.end() || member->second.identity != origin.identity) {
    if (phase_ == Phase::kRegistering && adoption_.started() && adoption_.has(origin.identity)) {
      if (type != proto::HEARTBEAT) adoption_.Hold(origin.identity, m);
      return;
    }
    if (phase_ == Phase::kRegistering && m.sender() > 0) {
      // A node of a running job that this scheduler does not know: it asks it to rejoin.
      if (asked_.size() < 4096 && asked_.insert(origin.identity).second) {
        LOG(INFO) << Describe(m) << ": the sender is not a registered member; asked it to "
                  << "rejoin (a running job's node meets a restarted scheduler so)";
      }
      if (type != proto::HEARTBEAT) adoption_.Hold(origin.identity, m);
      van_.Reply(origin.identity, MakeMessage(proto::REJOIN_ASK, kSchedulerId));
      return;
    }
    LOG(WARNING) << "dropped " << Describe(m) << ": the sender is not a registered member";
    return;
  }
  member->second.last_heartbeat_ms = NowMs();
  OnMemberMessage(m);
}

void Scheduler::OnMemberMessage(const Message& m) {
  switch (m.type()) {
    case proto::HEARTBEAT:
      OnHeartbeat(m);
      break;
    case proto::BARRIER:
      OnBarrier(m);
      break;
    case proto::FINALIZE:
      OnFinalize(m);
      break;
    case proto::SUSPEND:
    case proto::RESUME:
      OnSuspend(m, m.type() == proto::SUSPEND);
      break;
    case proto::ADMIT:
      OnAdmit(m);
      break;
    default:
      LOG(WARNING) << "dropped unexpected " << Describe(m) << " (from "
                   << table().Describe(m.sender()) << ")";
  }
}

void Scheduler::Refuse(const std::string& identity, const std::string& reason, uint32_t version) {
  LOG(WARNING) << "refused a registration: " << reason;
  Message m = MakeMessage(proto::ERROR, kSchedulerId);
  m.envelope.set_version(version);
  m.envelope.mutable_error()->set_code(static_cast<int>(ErrorCode::kInvalidArgument));
  m.envelope.mutable_error()->set_reason(reason);
  van_.Reply(identity, std::move(m));
}

void Scheduler::RefuseVersion(const Message& m, const Origin& origin) {
  // Only the envelope's version differs from ours: the ERROR message is the same in every
  // release so far, so the old node reads the reason and exits instead of waiting out
  // FERRY_CONNECT_TIMEOUT_MS.
  const uint32_t version = m.envelope.version();
  Refuse(origin.identity,
         StrCat(DescribeRegistration(m.envelope.register_request()), " speaks protocol version ", version,
                " (this scheduler speaks ", kProtocolVersion,
                "): run the same Ferry release on every node"),
         version);
}

void Scheduler::OnRegister(const Message& m, const std::string& identity) {
  const proto::RegisterRequest& r = m.envelope.register_request();
  if (adoption_.started()) return;  // it registers again once this scheduler leads
  if (config_.cluster.elastic && r.role() == proto::WORKER && phase_ == Phase::kRunning) {
    OnJoiner(m, identity);
    return;
  }
  if (config_.cluster.elastic && r.role() == proto::SERVER) {
    const auto servers = std::count_if(pending_.begin(), pending_.end(), [](const auto& p) {
      return p.request.role() == proto::SERVER;
    });
    if (phase_ != Phase::kRegistering || servers >= config_.cluster.num_servers) {
      // Every slot is filled: a server that comes now (a dead one restarted by its
      // supervisor, one more) waits as a spare.
      OnSpare(m, identity);
      return;
    }
  }
  std::string who = DescribeRegistration(r);
  if (phase_ != Phase::kRegistering) {
    Refuse(identity, StrCat(who, " arrived after registration closed; the job already has ",
                            config_.cluster.num_servers, " servers and ",
                            config_.cluster.num_workers, " workers"));
    return;
  }
  if (r.role() != proto::SERVER && r.role() != proto::WORKER) {
    Refuse(identity, StrCat(who, ": only servers and workers register"));
    return;
  }
  if (r.role() == proto::SERVER && !r.kind().empty() && r.kind() != "colocated" &&
      r.kind() != "cpu") {
    Refuse(identity, StrCat(who, " registers with kind '", r.kind().substr(0, 64),
                            "' (FERRY_NODE_KIND): expected colocated or cpu"));
    return;
  }
  int wanted =
      r.role() == proto::SERVER ? config_.cluster.num_servers : config_.cluster.num_workers;
  int have = 0;
  for (const auto& p : pending_) {
    if (p.request.role() != r.role()) continue;
    ++have;
    if (r.role() == proto::WORKER && r.requested_rank() >= 0 &&
        p.request.requested_rank() == r.requested_rank()) {
      Refuse(identity, StrCat(who, " asks for worker rank ", r.requested_rank(),
                              " (DMLC_WORKER_ID), which worker at ", p.request.host(), " (pid ",
                              p.request.pid(), ") already has"));
      return;
    }
  }
  if (have >= wanted) {
    Refuse(identity, StrCat(who, ": all ", wanted, " ", proto::Role_Name(r.role()),
                            "s of this job (DMLC_NUM_", r.role() == proto::SERVER ? "SERVER" : "WORKER",
                            ") are already registered"));
    return;
  }
  if (r.requested_rank() >= config_.cluster.num_workers) {
    Refuse(identity, StrCat(who, " asks for worker rank ", r.requested_rank(),
                            " but DMLC_NUM_WORKER=", config_.cluster.num_workers));
    return;
  }
  pending_.push_back({identity, r});
  LOG(INFO) << "registered " << who << "; " << MissingNodes();
  if (static_cast<int>(pending_.size()) ==
      config_.cluster.num_servers + config_.cluster.num_workers) {
    BuildNodeTable();
  }
}

std::string Scheduler::MissingNodes() const {
  int servers = 0;
  std::vector<bool> rank_taken(config_.cluster.num_workers, false);
  int unranked = 0;
  for (const auto& p : pending_) {
    if (p.request.role() == proto::SERVER) {
      ++servers;
    } else if (p.request.requested_rank() >= 0) {
      rank_taken[p.request.requested_rank()] = true;
    } else {
      ++unranked;
    }
  }
  // Join-order workers fill the lowest free ranks, so the highest free ranks are missing.
  std::vector<int> missing;
  for (int r = 0; r < config_.cluster.num_workers; ++r) {
    if (rank_taken[r]) continue;
    if (unranked > 0) {
      --unranked;
    } else {
      missing.push_back(r);
    }
  }
  int workers = config_.cluster.num_workers - static_cast<int>(missing.size());
  std::string s = StrCat(servers, " of ", config_.cluster.num_servers, " servers and ", workers,
                         " of ", config_.cluster.num_workers, " workers registered");
  if (servers < config_.cluster.num_servers) {
    s += StrCat("; missing ", config_.cluster.num_servers - servers, " server(s)");
  }
  if (!missing.empty()) {
    s += "; missing worker";
    s += missing.size() > 1 ? "s" : "";
    for (size_t i = 0; i < missing.size() && i < 16; ++i) s += StrCat(i ? ", " : " ", missing[i]);
    if (missing.size() > 16) s += ", ...";
  }
  return s;
}

void Scheduler::PublishTable(const proto::CatalogSnapshot* catalog) {
  const proto::NodeTable& table = this->table().proto();
  const int64_t now = NowMs();
  std::map<int, Member> members;
  std::set<int> fresh;  // members new in this epoch
  for (const auto& n : table.nodes()) {
    if (n.id() == kSchedulerId) continue;
    auto it = members_.find(n.id());
    const bool same = it != members_.end() && it->second.identity == n.routing_id();
    members[n.id()] = same ? it->second : Member{n.routing_id(), now};
    if (!same) fresh.insert(n.id());
    spares_.erase(n.routing_id());  // a promoted spare is a member now
  }
  members_ = std::move(members);
  metrics_.SetTable(this->table());
  for (const auto& [id, member] : members_) {
    Message m = MakeMessage(proto::NODE_TABLE, kSchedulerId);
    *m.envelope.mutable_node_table() = table;
    m.envelope.mutable_node_table()->set_your_id(id);
    if (catalog && fresh.count(id)) *m.envelope.mutable_node_table()->mutable_catalog() = *catalog;
    SendTo(id, std::move(m));
  }
}

int Scheduler::WorkerIdOf(int rank) const {
  for (const auto& n : table().proto().nodes()) {
    if (n.role() == proto::WORKER && n.rank() == rank) return n.id();
  }
  return -1;
}

void Scheduler::BuildNodeTable() {
  membership_.First(pending_, config_.cluster.num_workers, config_.transport.root_host, port_);
  term_ = 1;
  PublishTable();
  std::string servers;
  for (const auto& s : table().Servers()) {
    servers += StrCat(" ", DescribeNode(s), " ", s.kind(), " weight ", s.weight(), ";");
  }
  LOG(INFO) << "all " << config_.cluster.num_servers << " servers and "
            << config_.cluster.num_workers
            << " workers registered; node table sent. Servers:" << servers;
  phase_ = Phase::kRunning;
  pending_.clear();
  cv_.NotifyAll();
}

void Scheduler::OnBarrier(const Message& m) {
  if (m.envelope.epoch() != membership_.epoch()) {
    // Sent before the node heard of the newest epoch: its wait was interrupted.
    VLOG(1) << "dropped a barrier of membership epoch " << m.envelope.epoch() << " from "
            << table().Describe(m.sender());
    return;
  }
  for (auto& [node, release] : barriers_.Arrive(m, table())) SendTo(node, std::move(release));
}

void Scheduler::OnFinalize(const Message& m) {
  if (!table().IsWorker(m.sender())) {
    LOG(WARNING) << "dropped FINALIZE from " << table().Describe(m.sender()) << ": not a worker";
    return;
  }
  finalized_.insert(m.sender());
  suspended_.erase(m.sender());
  LOG(INFO) << table().Describe(m.sender()) << " finalized (" << finalized_.size() << " of "
            << table().num_workers() << ", " << suspended_.size() << " suspended)";
  MaybeEndJob();
}

void Scheduler::OnSuspend(const Message& m, bool suspended) {
  if (!table().IsWorker(m.sender()) || finalized_.count(m.sender())) {
    LOG(WARNING) << "dropped " << Describe(m) << " from " << table().Describe(m.sender())
                 << ": not a worker still in the job";
    return;
  }
  if (suspended) {
    suspended_.insert(m.sender());
  } else {
    suspended_.erase(m.sender());
    // The worker waits for this before it goes on (ClusterClient::Resume).
    Message ack = MakeMessage(proto::BARRIER_RELEASE, kSchedulerId);
    ack.envelope.set_request_id(m.envelope.request_id());
    SendTo(m.sender(), std::move(ack));
  }
  LOG(INFO) << table().Describe(m.sender())
            << (suspended ? " shut down and may init() again" : " initialised again") << " ("
            << suspended_.size() << " suspended, " << finalized_.size() << " finalized of "
            << table().num_workers() << ")";
  MaybeEndJob();
}

void Scheduler::MaybeEndJob() {
  if (finalized_.empty() ||
      static_cast<int>(finalized_.size() + suspended_.size()) < table().num_workers()) {
    return;
  }
  for (const auto& [id, member] : members_) SendTo(id, MakeMessage(proto::SHUTDOWN, kSchedulerId));
  for (const auto& [identity, heartbeat] : spares_) {
    Message m = MakeMessage(proto::SHUTDOWN, kSchedulerId);
    m.envelope.set_term(term_);
    van_.Reply(identity, std::move(m));
  }
  for (const auto& j : joiners_) {
    Refuse(j.identity, StrCat(DescribeRegistration(j.request), " waited to join, but the job ended first"));
  }
  joiners_.clear();
  metrics_.JobEnded("");
  phase_ = Phase::kDone;
  cv_.NotifyAll();
}

void Scheduler::CheckHeartbeats() {
  int64_t now = NowMs();
  for (const auto& [id, member] : members_) {
    int64_t silent = now - member.last_heartbeat_ms;
    if (silent > config_.cluster.heartbeat_timeout_ms) {
      const std::string why =
          StrCat(table().Describe(id), " sent no heartbeat for ", silent,
                 " ms (FERRY_HEARTBEAT_TIMEOUT_MS=", config_.cluster.heartbeat_timeout_ms,
                 "); it is presumed dead");
      if (config_.cluster.elastic) {
        DropMember(id, why);
      } else {
        FailJob(id, why);
      }
      return;  // members_ may have changed; the next look finds any other
    }
  }
}

void Scheduler::OnHeartbeat(const Message& m) {
  Message ack = MakeMessage(proto::HEARTBEAT_ACK, kSchedulerId);
  if (http_) {
    ack.envelope.set_metrics_wanted(true);
    metrics_.Heartbeat(m.sender(), m.envelope.has_metrics() ? &m.envelope.metrics() : nullptr);
  }
  if (table().IsWorker(m.sender())) ack.envelope.set_workers_waiting(joiners_.size());
  if (table().IsWorker(m.sender()) && stalls_.enabled()) {
    if (m.envelope.has_stall_report()) {
      stalls_.Update(table().node(m.sender()).rank(), m.envelope.stall_report(), NowMs());
    }
    proto::StallWatch* watch = ack.envelope.mutable_stall_watch();
    watch->set_report_after_ms(stalls_.report_after_ms());
    for (std::string& label : stalls_.Watched()) watch->add_labels(std::move(label));
  }
  SendTo(m.sender(), std::move(ack));
}

void Scheduler::CheckStalls() {
  if (!stalls_.enabled()) return;
  std::string ending;  // every stall past FERRY_STALL_SHUTDOWN_MS, in one reason
  for (const StallCheck::Stall& s : stalls_.Check(NowMs())) {
    if (s.shutdown) {
      ending += (ending.empty() ? "" : "; also ") + s.message;
      continue;
    }
    LOG(WARNING) << s.message;
    for (int rank : s.waiting) {
      Message m = MakeMessage(proto::STALL, kSchedulerId);
      proto::Stall* body = m.envelope.mutable_stall();
      body->set_label(s.label);
      body->set_seq(s.seq);
      body->set_waited_ms(s.waited_ms);
      for (int missing : s.missing) body->add_missing_ranks(missing);
      body->set_message(s.message);
      SendTo(WorkerIdOf(rank), std::move(m));
    }
  }
  if (!ending.empty()) FailJob(-1, ending);
}

void Scheduler::FailJob(int node_id, const std::string& reason) {
  LOG(ERROR) << "job failed: " << reason;
  failure_ = reason;
  if (node_id > 0) metrics_.Died(node_id, reason);
  metrics_.JobEnded(reason);
  const uint64_t term = term_;
  auto notify = [&](const std::string& identity) {
    Message m = NodeFailedMessage(node_id, reason);
    m.envelope.set_term(term);
    van_.Reply(identity, std::move(m));
  };
  for (const auto& p : pending_) notify(p.identity);
  for (const auto& j : joiners_) notify(j.identity);
  for (const auto& [identity, heartbeat] : spares_) notify(identity);
  for (const auto& [id, member] : members_) {
    if (id != node_id) notify(member.identity);
  }
  phase_ = Phase::kFailed;
  cv_.NotifyAll();
}

void Scheduler::SendTo(int id, Message m) {
  auto it = members_.find(id);
  if (it == members_.end()) return;
  m.envelope.set_term(term_);
  van_.Reply(it->second.identity, std::move(m));
}

}  // namespace ferry
