#include "common/transport/shm_lane.h"

#include <glog/logging.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "common/util/error.h"
#include "common/util/logging.h"
#include "common/util/strings.h"

namespace ferry {

namespace {

constexpr uint64_t kAlign = ShmArena::kHeaderBytes;  // slots start on cache lines
constexpr size_t kProbeBytes = 4096;
constexpr char kProbeMagic[8] = {'f', 'e', 'r', 'r', 'y', 'p', 'r', 'b'};

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

uint64_t Nonce() {
  static thread_local std::mt19937_64 random(std::random_device{}() ^
                                             (static_cast<uint64_t>(std::random_device{}()) << 32));
  uint64_t n = 0;
  while (n == 0) n = random();
  return n;
}

// A slot's header (the first bytes of its 64): who holds it (shm_lane.h, Ownership).
struct SlotHeader {
  std::atomic<uint32_t> readers;  // peers holding it
  std::atomic<uint32_t> local;    // 1 while this process holds it (the shared arena's)
};
static_assert(sizeof(SlotHeader) <= ShmArena::kHeaderBytes, "a slot header fits in 64 bytes");

SlotHeader* HeaderAt(uint8_t* p) { return reinterpret_cast<SlotHeader*>(p); }

std::string Hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// The words of a channel header ("HELLO 12 ab01"), split at spaces.
std::vector<std::string> Words(const std::string& header) {
  std::vector<std::string> words;
  size_t start = 0;
  while (start <= header.size()) {
    size_t end = header.find(' ', start);
    if (end == std::string::npos) end = header.size();
    words.push_back(header.substr(start, end - start));
    start = end + 1;
  }
  return words;
}

// Holds a peer's slot for the Buffers over it: one reader less when the last lets go.
struct SlotHold {
  std::shared_ptr<MemfdSegment> segment;
  uint8_t* header;
  ~SlotHold() { HeaderAt(header)->readers.fetch_sub(1, std::memory_order_release); }
};

}  // namespace

std::string ShmListenName(const std::string& job_tag, int port) {
  return StrCat("ferry-", job_tag, "-", port);
}

// ---- ShmArena ----

ShmArena::ShmArena(std::string label, std::atomic<uint64_t>* reserved, uint64_t budget,
                   FdChannel* channel)
    : label_(std::move(label)),
      reserved_(reserved),
      budget_(budget),
      channel_(channel),
      first_id_(channel ? 1 : kSharedSegment + 1) {}

ShmArena::~ShmArena() {
  MutexLock lock(mu_);
  for (const Segment& s : segments_) reserved_->fetch_sub(s.memory->size());
}

bool ShmArena::Place(Segment& s, uint64_t extent, uint64_t* start) {
  for (auto it = s.busy.begin(); it != s.busy.end();) {
    SlotHeader* h = HeaderAt(s.memory->data() + it->first);
    if (h->readers.load(std::memory_order_acquire) == 0 &&
        h->local.load(std::memory_order_acquire) == 0) {
      it = s.busy.erase(it);
    } else {
      ++it;
    }
  }
  uint64_t at = 0;
  for (const auto& [begin, bytes] : s.busy) {
    if (begin - at >= extent) break;
    at = begin + bytes;
  }
  if (s.memory->size() - at < extent) return false;
  *start = at;
  return true;
}

bool ShmArena::PlaceSlot(uint64_t bytes, size_t* index, uint64_t* header) {
  const uint64_t extent = kHeaderBytes + RoundUp(bytes, kAlign);
  for (*index = 0; *index < segments_.size(); ++*index) {
    if (Place(segments_[*index], extent, header)) break;
  }
  if (*index == segments_.size()) {
    // A new segment: the usual size (a quarter of a small budget), or what this message
    // needs, within the budget.
    const uint64_t size =
        RoundUp(std::max(extent, std::min<uint64_t>(kSegmentBytes, budget_ / 4)), 1 << 21);
    uint64_t before = reserved_->load();
    do {
      if (before + size > budget_) return false;
    } while (!reserved_->compare_exchange_weak(before, before + size));
    Segment s;
    const uint32_t id = first_id_ + static_cast<uint32_t>(segments_.size());
    try {
      s.memory = MemfdSegment::Create(StrCat(label_, "-", id & ~kSharedSegment), size);
      if (channel_) channel_->Send(StrCat("SEGMENT ", id, " ", s.memory->size()), s.memory->fd());
    } catch (...) {
      reserved_->fetch_sub(size);
      throw;
    }
    reserved_->fetch_add(s.memory->size() - size);  // Create rounds up to whole pages
    segments_.push_back(std::move(s));
    *header = 0;
  }
  segments_[*index].busy.emplace(*header, extent);
  return true;
}

bool ShmArena::Allocate(uint64_t bytes, Slot* slot) {
  MutexLock lock(mu_);
  size_t index;
  if (!PlaceSlot(bytes, &index, &slot->header)) return false;
  uint8_t* base = segments_[index].memory->data();
  HeaderAt(base + slot->header)->local.store(0, std::memory_order_relaxed);
  HeaderAt(base + slot->header)->readers.store(1, std::memory_order_relaxed);
  slot->segment = first_id_ + static_cast<uint32_t>(index);
  slot->offset = slot->header + kHeaderBytes;
  slot->data = base + slot->offset;
  return true;
}

Buffer ShmArena::AllocateShared(uint64_t bytes) {
  // The owner: when the last holder lets go, the slot is ours no more (`local` 0).
  struct Owner {
    std::shared_ptr<ShmArena> arena;
    ~Owner() { arena->ReleaseLocal(this); }
  };
  auto owner = std::make_shared<Owner>();
  owner->arena = shared_from_this();
  uint8_t* data = nullptr;
  {
    MutexLock lock(mu_);
    size_t index;
    uint64_t header;
    try {
      if (!PlaceSlot(bytes, &index, &header)) return Buffer();
    } catch (const FerryError& e) {
      LOG_FIRST_N(WARNING, 1) << label_ << ": " << e.what() << "; sums stay in the heap";
      return Buffer();
    }
    uint8_t* base = segments_[index].memory->data();
    HeaderAt(base + header)->readers.store(0, std::memory_order_relaxed);
    HeaderAt(base + header)->local.store(1, std::memory_order_relaxed);
    held_[owner.get()] = Held{index, header};
    data = base + header + kHeaderBytes;
  }
  return Buffer(data, bytes, std::move(owner));
}

void ShmArena::ReleaseLocal(const void* owner) {
  MutexLock lock(mu_);
  auto it = held_.find(owner);
  if (it == held_.end()) return;  // the Buffer of a failed AllocateShared
  HeaderAt(segments_[it->second.segment].memory->data() + it->second.header)
      ->local.store(0, std::memory_order_release);
  held_.erase(it);
}

bool ShmArena::Lend(const Buffer& payload, Slot* slot) {
  if (!payload.owner()) return false;
  MutexLock lock(mu_);
  auto it = held_.find(payload.owner().get());
  if (it == held_.end()) return false;
  Segment& s = segments_[it->second.segment];
  HeaderAt(s.memory->data() + it->second.header)->readers.fetch_add(1, std::memory_order_relaxed);
  slot->segment = first_id_ + static_cast<uint32_t>(it->second.segment);
  slot->header = it->second.header;
  slot->offset = static_cast<uint64_t>(payload.bytes() - s.memory->data());
  slot->data = payload.bytes();
  return true;
}

void ShmArena::Unlend(const Slot& slot) {
  MutexLock lock(mu_);
  HeaderAt(segments_[slot.segment - first_id_].memory->data() + slot.header)
      ->readers.fetch_sub(1, std::memory_order_release);
}

const MemfdSegment* ShmArena::SegmentOf(uint32_t id) const {
  MutexLock lock(mu_);
  const uint32_t index = id - first_id_;
  return index < segments_.size() ? segments_[index].memory.get() : nullptr;
}

// ---- ShmLanes ----

struct ShmLanes::Lane {
  std::unique_ptr<FdChannel> channel;
  bool on = false;            // Encode may use it
  uint64_t hello_nonce = 0;   // worker: the HELLO's, until accepted
  int peer = -1;              // worker: the server's node id
  bool probed = false;        // worker: the probe was mapped and SHM_READY sent
  bool unsettled = false;     // worker: counted in unsettled_ until on or ended
  std::atomic<bool> broken{false};  // a segment could not be made: TCP from now on
  std::map<uint32_t, std::shared_ptr<MemfdSegment>> peer_segments;  // the peer's, by id
  std::shared_ptr<ShmArena> arena;  // ours for this peer (after the channel: dies first)
  Mutex announce_mu;                // AnnounceShared's
  uint32_t shared_announced GUARDED_BY(announce_mu) = 0;  // the shared arena's segments sent
};

struct ShmLanes::Pending {
  std::unique_ptr<FdChannel> channel;
  uint64_t hello_nonce = 0;  // 0 until the HELLO came
  uint64_t probe_nonce = 0;
  std::string identity;      // the routing id the HELLO claimed
  std::unique_ptr<MemfdSegment> probe;
};

ShmLanes::ShmLanes(ShmOptions options, std::string van_name)
    : options_(std::move(options)), name_(std::move(van_name)) {}

ShmLanes::~ShmLanes() = default;

std::string ShmLanes::PeerKey(int peer) { return StrCat("\x02node ", peer); }

void ShmLanes::Listen(int port) {
  const std::string name = ShmListenName(options_.job_tag, port);
  try {
    listener_ = FdListener::Listen(name);
    shared_ = std::make_shared<ShmArena>(StrCat("ferry-", name_, "-sums"), &reserved_,
                                         options_.budget_bytes, nullptr);
  } catch (const FerryError& e) {
    LOG(WARNING) << name_ << ": no shared-memory lane (" << e.what() << "); TCP only";
  }
}

void ShmLanes::Open(int peer, const std::string& endpoint, const std::string& routing_id) {
  const size_t colon = endpoint.rfind(':');
  auto lane = std::make_shared<Lane>();
  try {
    if (colon != std::string::npos && !routing_id.empty()) {
      lane->channel = FdChannel::Connect(
          ShmListenName(options_.job_tag, std::atoi(endpoint.c_str() + colon + 1)));
    }
    if (lane->channel) {  // else nobody listens there in this namespace: another host
      lane->peer = peer;
      lane->hello_nonce = Nonce();
      lane->channel->Send(StrCat("HELLO ", lane->hello_nonce, " ", Hex(routing_id)));
    }
  } catch (const FerryError& e) {
    LOG(WARNING) << name_ << ": no shared-memory lane to node " << peer << ": " << e.what();
    lane->channel.reset();
  }
  if (!lane->channel) {
    unsettled_--;
    return;
  }
  lane->unsettled = true;
  MutexLock lock(mu_);
  lanes_[PeerKey(peer)] = std::move(lane);
}

bool ShmLanes::WaitSettled(int timeout_ms) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (unsettled_.load() > 0) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

std::vector<int> ShmLanes::PollFds() const {
  std::vector<int> fds;
  if (listener_) fds.push_back(listener_->fd());
  MutexLock lock(mu_);
  for (const auto& p : pending_) fds.push_back(p->channel->fd());
  for (const auto& [key, lane] : lanes_) fds.push_back(lane->channel->fd());
  return fds;
}

void ShmLanes::Accept() {
  std::unique_ptr<FdChannel> channel = listener_->Accept(0);
  if (!channel) return;
  auto p = std::make_unique<Pending>();
  p->channel = std::move(channel);
  MutexLock lock(mu_);
  pending_.push_back(std::move(p));
}

void ShmLanes::OnReadable(int fd, std::vector<Outgoing>* out) {
  if (listener_ && fd == listener_->fd()) {
    Accept();
    return;
  }
  MutexLock lock(mu_);
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if ((*it)->channel->fd() != fd) continue;
    try {
      OnServerChannel(**it);
    } catch (const FerryError& e) {
      // Closed, or refused: dropped with its channel.
      VLOG(1) << name_ << ": a shared-memory channel ended before its probe: " << e.what();
      pending_.erase(it);
    }
    return;
  }
  for (auto& [key, lane] : lanes_) {
    if (lane->channel->fd() != fd) continue;
    const std::string ended = key;
    try {
      if (lane->peer >= 0 && !lane->probed) {
        OnWorkerChannel(*lane, out);
        return;
      }
      if (DrainSegments(*lane)) return;
    } catch (const FerryError& e) {
      LOG(WARNING) << name_ << ": the shared-memory lane to "
                   << (lane->peer >= 0 ? StrCat("node ", lane->peer) : std::string("a worker"))
                   << " ends: " << e.what();
    }
    EndLane(ended);
    return;
  }
}

