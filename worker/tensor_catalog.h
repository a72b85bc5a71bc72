#pragma once

// TensorCatalog: a worker's tensors (declarations in forward order), their cuts into
// partitions for every partition size used so far (layouts), the placement of those
// partitions on servers, and each partition's next round.
//
// Layouts: a tensor cut with another partition size uses fresh keys (a layout
// generation in the key, common/transport/message.h), because a server fixes a key's
// length at its first push. Cutting in id order makes the placement a function of the
// declarations and the size alone, so every worker computes the same whenever it
// switches, and switching back reuses a layout's keys and rounds.
// Invariant: the current layout has cut every current declaration; every layout cuts
// tensors in id order.
//
// Re-declarations: a name used with another dtype or element count than its declaration
// gets a new declaration: the next id (fresh keys, round 0), cut and placed anew after
// the old one's bytes were released from every layout's placement (Placement::Release).
// Every worker makes the same declarations in the same order, so every worker computes
// the same ids and placement (servers still compare the tensor hash per key, so workers
// that disagree fail with the reason). The old declaration is `superseded`: its
// operations already submitted still run on its keys; once none is left its owner
// retires it (Retire: gone from the catalog; the Worker tells the servers, which free its
// keys). Ids are never reused, so a key never means two declarations.
// Invariant: a name maps to its current declaration; a superseded declaration is in no
// layout's placement and is never cut again.
//
// Not thread-safe: its owner (the Worker) guards it with its lock.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/compress/compression_spec.h"
#include "common/reduce/reduce.h"
#include "worker/placement.h"
#include "ferry.pb.h"

namespace ferry {

// A tensor cut in one layout.
struct Cut {
  std::vector<PartitionSpec> parts;  // empty: not cut in this layout yet
  std::vector<uint32_t> rounds;      // next round, per partition
};

struct TensorInfo {
  uint32_t id = 0;  // the declaration index
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  uint64_t count = 0;
  uint64_t bytes = 0;
  uint64_t hash = 0;  // TensorHash: servers compare it across workers
  int priority = 0;
  std::vector<Cut> cuts;              // by layout generation
  std::vector<uint32_t> rows_rounds;  // by server rank: next round of its rows key (lazy)
  bool superseded = false;            // its name belongs to a later declaration
  // An operation of it ended (a deadline, a refusal) with requests possibly still on their
  // way, or a server refused it (telling the servers of its retirement would mask the
  // refusal's reason for a worker whose push is still coming): its retirement is not told
  // to the servers (sequencer.h).
  bool requests_out = false;
  // A process set's tensor (Worker::DeclareInProcessSet): its members' mask
  // (common/types/process_set.h) and their number, which averages divide by. Empty and 0:
  // the global set (every worker).
  std::string members;
  int set_size = 0;
  // Backup workers: the ranks its last completed push_pull's sums left out (a rank mask;
  // empty: none). Under WorkerContext::mu.
  std::string last_left_out;
  // Compression chosen for this tensor by a binding (Worker::SetCompression), which wins
  // over FERRY_COMPRESSION; unset: FERRY_COMPRESSION decides (push_compression.h).
  std::optional<CompressionSpec> compression;
};

std::string ShapeString(const std::vector<int64_t>& shape);

// Process sets: set `s` (1..255) declares ids from s << 24, so that its keys never meet the
// global set's (ids below 1 << 24) nor another set's, whatever each worker declared.
constexpr int kMaxProcessSets = 255;
constexpr uint32_t kIdsPerProcessSet = 1u << 24;
inline uint32_t ProcessSetFirstId(int set) { return static_cast<uint32_t>(set) << 24; }
inline int ProcessSetOfId(uint32_t id) { return static_cast<int>(id >> 24); }

class TensorCatalog {
 public:
  // `partition_bytes`: the first layout's; `server_weights`: placement weights by rank.
  // `fixed_layouts`: refuse re-declarations (asynchronous training: the servers keep the
  // keys' parameters).
  // `first_id`: the first declaration's id (a process set's catalog: ProcessSetFirstId).
  TensorCatalog(uint64_t partition_bytes, std::vector<double> server_weights,
                bool fixed_layouts = false, uint32_t first_id = 0);

