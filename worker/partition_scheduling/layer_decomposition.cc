#include "worker/partition_scheduling/layer_decomposition.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace ferry {
namespace {

bool AtMost(double a, double b) { return a <= b + 1e-9 * (1 + std::fabs(b)); }

// The layers in push order: the gradient ready first goes first.
std::vector<size_t> PushOrder(const std::vector<LayerTransfer>& layers) {
  std::vector<size_t> order(layers.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (layers[a].hidden_us != layers[b].hidden_us) {
      return layers[a].hidden_us > layers[b].hidden_us;
    }
    return a > b;
  });
  return order;
}

// The piece counts DecomposeLayers chooses among for `bytes`.
std::pair<int, int> PieceRange(uint64_t bytes, const DecompositionParams& p) {
  const auto least =
      static_cast<int>(std::max<uint64_t>(1, (bytes + p.max_piece_bytes - 1) / p.max_piece_bytes));
  const auto most = static_cast<int>(std::min<uint64_t>(
      static_cast<uint64_t>(p.max_pieces), std::max<uint64_t>(1, bytes / p.min_piece_bytes)));
  return {least, std::max(least, most)};
}

struct Step {
  double push_end;  // E after the layer
  double sum_end;   // C of the layer
};

Step Advance(double link_free, const LayerTransfer& l, int k, const DecompositionParams& p) {
  const double bytes_us = static_cast<double>(l.bytes) / p.bytes_per_us;
  const double start = std::max(-l.hidden_us, link_free);
  const double end = start + k * p.piece_overhead_us + bytes_us;
  return Step{end, end + p.piece_overhead_us + bytes_us / k};
}

struct State {
  double push_end;  // E
  double latest;    // the latest C so far
  long pieces;      // in all so far
  int parent;       // index in the previous front
  int k;            // this layer's pieces
};

// Keeps the states no other state dominates (E, latest and pieces all no larger).
std::vector<State> ParetoFront(std::vector<State> states) {
  std::sort(states.begin(), states.end(), [](const State& a, const State& b) {
    if (a.push_end != b.push_end) return a.push_end < b.push_end;
    if (a.latest != b.latest) return a.latest < b.latest;
    return a.pieces < b.pieces;
  });
  std::vector<State> kept;
  for (const State& s : states) {
    const bool dominated = std::any_of(kept.begin(), kept.end(), [&](const State& q) {
      return AtMost(q.latest, s.latest) && q.pieces <= s.pieces;
    });
    if (!dominated) kept.push_back(s);
  }
  return kept;
}

void CheckParams(const DecompositionParams& p) {
  CHECK(p.bytes_per_us > 0 && p.piece_overhead_us >= 0 && p.min_piece_bytes > 0 &&
        p.min_piece_bytes <= p.max_piece_bytes && p.max_pieces >= 1)
      << "DecomposeLayers: bad parameters";
}

}  // namespace

double PredictEnd(const std::vector<LayerTransfer>& layers, const std::vector<int>& pieces,
                  const DecompositionParams& params) {
  CheckParams(params);
  CHECK_EQ(layers.size(), pieces.size());
  double link_free = -std::numeric_limits<double>::infinity();
  double end = -std::numeric_limits<double>::infinity();
  for (size_t l : PushOrder(layers)) {
    CHECK_GE(pieces[l], 1) << "layer " << l;
    const Step s = Advance(link_free, layers[l], pieces[l], params);
    link_free = s.push_end;
    end = std::max(end, s.sum_end);
  }
  return layers.empty() ? 0.0 : end;
}

