#pragma once

// DecomposeLayers(): how many pieces each layer's gradient transfer is cut into, chosen to
// minimise the iteration's predicted end (DynaComm's dynamic decomposition of layer
// transfers), from what a worker measures: the backward compute that follows each layer
// (which hides its transfer) and its link's rate. Pure: no clock, no state.
//
//   std::vector<LayerTransfer> layers = {{bytes, hidden_us}, ...};  // forward order
//   Decomposition d = DecomposeLayers(layers, params);              // d.pieces[l]
//
// The predicted end (PredictEnd), in us from the end of the backward pass:
//   - layer l's gradient is ready at r_l = -hidden_us_l;
//   - pushes leave in the order the gradients are ready (hidden_us descending; ties: the
//     later layer first, as backward runs), each layer's k_l pieces back to back, each
//     piece taking piece_overhead_us plus its bytes / bytes_per_us on the uplink:
//       S_l = max(r_l, E of the layer before),  E_l = S_l + k_l * o + bytes_l / B;
//   - a piece's sum comes back on the downlink one piece-time after its push left, so the
//     layer's last sum is back at C_l = E_l + o + bytes_l / (k_l * B) (a layer's pulls are
//     pipelined behind its pushes; pulls of different layers are taken not to contend:
//     each lags the push it follows by one piece);
//   - the predicted end is T = max_l C_l.
// More pieces shorten a layer's tail (the last piece's sum) and cost o each on the link,
// which delays every layer behind it: the choice is a trade across layers.
//
// The choice: the k minimising T over k_l in [ceil(bytes_l / max_piece_bytes),
// max(that, min(max_pieces, floor(bytes_l / min_piece_bytes)))], exactly, by dynamic
// programming over the layers in push order on the Pareto front of (E, the latest C so
// far, total pieces): the future depends on E alone and grows with it, so a dominated
// state can never finish better. Ties: the fewest pieces in all. Times equal within 1e-9
// relative count as equal.

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace ferry {

struct LayerTransfer {
  uint64_t bytes = 0;    // the layer's gradient
  double hidden_us = 0;  // backward compute after its gradient is ready (of the layers before it)
};

struct DecompositionParams {
  double bytes_per_us = 125;      // the link's rate
  double piece_overhead_us = 30;  // what a piece costs beyond its bytes (a message)
  uint64_t min_piece_bytes = 32768;
  uint64_t max_piece_bytes = 1048576;
  int max_pieces = 256;  // per layer (at least the least count max_piece_bytes allows)
};

// What a worker takes a piece to cost beyond its bytes (a message each way, its
// acknowledgement, the server's bookkeeping), for DecomposeLayers.
constexpr double kPieceOverheadUs = 30;
// The least piece a layer is cut in (as partitions sized per link: 32 KiB x 2^k nest).
constexpr uint64_t kMinLayerPieceBytes = 32768;

struct Decomposition {
  std::vector<int> pieces;  // by layer (forward order), each >= 1
  double predicted_end_us = 0;
};

// The piece a layer of `bytes` cut in `pieces` pieces is sent in by a worker: the largest
// min_piece_bytes x 2^j within ceil(bytes / pieces) (at least min_piece_bytes, at most
// max_piece_bytes), so that every worker's pieces nest (message.h, CutsNest).
uint64_t LayerPieceBytes(uint64_t bytes, int pieces, const DecompositionParams& params);

// LayerTimes: what a worker measures for DecomposeLayers, one iteration at a time: when each
// tensor's push_pull was first queued (its gradient ready) and its bytes. Take() turns the
// iteration into layers (hidden_us: from its ready time to the iteration's last) and starts
// the next one. Not thread-safe (the worker calls it under WorkerContext::mu).
class LayerTimes {
 public:
  void OnReady(uint32_t tensor, uint64_t bytes, int64_t now_us);
  // The iteration's layers by tensor id (ids in `tensors`, same order), and its backward
  // span in us (first ready to last); then forgets them.
  std::vector<LayerTransfer> Take(std::vector<uint32_t>* tensors, double* span_us);

 private:
  struct Ready {
    uint64_t bytes;
    int64_t at_us;
  };
  std::vector<std::pair<uint32_t, Ready>> ready_;  // first ready per tensor, in arrival order
  std::unordered_set<uint32_t> seen_;               // the tensors in ready_
};

// LayerSizing: FERRY_DECOMPOSE=per-layer's decision at each iteration boundary, for the
// worker (SchedulingControl) and ferry-sim alike: takes the iteration's layers from a
// LayerTimes and, when a decision is due (the first once a rate is measured; then when the
// rate or the backward span moved by more than `threshold`, or the partition size changed),
// cuts each layer as DecomposeLayers chooses (30 us a piece, 32 KiB up to the partition).
class LayerSizing {
 public:
  struct Decision {
    std::unordered_map<uint32_t, uint64_t> pieces;  // by tensor id; a layer left whole: absent
    size_t layers = 0;
    double rate = 0, span_us = 0, predicted_end_us = 0;
  };
  explicit LayerSizing(double threshold) : threshold_(threshold) {}
  // True, with `out`, when a decision was made (it may equal the last one).
  bool Decide(LayerTimes& times, double rate, uint64_t partition_bytes, Decision* out);
  uint64_t decisions() const { return decisions_; }

 private:
  const double threshold_;
  double rate_ = 0, span_us_ = 0;  // what the last decision saw (rate 0: none yet)
  uint64_t partition_bytes_ = 0;
  uint64_t decisions_ = 0;
};

// REQUIRES: bytes_per_us > 0, piece_overhead_us >= 0, 0 < min_piece_bytes <=
// max_piece_bytes, max_pieces >= 1.
Decomposition DecomposeLayers(const std::vector<LayerTransfer>& layers,
                              const DecompositionParams& params);

// T for the given pieces (by layer, forward order; each >= 1), as above.
double PredictEnd(const std::vector<LayerTransfer>& layers, const std::vector<int>& pieces,
                  const DecompositionParams& params);

}  // namespace ferry
