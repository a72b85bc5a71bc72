#pragma once

// The shared-memory lane of a Van (docs/design/shm-lane.md): between a worker and a
// server proven to be on one host, tensor bytes move through shared memory and the ZeroMQ
// connection carries only the message, with a descriptor (Envelope.shm_slot) where the
// payload frame would be. Below the roles: a handler sees an ordinary Message whose payload
// is a Buffer over the peer's shared memory (Buffer::Lent).
//
// Proof of one host (the probe). Every server's Van listens on an FdChannel named after the
// job and its port (ShmListenName). A worker's Van, connecting to a server, tries a channel to
// that name and sends HELLO(its routing id, nonce A). The listener answers with a probe
// segment (a memfd holding nonce B). The worker maps it and sends SHM_READY(A, B) over its
// ZeroMQ data connection to the server; the server turns the lane on only when that ZeroMQ
// message, from the routing id the HELLO claimed, carries both nonces, and answers
// SHM_READY(accepted). So the channel and the ZeroMQ connection provably reach the same
// process (a channel can reach the wrong listener: servers of two emulated hosts may share a
// port number; the wrong one never sees the echo). The worker uses the lane once accepted.
// Abstract sockets are scoped to the network namespace: the emulated hosts of
// scripts/netns-cluster (one namespace each) never reach each other's listeners, so the lane
// never bypasses a shaped link. With FERRY_SECRET, SHM_READY travels CURVE-authenticated like
// every message: only a peer that proved the secret gets a segment (the probe holds a nonce
// only; arena segments are passed once the lane is on).
//
// Ownership (the invariant; ShmLaneTest checks it). A slot's header counts its holders:
// `readers` (peers holding it: each descriptor sent adds one, each receiver's release takes
// one) and `local` (1 while this process holds it); the sender reuses a slot only when both
// are 0.
//  - Sending, the Van copies the payload into a slot of its arena for that peer (ShmArena;
//    readers 1) and drops the caller's Buffer: the caller's bytes are released when Send
//    returns, as when ZeroMQ has sent them.
//  - Except a payload already in the shared arena (AllocateShared: a server's sum, made
//    there when a same-host worker pushed it): it is lent as it is, one reader per peer it is
//    sent to, and its segment is announced to that peer first (once). TCP peers get the same
//    bytes through ZeroMQ. The slot's `local` stays 1 while the server holds the sum (its
//    replies, last_sums for resends).
//  - Receiving, the payload is a lent Buffer over the slot; when its last holder lets go, the
//    slot's readers drop by one. A holder that would keep the bytes copies them (Buffer::Lent).
//  - A segment stays mapped while the lane or any Buffer over it lives.
//  - A peer that dies holding a shared slot leaves it counted (the job ends on a death today;
//    elastic training will have to release a dead peer's readers).
//  - A lane ends when its channel closes (the peer's process ended, kill -9 included): the
//    arena for that peer is dropped. Segments are memfds: nothing is left behind anywhere.
//
// Fallback: no lane (TCP) with FERRY_SHM=0, when no listener answers or the probe fails; per
// message, a payload for which the arena has no slot within FERRY_SHM_BYTES goes over TCP
// (counted: shm_fallbacks; the first one is warned about). A segment that cannot be made
// (memory short) is warned about once; the lane then stays on TCP.
//
// Threads: Encode runs on the sending thread (any; the copy happens there), everything else
// on the Van's IO thread. Lanes are shared_ptrs taken under mu_, so a lane that ends while
// another thread encodes into it lives until that thread is done.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/transport/fd_channel.h"
#include "common/transport/memfd_segment.h"
#include "common/transport/message.h"
#include "common/util/mutex.h"