Decomposition DecomposeLayers(const std::vector<LayerTransfer>& layers,
                              const DecompositionParams& params) {
  CheckParams(params);
  Decomposition d;
  if (layers.empty()) return d;
  const std::vector<size_t> order = PushOrder(layers);
  const double none = -std::numeric_limits<double>::infinity();
  std::vector<std::vector<State>> fronts;  // by position in push order
  std::vector<State> front = {State{none, none, 0, -1, 0}};
  for (size_t l : order) {
    const auto [least, most] = PieceRange(layers[l].bytes, params);
    std::vector<State> next;
    next.reserve(front.size() * static_cast<size_t>(most - least + 1));
    for (size_t i = 0; i < front.size(); ++i) {
      for (int k = least; k <= most; ++k) {
        const Step s = Advance(front[i].push_end, layers[l], k, params);
        next.push_back(State{s.push_end, std::max(front[i].latest, s.sum_end), front[i].pieces + k,
                             static_cast<int>(i), k});
      }
    }
    fronts.push_back(std::move(front));
    front = ParetoFront(std::move(next));
  }
  // The least end; ties: the fewest pieces.
  size_t best = 0;
  for (size_t i = 1; i < front.size(); ++i) {
    const State& a = front[i];
    const State& b = front[best];
    const bool equal = AtMost(a.latest, b.latest) && AtMost(b.latest, a.latest);
    if ((!equal && a.latest < b.latest) || (equal && a.pieces < b.pieces)) best = i;
  }
  d.predicted_end_us = front[best].latest;
  d.pieces.assign(layers.size(), 1);
  int at = static_cast<int>(best);
  for (size_t pos = order.size(); pos-- > 0;) {
    const State& s = pos + 1 == order.size() ? front[static_cast<size_t>(at)]
                                             : fronts[pos + 1][static_cast<size_t>(at)];
    d.pieces[order[pos]] = s.k;
    at = s.parent;
  }
  return d;
}

uint64_t LayerPieceBytes(uint64_t bytes, int pieces, const DecompositionParams& params) {
  const uint64_t k = static_cast<uint64_t>(std::max(pieces, 1));
  const uint64_t want = std::max<uint64_t>((bytes + k - 1) / k, 1);
  uint64_t piece = params.min_piece_bytes;
  while (piece * 2 <= want && piece * 2 <= params.max_piece_bytes) piece *= 2;
  return std::min(piece, params.max_piece_bytes);
}

void LayerTimes::OnReady(uint32_t tensor, uint64_t bytes, int64_t now_us) {
  if (!seen_.insert(tensor).second) return;  // its first partition's time counts
  ready_.push_back({tensor, Ready{bytes, now_us}});
}

std::vector<LayerTransfer> LayerTimes::Take(std::vector<uint32_t>* tensors, double* span_us) {
  std::vector<LayerTransfer> layers;
  tensors->clear();
  int64_t first = 0, last = 0;
  for (size_t i = 0; i < ready_.size(); ++i) {
    const int64_t at = ready_[i].second.at_us;
    first = i == 0 ? at : std::min(first, at);
    last = i == 0 ? at : std::max(last, at);
  }
  for (const auto& [id, r] : ready_) {
    tensors->push_back(id);
    layers.push_back(LayerTransfer{r.bytes, static_cast<double>(last - r.at_us)});
  }
  *span_us = static_cast<double>(last - first);
  ready_.clear();
  seen_.clear();
  return layers;
}

bool LayerSizing::Decide(LayerTimes& times, double rate, uint64_t partition_bytes,
                         Decision* out) {
  std::vector<uint32_t> tensors;
  double span_us = 0;
  const std::vector<LayerTransfer> layers = times.Take(&tensors, &span_us);
  auto moved = [this](double now, double then) {
    return then <= 0 || std::fabs(now - then) > threshold_ * then;
  };
  if (layers.empty() || rate <= 0 || partition_bytes == 0 ||
      (rate_ > 0 && !moved(rate, rate_) && !moved(span_us, span_us_) &&
       partition_bytes == partition_bytes_)) {
    return false;
  }
  DecompositionParams params;
  params.bytes_per_us = rate / 1e6;
  params.piece_overhead_us = kPieceOverheadUs;
  params.max_piece_bytes = partition_bytes;
  params.min_piece_bytes = std::min<uint64_t>(kMinLayerPieceBytes, partition_bytes);
  const Decomposition d = DecomposeLayers(layers, params);
  *out = Decision{};
  for (size_t i = 0; i < layers.size(); ++i) {
    const uint64_t piece = LayerPieceBytes(layers[i].bytes, d.pieces[i], params);
    if (piece < std::min(layers[i].bytes, partition_bytes)) out->pieces[tensors[i]] = piece;
  }
  out->layers = layers.size();
  out->rate = rate;
  out->span_us = span_us;
  out->predicted_end_us = d.predicted_end_us;
  rate_ = rate;
  span_us_ = span_us;
  partition_bytes_ = partition_bytes;
  decisions_++;
  return true;
}

}  // namespace ferry
