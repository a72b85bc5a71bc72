#pragma once

// SimJob: what the simulated workers and servers share: the clock, the fabric, the
// worker Config (read from the same FERRY_* variables a real worker reads), the workload,
// the server weights and the layouts (each partition size cuts and places the model once,
// with the worker's own SplitTensor and Placement, identically for every worker; each
// process set's tensors with a Placement of their own per size, as a set's TensorCatalog
// places them).

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "common/config/config.h"
#include "sim/event_queue.h"
#include "sim/fabric.h"
#include "sim/workload.h"

namespace ferry::sim {

class SimSender;

// One partition of one layer in one layout.
struct SimPart {
  uint64_t key = 0;  // MakeLayoutKey(layer, layout, index): the real key
  uint64_t bytes = 0;
  int server = 0;  // server rank
  uint64_t wire_bytes = 0;  // compressed (FERRY_COMPRESSION): its bytes on the wire; else `bytes`
  bool compressed() const { return wire_bytes != bytes; }
};

// The compression codecs' speed on one core, raw bytes per us (CodecRatesOf: measured by
// ferry-compression-bench on the project's VM, docs/benchmarks.md).
struct CodecRates {
  double compress = 0;
  double decompress = 0;
};
CodecRates CodecRatesOf(const CompressionSpec& spec);

// One partition of worker 0, for comparing the model's timeline with a measured trace
// (FERRY_TRACE_DIR's partition slices: ready, sent, acked, result). Times: simulated us.
struct PartRecord {
  int iteration = 0;  // 0: the first warm-up iteration
  int layer = 0;
  int server = 0;
  uint64_t bytes = 0;
  double ready_us = 0;   // pushed to the scheduling core
  double sent_us = 0;    // handed to the transport
  double acked_us = 0;   // every frame acknowledged (or summed)
  double result_us = 0;  // every frame's sum back
};

struct Layout {
  uint32_t number = 0;  // the layout generation (0: the first size its catalog used)
  uint64_t partition_bytes = 0;
  std::vector<std::vector<SimPart>> parts;  // by layer (declaration = forward order)
};

// One catalog's layouts by partition size, each numbered in the order of first use, as
// TensorCatalog::SwitchPartitionBytes numbers its generations (so each has keys of its own).
using Layouts = std::map<uint64_t, std::unique_ptr<Layout>>;

// A process set (worker/process_sets.h): its members, its tensors (forward order) and their
// layouts. Its catalog starts in the partition size in force when the set is added and
// switches whenever the global set's does (ProcessSets::SwitchPartitionBytes).
struct SimProcessSet {
  int members = 0;
  std::vector<uint64_t> bytes;
  Layouts layouts;
};

// How a worker that backup workers left out catches up (SimOptions::catch_up;
// sim/sim_worker.h):
// after a step that left it out, it sits out the steps that follow (no compute; each
// layer's push_pull a sit-out, which the servers do not wait for), in runs of one step up
// to eight, as ferry-train-sim's --catch_up.
enum class CatchUp {
  kMostLayers,     // left out of most layers' sums (some partition of the layer came late)
  kAllPartitions,  // left out of every partition's sum: at most b workers sit out a step
                   // (ferry-train-sim's rule, and DistributedOptimizer.left_out()'s)
  kOff,            // every step computed
};
// "most-layers", "all-partitions", "off".
const char* CatchUpName(CatchUp c);

struct SimJob {
  EventQueue events;
  std::unique_ptr<Network> network;
  std::unique_ptr<Fabric> fabric;
  Config config;  // a worker's
  Workload workload;
  int num_workers = 0;
  int num_servers = 0;
  std::vector<double> weights;         // by server rank
  double sum_bytes_per_us = 8000;      // one engine thread's summation rate
  CodecRates codec;                    // FERRY_COMPRESSION's (unused without compression)
  Layouts layouts;                     // the global set's
  std::vector<SimSender*> senders;     // by rank
  uint64_t timed_partition_bytes = 0;  // FERRY_PARTITION_MS's choice, once made
  double timed_mean_rate = 0;          // the mean rate it was made from
  // Process sets by id from 1 (sets[0] unused: the global set is every worker).
  std::vector<SimProcessSet> sets;
  // Uneven links (docs/simulation.md, "Uneven links"). per_link: FERRY_PARTITION_PER_LINK
  // in force (where FERRY_PARTITION_MS sizes partitions, without backup workers): the keys
  // sized for the mean rate as without it, each worker's pieces by its own paths. per_layer:
  // FERRY_DECOMPOSE=per-layer. Data-parallel jobs only (a pipeline's stay false).
  bool per_link = false;
  bool per_layer = false;
  // Whether the workers may cut a key's pushes differently: the servers then sum the global
  // set's raw rounds by range (SimServer, "grid rounds").
  bool CutsMayDiffer() const { return per_link || per_layer; }

  // Nodes: servers 0..S-1, then workers.
  int ServerNode(int rank) const { return rank; }
  int WorkerNode(int rank) const { return num_servers + rank; }
  // The workers whose pushes make a round of `key`: its process set's members.
  int Members(uint64_t key) const;
  // Whether `key` is the global set's (every worker's; not a process set's).
  bool InGlobalSet(uint64_t key) const;
  // The global set's layout for `partition_bytes`, made on first use.
  const Layout& LayoutFor(uint64_t partition_bytes);
  // Adds a process set of `members` workers whose tensors (forward order) have `bytes`;
  // returns its id. Its tensors are cut in `partition_bytes` (the size in force: its
  // layout 0) and placed by a Placement of their own over every server.
  int AddProcessSet(int members, const std::vector<uint64_t>& bytes, uint64_t partition_bytes);
  // Process set `set`'s layout for `partition_bytes`, made on first use (the set's catalog
  // switching to that size with the global set's).
  const Layout& SetLayoutFor(int set, uint64_t partition_bytes);
  // The StepBoundary (counted from 1) at which FERRY_PARTITION_MS sizes partitions, as
  // SchedulingControl does, and whether it does (not under p3 nor with FERRY_AUTOTUNE).
  static constexpr int kTimedBoundary = 3;
  bool SizesPartitionsByTime() const;
  // FERRY_PARTITION_MS's partition size (SchedulingControl::DecideAtSizingStep): from
  // the mean of the rates the workers' estimators measured,
  // taken when the first worker asks, so every worker switches to the same size (the real
  // workers agree on it with a push_pull at the boundary; its time is not modelled).
  // `current`: the size in use.
  uint64_t TimedPartitionBytes(uint64_t current);

 private:
  // One catalog's tensors of `bytes` (forward order, ids from `first_id`) cut and placed in
  // `partition_bytes`: its layout for that size in `layouts`, made on first use.
  const Layout& CatalogLayout(Layouts& layouts, const std::vector<uint64_t>& bytes,
                              uint32_t first_id, uint64_t partition_bytes) const;
};

}  // namespace ferry::sim