void ShmLanes::OnServerChannel(Pending& p) {
  FdChannel::Received r = p.channel->Receive(0);
  if (r.fd >= 0) close(r.fd);
  const std::vector<std::string> w = Words(r.header);
  if (p.hello_nonce != 0 || w.size() != 3 || w[0] != "HELLO") {
    NoteRefused(StrCat("a shared-memory channel said '", r.header.substr(0, 40),
                       "' where a HELLO was due"));
    throw FerryError(ErrorCode::kBadMessage, "not a HELLO");
  }
  p.hello_nonce = std::strtoull(w[1].c_str(), nullptr, 10);
  p.identity = w[2];
  p.probe_nonce = Nonce();
  p.probe = MemfdSegment::Create("ferry-probe", kProbeBytes);
  std::memcpy(p.probe->data(), kProbeMagic, sizeof kProbeMagic);
  std::memcpy(p.probe->data() + sizeof kProbeMagic, &p.probe_nonce, sizeof p.probe_nonce);
  p.channel->Send("PROBE", p.probe->fd());
}

void ShmLanes::OnWorkerChannel(Lane& lane, std::vector<Outgoing>* out) {
  FdChannel::Received r = lane.channel->Receive(0);
  FERRY_ENFORCE(r.header == "PROBE" && r.fd >= 0, ErrorCode::kBadMessage,
                "the server's first fd message is not a probe");
  std::unique_ptr<MemfdSegment> probe = MemfdSegment::Map(r.fd, kProbeBytes);
  FERRY_ENFORCE(std::memcmp(probe->data(), kProbeMagic, sizeof kProbeMagic) == 0,
                ErrorCode::kBadMessage, "the probe segment does not hold a probe");
  Message m = MakeMessage(proto::SHM_READY, -1);
  m.envelope.mutable_shm_probe()->set_hello_nonce(lane.hello_nonce);
  uint64_t probe_nonce;
  std::memcpy(&probe_nonce, probe->data() + sizeof kProbeMagic, sizeof probe_nonce);
  m.envelope.mutable_shm_probe()->set_probe_nonce(probe_nonce);
  lane.probed = true;
  out->push_back(Outgoing{lane.peer, "", std::move(m)});
}