namespace ferry {

// The lane's counters (van.<name> in a node's stats):
//   shm_lanes            peers whose lane turned on (a count: lanes that ended stay counted)
//   shm_sent, shm_bytes_sent   messages and payload bytes sent through shared memory
//   shm_received         messages received through shared memory
//   shm_lent             ... of them sent without a copy (from the shared arena)
//   shm_fallbacks        payloads sent over TCP to a lane peer: no slot within the budget
//   shm_refused          probes refused (wrong nonce or routing id) and descriptors refused
#define FERRY_SHM_COUNTERS(X)                                                          \
  X(shm_lanes) X(shm_sent) X(shm_bytes_sent) X(shm_lent) X(shm_received) X(shm_fallbacks) \
      X(shm_refused)

struct ShmOptions {
  bool enabled = false;       // FERRY_SHM
  uint64_t budget_bytes = 0;  // FERRY_SHM_BYTES: every arena of this Van together
  std::string job_tag;        // part of the listener's name: jobs on one host never meet
};

// The abstract name of the listener of the server bound at `port` in job `job_tag`.
std::string ShmListenName(const std::string& job_tag, int port);

// Slots in memfd segments: [64-byte header | bytes], placed first-fit. A lane's arena (one
// per peer) announces each segment over the lane's channel when it makes it; the shared
// arena (segment ids from kSharedSegment) is announced to each peer by ShmLanes::Encode
// before the first descriptor into it. Thread-safe. Made with std::make_shared (the Buffers
// of AllocateShared keep it alive).
class ShmArena : public std::enable_shared_from_this<ShmArena> {
 public:
  struct Slot {
    uint32_t segment = 0;  // ids from 1 (a lane's) or kSharedSegment + 1 (the shared arena)
    uint64_t header = 0;   // offset of the slot's header in the segment
    uint64_t offset = 0;   // of the bytes in the segment
    uint8_t* data = nullptr;
  };
  static constexpr uint64_t kHeaderBytes = 64;
  static constexpr uint64_t kSegmentBytes = 64ull << 20;  // at most a quarter of the budget
  static constexpr uint32_t kSharedSegment = 0x80000000u;

  // `reserved` counts the bytes of every arena of the Van against `budget`. `channel`: the
  // lane's (announce each segment there); null: the shared arena.
  ShmArena(std::string label, std::atomic<uint64_t>* reserved, uint64_t budget, FdChannel* channel);
  ~ShmArena();
  // A lane's arena: a slot for `bytes` bytes with one reader; false when none is free and
  // no new segment fits in the budget. Throws FerryError when a new segment cannot be made
  // or announced.
  bool Allocate(uint64_t bytes, Slot* slot) EXCLUDES(mu_);
  // The shared arena: `bytes` bytes in a slot this process holds until the Buffer's last
  // holder lets go; empty when none fits (or a segment cannot be made).
  Buffer AllocateShared(uint64_t bytes) EXCLUDES(mu_);
  // The shared arena: when `payload` lies in a slot of AllocateShared's, counts one more
  // reader and describes the payload; false otherwise. Unlend takes the reader back.
  bool Lend(const Buffer& payload, Slot* slot) EXCLUDES(mu_);
  void Unlend(const Slot& slot) EXCLUDES(mu_);
  // Segment `id` of this arena, or null (for announcing it; segments live as long as the arena).
  const MemfdSegment* SegmentOf(uint32_t id) const EXCLUDES(mu_);

 private:
  struct Segment {
    std::unique_ptr<MemfdSegment> memory;
    std::map<uint64_t, uint64_t> busy;  // extent start (the header) -> extent bytes
  };
  struct Held {  // a slot of AllocateShared's, by its Buffer's owner
    size_t segment;
    uint64_t header;
  };
  // Reclaims the extents nobody holds any more, then places `extent` bytes first-fit.
  static bool Place(Segment& s, uint64_t extent, uint64_t* start);
  // Places `bytes` (a new segment if needed): segment index and header offset.
  bool PlaceSlot(uint64_t bytes, size_t* index, uint64_t* header) REQUIRES(mu_);
  void ReleaseLocal(const void* owner) EXCLUDES(mu_);  // AllocateShared's Buffer let go

