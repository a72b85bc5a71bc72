#include "worker/point_to_point.h"

#include <glog/logging.h>

#include <cstring>
#include <limits>

#include "common/cluster/point_to_point_label.h"
#include "common/util/logging.h"
#include "common/util/strings.h"

namespace ferry {

namespace {

std::string Shape(DataType dtype, uint64_t count) {
  return StrCat(DataTypeName(dtype), "[", count, "]");
}

}  // namespace

PointToPoint::PointToPoint(WorkerContext& ctx)
    : ctx_(ctx), sends_(ctx.config.transport.resend_timeout_ms) {}

int PointToPoint::ConnectTo(int rank) {
  for (const proto::NodeInfo& n : ctx_.cluster.table().proto().nodes()) {
    if (n.role() != proto::WORKER || n.rank() != rank) continue;
    if (n.port() == 0) return -1;  // listens on nothing: a worker of an older release
    if (connected_.insert(n.id()).second) {
      ctx_.van.Connect(n.id(), StrCat("tcp://", n.host(), ":", n.port()),
                       ctx_.cluster.routing_id(), ctx_.config.transport.control_lane);
    }
    return n.id();
  }
  return -1;
}

Handle PointToPoint::Send(const void* data, uint64_t count, DataType dtype, int dst, int tag,
                          int32_t priority, CompletionCallback done) {
  const int me = ctx_.rank, workers = ctx_.num_workers;
  FERRY_ENFORCE(dst >= 0 && dst < workers && dst != me, ErrorCode::kInvalidArgument,
                "send to rank ", dst, " (tag ", tag, ", ", Shape(dtype, count), "): not another "
                "worker's rank (this is rank ", me, " of ", workers, ")");
  MutexLock lock(ctx_.mu);
  ctx_.CheckRunning("send", PointToPointLabel(me, dst, tag));
  const int node = ConnectTo(dst);
  FERRY_ENFORCE(node >= 0, ErrorCode::kInvalidArgument, "send to rank ", dst, ": it listens on no "
                "port (every worker of this release does; is it an older one?)");
  OutboundSend s;
  s.handle = ctx_.table.Add(std::move(done), PointToPointLabel(me, dst, tag));
  s.to = {dst, tag};
  s.node = node;
  s.number = next_send_[s.to]++;
  s.data = static_cast<const uint8_t*>(data);
  s.bytes = count * DataTypeSize(dtype);
  s.dtype = dtype;
  if (priority == kLearnedPriority) {
    auto learned = learned_.find(s.to);
    priority = learned == learned_.end() ? 0 : learned->second;
  }
  s.priority = priority;
  const uint64_t request = ctx_.next_request++;
  OutboundSend& tracked = sends_.Add(request, std::move(s), /*on_wire_later=*/true);
  ctx_.counters.p2p_sends++;
  ctx_.counters.p2p_bytes_sent += tracked.bytes;
  ctx_.van.Send(node, BuildSend(request, tracked, false));
  return tracked.handle;
}

Message PointToPoint::BuildSend(uint64_t request, OutboundSend& s, bool probe) {
  Message m = ctx_.NewMessage(proto::P2P_SEND);
  m.envelope.set_request_id(request);
  m.envelope.set_tag(s.to.second);
  m.envelope.set_round(s.number);
  m.envelope.set_dtype(static_cast<proto::DataTypeProto>(s.dtype));
  m.envelope.set_priority(s.priority);
  if (probe) {
    m.envelope.set_probe(true);
    return m;
  }
  m.envelope.set_length(s.bytes);
  if (s.bytes > 0) {
    s.releases_left++;
    const uint64_t epoch = epoch_;
    // Zero copy: ZeroMQ sends straight from the caller's tensor; the release hook says
    // when it no longer reads it.
    m.payload = Buffer::Borrow(const_cast<uint8_t*>(s.data), s.bytes, [this, request, epoch] {
      ctx_.table.Post([this, request, epoch] {
        MutexLock lock(ctx_.mu);
        if (epoch != epoch_) return;
        if (OutboundSend* s = sends_.Find(request)) {
          s->releases_left--;
          sends_.OnWire(request);
          MaybeFinish(request);
        }
      });
    });
  } else {
    sends_.OnWire(request);
  }
  return m;
}

void PointToPoint::MaybeFinish(uint64_t request) {
  OutboundSend* s = sends_.Find(request);
  if (!s || !s->received || s->releases_left > 0) return;
  Verdict v;
  if (!s->error.empty()) v = Verdict{ErrorCode::kInvalidArgument, s->error};
  const Handle h = s->handle;
  sends_.Take(request);
  ctx_.table.Finish(h, std::move(v));
}

bool PointToPoint::OnResult(Message&& m) {
  if (m.type() != proto::P2P_ACK) return false;
  MutexLock lock(ctx_.mu);
  OutboundSend* s = sends_.Find(m.envelope.request_id());
  if (!s) return true;  // late: a resend's answer crossed the first
  if (!m.envelope.received()) {
    sends_.Ack(m.envelope.request_id());
    return true;
  }
  s->received = true;
  learned_[s->to] = m.envelope.priority();
  sends_.Ack(m.envelope.request_id());
  if (m.envelope.has_error()) {
    s->error = StrCat("send to rank ", s->to.first, " (tag ", s->to.second, ", message ",
                      s->number + 1, ", ", Shape(s->dtype, s->bytes / DataTypeSize(s->dtype)),
                      ") refused: ", m.envelope.error().reason());
  }
  MaybeFinish(m.envelope.request_id());
  return true;
}

Handle PointToPoint::Recv(void* data, uint64_t count, DataType dtype, int src, int tag,
                          CompletionCallback done) {
  const int me = ctx_.rank, workers = ctx_.num_workers;
  FERRY_ENFORCE(src >= 0 && src < workers && src != me, ErrorCode::kInvalidArgument,
                "recv from rank ", src, " (tag ", tag, ", ", Shape(dtype, count), "): not another "
                "worker's rank (this is rank ", me, " of ", workers, ")");
  std::vector<Match> matches;
  Handle h = 0;
  {
    MutexLock lock(ctx_.mu);
    ctx_.CheckRunning("recv", PointToPointLabel(src, me, tag));
    h = ctx_.table.Add(std::move(done), PointToPointLabel(src, me, tag));
    Inbound& in = inbound_[{src, tag}];
    if (in.need > 0) in.need = next_need_[src]--;  // 0, -1, ...: its first receive's order
    in.posted[in.next_recv++] = PostedRecv{h, static_cast<uint8_t*>(data), count, dtype};
    ctx_.counters.p2p_receives++;
    matches = TakeMatches({src, tag}, in);
  }
  Deliver(std::move(matches));
  return h;
}

bool PointToPoint::Matched(const Inbound& in, uint32_t number) const {
  return number < in.matched_below || in.matched.count(number) > 0;
}

void PointToPoint::OnSend(Message&& m, const Origin& origin) {
  const proto::Envelope& e = m.envelope;
  std::vector<Match> matches;
  int src = -1;
  {
    MutexLock lock(ctx_.mu);
    const NodeTable& table = ctx_.cluster.table();
    if (!table.IsWorker(e.sender()) ||
        DataIdentity(origin.identity) != table.node(e.sender()).routing_id() ||
        e.epoch() != ctx_.epoch) {
      LOG_EVERY_N(WARNING, 100) << "dropped " << ferry::Describe(m)
                                << ": not from a worker of this membership epoch";
      return;
    }
    src = table.node(e.sender()).rank();
    Inbound& in = inbound_[{src, e.tag()}];
    const uint32_t number = e.round();
    if (Matched(in, number)) {  // a duplicate of a send a receive took: answer again
      auto refused = in.refused.find(number);
      Ack(origin.identity, e.request_id(), true, refused == in.refused.end() ? "" : refused->second,
          in.need);
      return;
    }
    if (e.probe() || in.arrived.count(number)) {  // held, its receive still to come
      if (in.arrived.count(number)) Ack(origin.identity, e.request_id(), false, "");
      return;
    }
    Arrival a;
    // Shared-memory slots go back to the sender once handled: a send whose receive waits is
    // copied from the slot during this handler (Deliver below); one that must wait for its
    // receive keeps a copy.
    const bool waits = !in.posted.count(number);
    a.bytes = m.payload.lent() && waits ? Buffer::CopyOf(m.payload.data(), m.payload.size())
                                        : std::move(m.payload);
    a.dtype = static_cast<DataType>(e.dtype());
    a.request = e.request_id();
    a.identity = origin.identity;
    ctx_.counters.p2p_bytes_received += a.bytes.size();
    in.arrived.emplace(number, std::move(a));
    matches = TakeMatches({src, e.tag()}, in);
    if (matches.empty()) Ack(origin.identity, e.request_id(), false, "");
  }
  Deliver(std::move(matches));
}

std::vector<PointToPoint::Match> PointToPoint::TakeMatches(const Channel& from, Inbound& in) {
  std::vector<Match> out;
  for (auto it = in.posted.begin(); it != in.posted.end();) {
    auto arrival = in.arrived.find(it->first);
    if (arrival == in.arrived.end()) {
      ++it;
      continue;
    }
    Match match{it->second, std::move(arrival->second), "", in.need};
    const uint64_t count = match.arrival.bytes.size() / DataTypeSize(match.arrival.dtype);
    if (match.arrival.dtype != match.recv.dtype || count != match.recv.count) {
      match.error = StrCat("rank ", ctx_.rank.load(), "'s recv from rank ", from.first, " (tag ",
                           from.second, ", message ", it->first + 1, ") expects ",
                           Shape(match.recv.dtype, match.recv.count), ", rank ", from.first,
                           " sent ", Shape(match.arrival.dtype, count));
      in.refused[it->first] = match.error;
    }
    in.matched.insert(it->first);
    while (in.matched.count(in.matched_below)) in.matched.erase(in.matched_below++);
    in.arrived.erase(arrival);
    ctx_.table.Hold(match.recv.handle);  // its buffer lives until the copy is done
    out.push_back(std::move(match));
    it = in.posted.erase(it);
  }
  return out;
}

void PointToPoint::Deliver(std::vector<Match> matches) {
  for (Match& m : matches) {
    if (m.error.empty() && !m.arrival.bytes.empty()) {
      std::memcpy(m.recv.data, m.arrival.bytes.data(), m.arrival.bytes.size());
    }
    Ack(m.arrival.identity, m.arrival.request, true, m.error, m.need);
    ctx_.table.Finish(m.recv.handle, m.error.empty() ? Verdict{}
                                                     : Verdict{ErrorCode::kInvalidArgument, m.error});
    ctx_.table.Unhold(m.recv.handle);
  }
}

void PointToPoint::Ack(const std::string& identity, uint64_t request, bool received,
                       const std::string& error, int32_t need) {
  Message ack = ctx_.NewMessage(proto::P2P_ACK);
  ack.envelope.set_request_id(request);
  ack.envelope.set_received(received);
  if (received) ack.envelope.set_priority(need);
  if (!error.empty()) {
    ack.envelope.mutable_error()->set_code(static_cast<int>(ErrorCode::kInvalidArgument));
    ack.envelope.mutable_error()->set_reason(error);
  }
  ctx_.van.Reply(identity, std::move(ack));
}

void PointToPoint::ResendOverdue(int64_t now_ms, std::vector<std::pair<int, Message>>* out) {
  (void)out;
  ctx_.mu.AssertHeld();
  sends_.ResendOverdue(
      now_ms, [](const OutboundSend& s) { return s.received; }, /*erase_skipped=*/false,
      [&](uint64_t request, OutboundSend& s) {
        ctx_.mu.AssertHeld();  // held by our caller (the analysis checks lambdas alone)
        ctx_.counters.p2p_resends++;
        const bool probe = s.acked;
        ctx_.van.Send(s.node, BuildSend(request, s, probe));
        return !probe && s.bytes > 0;
      });
}

void PointToPoint::AbandonInFlight() {
  ctx_.mu.AssertHeld();
  sends_.TakeAll();
  next_send_.clear();
  inbound_.clear();
  next_need_.clear();
  learned_.clear();
  epoch_++;
}

std::string PointToPoint::DescribeHandle(Handle h) const {
  ctx_.mu.AssertHeld();
  for (const auto& [request, s] : sends_.requests()) {
    if (s.handle != h) continue;
    const std::string what = StrCat("send to rank ", s.to.first, " (tag ", s.to.second,
                                    ", message ", s.number + 1, ")");
    if (s.received) return StrCat(what, ": ZeroMQ still holds its bytes");
    if (s.acked) {
      return StrCat(what, ": rank ", s.to.first, " holds it but never received it (no matching "
                    "recv from rank ", ctx_.rank.load(), " with tag ", s.to.second, ")");
    }
    return StrCat(what, ": rank ", s.to.first, " never acknowledged it (alive? reachable at its "
                  "DMLC_PORT?)");
  }
  for (const auto& [from, in] : inbound_) {
    for (const auto& [number, r] : in.posted) {
      if (r.handle != h) continue;
      return StrCat("recv from rank ", from.first, " (tag ", from.second, ", message ",
                    number + 1, ", ", Shape(r.dtype, r.count), "): rank ", from.first,
                    " never sent it (no matching send to rank ", ctx_.rank.load(), " with tag ",
                    from.second, ")");
    }
  }
  return "";
}

void PointToPoint::Start(const std::shared_ptr<Operation>& op) {
  LOG(FATAL) << "point-to-point operations are not sequenced (handle " << op->handle << ")";
}

std::string PointToPoint::Describe(const Operation& op) const {
  return StrCat("operation ", op.handle, " is not a point-to-point operation");
}

}  // namespace ferry