void ShmLanes::OnReady(const std::string& key, const Message& m, std::vector<Outgoing>* out) {
  const proto::ShmProbe& probe = m.envelope.shm_probe();
  MutexLock lock(mu_);
  auto lane_it = lanes_.find(key);
  if (lane_it != lanes_.end() && lane_it->second->peer >= 0) {
    // Worker: the server's answer.
    Lane& lane = *lane_it->second;
    if (lane.on || !lane.probed || probe.hello_nonce() != lane.hello_nonce) return;
    if (!probe.accepted()) {
      // Our channel reached another process than this server (another host's port).
      EndLane(key);
      return;
    }
    lane.arena = std::make_shared<ShmArena>(StrCat("ferry-", name_, "-to-node-", lane.peer),
                                            &reserved_, options_.budget_bytes, lane.channel.get());
    lane.on = true;
    if (lane.unsettled) {
      lane.unsettled = false;
      unsettled_--;
    }
    counters_.shm_lanes++;
    VLOG(1) << name_ << ": shared-memory lane to node " << lane.peer << " is on";
    return;
  }
  // Server: a worker's echo.
  Message answer = MakeMessage(proto::SHM_READY, -1);
  answer.envelope.mutable_shm_probe()->set_hello_nonce(probe.hello_nonce());
  auto it = std::find_if(pending_.begin(), pending_.end(), [&](const auto& p) {
    return p->hello_nonce != 0 && p->hello_nonce == probe.hello_nonce();
  });
  const bool proven = it != pending_.end() && (*it)->probe_nonce == probe.probe_nonce() &&
                      probe.probe_nonce() != 0 && (*it)->identity == Hex(key);
  if (!proven) {
    // Not the process that holds the channel (or a forgery): that channel, if any, stays
    // pending until it closes; the sender stays on TCP.
    NoteRefused("an SHM_READY whose nonces or routing id do not match a probe of this server");
    answer.envelope.mutable_shm_probe()->set_accepted(false);
    out->push_back(Outgoing{-1, key, std::move(answer)});
    return;
  }
  auto lane = std::make_shared<Lane>();
  lane->channel = std::move((*it)->channel);
  pending_.erase(it);
  lane->arena = std::make_shared<ShmArena>(StrCat("ferry-", name_, "-to-worker"), &reserved_,
                                           options_.budget_bytes, lane->channel.get());
  lane->on = true;
  if (lanes_.count(key)) EndLane(key);  // the worker probed again: the new lane replaces it
  lanes_[key] = std::move(lane);
  counters_.shm_lanes++;
  answer.envelope.mutable_shm_probe()->set_accepted(true);
  out->push_back(Outgoing{-1, key, std::move(answer)});
}