  // Declares a tensor (see Worker::DeclareTensor): a new name gets the next id and is
  // cut in the current layout; a known one with the same dtype and element count is
  // the same declaration (its priority is updated when given); a known one with another
  // is re-declared (see above), and the declaration it supersedes goes to
  // `*superseded` (when given). Throws FerryError (kInvalidArgument), changing nothing.
  std::shared_ptr<TensorInfo> Declare(const std::string& name, DataType dtype,
                                      const std::vector<int64_t>& shape,
                                      std::optional<int> priority,
                                      std::shared_ptr<TensorInfo>* superseded = nullptr);
  // The current declaration of `name`; null if none.
  std::shared_ptr<TensorInfo> Find(const std::string& name) const;
  // The declaration `id`, current or superseded; null once retired (or never made).
  TensorInfo* FindId(uint32_t id);
  // Undoes the current declaration `t` of its name (servers refused it: workers disagree
  // on it): superseded as by a re-declaration, so the name's next use declares it anew and
  // its bytes leave the placement. No-op if `t` is already superseded, and with fixed
  // layouts (asynchronous training answers each push alone: only the refused worker would
  // undo it, and its later ids would part from the others').
  void Undeclare(TensorInfo& t);
  // Drops a superseded declaration whose operations are all finished.
  void Retire(uint32_t id);
  // Undoes every current declaration (Undeclare; re-initialisation) and returns them:
  // the placement is then empty, and ids go on from next_id().
  std::vector<std::shared_ptr<TensorInfo>> UndeclareAll();
  // A digest of the current declarations (ids, names, dtypes, shapes) and next_id(): equal
  // on workers that made the same declarations (compared at a join, join_protocol.h).
  uint64_t Digest() const;
  uint32_t next_id() const { return next_id_; }
  // Declarations held (current and superseded).
  size_t size() const { return tensors_.size(); }
  // The tensor's name for messages; "?" if unknown.
  std::string NameOf(uint32_t id) const;

  // The generation new operations use, and its partition size.
  uint32_t layout() const { return layout_; }
  uint64_t partition_bytes() const { return layouts_[layout_]->partition_bytes; }
  // Switches new operations to partitions of `bytes`: finds or makes its layout and cuts
  // every tensor in it. Returns the generation. Throws (kInvalidArgument), cutting
  // nothing, if a tensor would get too many partitions or all layouts are used.
  // REQUIRES: no operation of the worker unfinished.
  uint32_t SwitchPartitionBytes(uint64_t bytes);
  // Every key starts over at round 0 (after a join).
  void ResetRounds();
  // The servers' weights changed (by rank, as many as before; elastic training: a server
  // that left has weight 0). In every layout, the partitions of the current declarations
  // on a server of weight 0 are released, then placed again, in layout, id and partition
  // order: every worker moves the same partitions to the same servers, and no other
  // partition moves. New cuts and layouts use the new weights. Returns the partitions
  // moved. REQUIRES: no operation of the worker unfinished (their rounds start over:
  // ResetRounds).
  size_t SetServerWeights(std::vector<double> weights);
  // Bytes placed on each server (by rank) in the current layout.
  std::vector<uint64_t> PlacedBytes() const;

  // Elastic joins (docs/design/elastic.md, "Joins"): the current declarations with
  // their cuts in every layout, the placements' loads and weights, the next id and the
  // current layout. Load makes this catalog that state: the same ids, cuts, placements and
  // Digest, so that a later Declare gives what the snapshot's catalog would give. Rounds
  // start at 0; superseded declarations are not carried (their ids stay used). Throws
  // FerryError (kBadMessage) on a snapshot that is not self-consistent, changing nothing.
  // REQUIRES (Load): as many servers as the snapshot; no operation of the worker yet.
  proto::CatalogSnapshot Snapshot() const;
  void Load(const proto::CatalogSnapshot& snapshot);

 private:
  struct Layout {
    Layout(uint64_t bytes, const std::vector<double>& weights)
        : partition_bytes(bytes), placement(weights) {}
    uint64_t partition_bytes;
    Placement placement;
    uint32_t cut = 0;  // every current declaration with an id below it is cut here
  };
  void CutTensor(uint32_t gen, TensorInfo& t);
  // Releases `t`'s partitions from every layout's placement and marks it superseded.
  void Supersede(TensorInfo& t);

  std::vector<double> server_weights_;
  const bool fixed_layouts_;
  std::map<uint32_t, std::shared_ptr<TensorInfo>> tensors_;  // by id; current and superseded
  std::map<std::string, uint32_t> ids_;                      // name -> current declaration
  uint32_t next_id_ = 0;
  const uint32_t id_limit_;  // ids stay below it (ProcessSetFirstId of the next set)
  std::vector<std::unique_ptr<Layout>> layouts_;      // by generation
  uint32_t layout_ = 0;
};

}  // namespace ferry