  const std::string label_;
  std::atomic<uint64_t>* const reserved_;
  const uint64_t budget_;
  FdChannel* const channel_;  // a lane's; announcements are sent under mu_
  const uint32_t first_id_;   // 1, or kSharedSegment + 1
  mutable Mutex mu_;
  std::vector<Segment> segments_ GUARDED_BY(mu_);
  std::unordered_map<const void*, Held> held_ GUARDED_BY(mu_);
};

class ShmLanes {
 public:
  struct Counters {
#define FERRY_SHM_COUNTER(name) std::atomic<uint64_t> name{0};
    FERRY_SHM_COUNTERS(FERRY_SHM_COUNTER)
#undef FERRY_SHM_COUNTER
  };
  // A message for the Van to send: to outbound peer `peer`, or as a reply to `identity`.
  struct Outgoing {
    int peer = -1;
    std::string identity;
    Message message;
  };

  ShmLanes(ShmOptions options, std::string van_name);
  ~ShmLanes();

  // Lane keys: an outbound peer's, and an inbound node's (its data routing id).
  static std::string PeerKey(int peer);

  // IO thread. Server: listen for channels of the ROUTER bound at `port`.
  void Listen(int port);
  // IO thread. Worker: after connecting outbound `peer` at `endpoint` as `routing_id`: try a
  // channel to its listener and say HELLO. ExpectOpen, on the thread that asks for the
  // connection, counts it first, so WaitSettled waits for it too.
  void ExpectOpen() { unsettled_++; }
  void Open(int peer, const std::string& endpoint, const std::string& routing_id);
  // Waits until every lane expected is on or was found impossible (no listener, probe
  // refused), at most `timeout_ms`; false on timeout. A worker waits after connecting to
  // its servers, so its first push already takes the lane.
  bool WaitSettled(int timeout_ms) const;

  // IO thread: the descriptors to poll, and what to do when one is readable.
  std::vector<int> PollFds() const EXCLUDES(mu_);
  void OnReadable(int fd, std::vector<Outgoing>* out) EXCLUDES(mu_);
  // IO thread: an SHM_READY from `key` (an inbound node's routing id, or PeerKey), which
  // the Van consumes. The server's answer, if any, goes into `out`.
  void OnReady(const std::string& key, const Message& m, std::vector<Outgoing>* out)
      EXCLUDES(mu_);

  // Any thread: when `key`'s lane is on and `m` has a payload, lends it (in the shared
  // arena) or copies it into a slot, and replaces it by the descriptor. Returns whether it
  // did (else `m` goes as it is).
  bool Encode(const std::string& key, Message* m) EXCLUDES(mu_);
  // Any thread: bytes in the shared arena (a server's sum that same-host workers will read
  // without a copy); empty when no lane is on or the budget has no room.
  Buffer AllocateShared(uint64_t bytes);
  // IO thread: `m` arrived from `key` with a descriptor: its payload becomes the lent slot.
  // A descriptor from a peer without a lane, of an unknown segment or outside one is
  // refused with the reason.
  Status Resolve(const std::string& key, Message* m) EXCLUDES(mu_);

  const Counters& counters() const { return counters_; }

 private:
  struct Lane;
  struct Pending;  // a server's channel before its SHM_READY
  void Accept();
  void OnWorkerChannel(Lane& lane, std::vector<Outgoing>* out) REQUIRES(mu_);
  void OnServerChannel(Pending& pending) REQUIRES(mu_);
  // Takes the segments waiting on `lane`'s channel (announcements). False when it closed.
  bool DrainSegments(Lane& lane) REQUIRES(mu_);
  // Announces the shared arena's segments up to `id` to `lane` (once each). False when the
  // channel failed.
  bool AnnounceShared(Lane& lane, uint32_t id);
  void EndLane(const std::string& key) REQUIRES(mu_);
  void NoteRefused(const std::string& why);

  const ShmOptions options_;
  const std::string name_;
  std::unique_ptr<FdListener> listener_;  // servers; IO thread
  std::atomic<uint64_t> reserved_{0};     // arenas' bytes, against the budget
  std::atomic<bool> warned_{false};       // about a segment that could not be made
  std::atomic<int> unsettled_{0};         // lanes expected, neither on nor given up
  std::shared_ptr<ShmArena> shared_;      // sums read by every same-host peer (servers)
  mutable Mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Lane>> lanes_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Pending>> pending_ GUARDED_BY(mu_);
  Counters counters_;
};

}  // namespace ferry