bool ShmLanes::DrainSegments(Lane& lane) {
  while (true) {
    FdChannel::Received r;
    try {
      r = lane.channel->Receive(0);
    } catch (const FerryError& e) {
      if (e.code() == ErrorCode::kTimeout) return true;  // nothing more waiting
      if (e.code() == ErrorCode::kPeerFailed) return false;
      throw;
    }
    const std::vector<std::string> w = Words(r.header);
    if (w.size() != 3 || w[0] != "SEGMENT" || r.fd < 0) {
      if (r.fd >= 0) close(r.fd);
      throw FerryError(ErrorCode::kBadMessage,
                       StrCat("an fd message '", r.header.substr(0, 40), "' is not a segment"));
    }
    const uint32_t id = static_cast<uint32_t>(std::strtoul(w[1].c_str(), nullptr, 10));
    lane.peer_segments[id] = MemfdSegment::Map(r.fd, std::strtoull(w[2].c_str(), nullptr, 10));
  }
}

void ShmLanes::EndLane(const std::string& key) {
  auto it = lanes_.find(key);
  if (it == lanes_.end()) return;
  if (it->second->unsettled) unsettled_--;
  lanes_.erase(it);
}

void ShmLanes::NoteRefused(const std::string& why) {
  const uint64_t n = ++counters_.shm_refused;
  if (n <= 10 || n % 1000 == 0) {
    LOG(WARNING) << name_ << ": refused: " << why << " (" << n << " refused so far)";
  }
}

bool ShmLanes::Encode(const std::string& key, Message* m) {
  if (m->payload.empty()) return false;
  std::shared_ptr<Lane> lane;
  {
    MutexLock lock(mu_);
    auto it = lanes_.find(key);
    if (it == lanes_.end() || !it->second->on) return false;
    lane = it->second;
  }
  if (lane->broken.load(std::memory_order_relaxed)) return false;
  const uint64_t bytes = m->payload.size();
  ShmArena::Slot slot;
  auto describe = [&] {
    proto::ShmSlot* d = m->envelope.mutable_shm_slot();
    d->set_segment(slot.segment);
    d->set_header(slot.header);
    d->set_offset(slot.offset);
    d->set_bytes(bytes);
    m->payload = Buffer();  // the caller's bytes (or its hold of a shared slot) are free now
    counters_.shm_sent++;
    counters_.shm_bytes_sent += bytes;
  };
  if (shared_ && shared_->Lend(m->payload, &slot)) {
    if (AnnounceShared(*lane, slot.segment)) {
      describe();
      counters_.shm_lent++;
      return true;
    }
    shared_->Unlend(slot);  // the channel failed: the peer is going; TCP for this one
    return false;
  }
  bool placed = false;
  try {
    placed = lane->arena->Allocate(bytes, &slot);
  } catch (const FerryError& e) {
    lane->broken = true;
    if (!warned_.exchange(true)) {
      LOG(WARNING) << name_ << ": shared memory is short (" << e.what()
                   << "): tensor bytes to this peer go over TCP from now on";
    }
  }
  if (!placed) {
    if (counters_.shm_fallbacks++ == 0 && !lane->broken) {
      LOG(WARNING) << name_ << ": a message of " << bytes << " bytes found no room within "
                   << "FERRY_SHM_BYTES=" << options_.budget_bytes << " (" << reserved_.load()
                   << " reserved): it and any others that find none go over TCP (counted "
                   << "in van.shm_fallbacks); a larger FERRY_SHM_BYTES keeps them in shared memory";
    }
    return false;
  }
  std::memcpy(slot.data, m->payload.data(), bytes);
  describe();
  return true;
}

bool ShmLanes::AnnounceShared(Lane& lane, uint32_t id) {
  MutexLock lock(lane.announce_mu);
  try {
    while (ShmArena::kSharedSegment + lane.shared_announced < id) {
      const uint32_t next = ShmArena::kSharedSegment + lane.shared_announced + 1;
      const MemfdSegment* segment = shared_->SegmentOf(next);
      if (!segment) return false;
      lane.channel->Send(StrCat("SEGMENT ", next, " ", segment->size()), segment->fd());
      lane.shared_announced++;
    }
  } catch (const FerryError&) {
    return false;
  }
  return true;
}

Buffer ShmLanes::AllocateShared(uint64_t bytes) {
  if (!shared_ || counters_.shm_lanes.load(std::memory_order_relaxed) == 0) return Buffer();
  return shared_->AllocateShared(bytes);
}

Status ShmLanes::Resolve(const std::string& key, Message* m) {
  const proto::ShmSlot& d = m->envelope.shm_slot();
  auto refuse = [&](const std::string& why) {
    counters_.shm_refused++;
    return BadMessageError(StrCat("shared-memory descriptor (segment ", d.segment(), ", offset ",
                                  d.offset(), ", ", d.bytes(), " bytes) refused: ", why));
  };
  MutexLock lock(mu_);
  auto lane_it = lanes_.find(key);
  if (lane_it == lanes_.end()) return refuse("no shared-memory lane with this peer");
  Lane& lane = *lane_it->second;
  auto it = lane.peer_segments.find(d.segment());
  if (it == lane.peer_segments.end()) {
    // Announced before the message was sent: in the channel by now.
    try {
      DrainSegments(lane);
    } catch (const FerryError& e) {
      return refuse(e.what());
    }
    it = lane.peer_segments.find(d.segment());
    if (it == lane.peer_segments.end()) return refuse("no such segment");
  }
  const std::shared_ptr<MemfdSegment>& segment = it->second;
  if (d.header() % kAlign != 0 || d.offset() < d.header() + ShmArena::kHeaderBytes) {
    return refuse(StrCat("no slot header (at multiples of ", kAlign, ") before the bytes"));
  }
  if (d.bytes() == 0 || !segment->Contains(d.offset(), d.bytes())) {
    return refuse(StrCat("outside the segment's ", segment->size(), " bytes"));
  }
  auto hold = std::make_shared<SlotHold>();
  hold->segment = segment;
  hold->header = segment->data() + d.header();
  m->payload = Buffer::Lent(segment->data() + d.offset(), d.bytes(), hold);
  counters_.shm_received++;
  return Status::Ok();
}

}  // namespace ferry
