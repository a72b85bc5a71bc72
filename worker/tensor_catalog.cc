#include "worker/tensor_catalog.h"

#include <glog/logging.h>

#include <algorithm>

#include "common/transport/message.h"
#include "common/util/status.h"

namespace ferry {

namespace {

uint64_t CountOf(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// How many partitions SplitTensor makes.
uint64_t PartitionCount(uint64_t bytes, size_t element, uint64_t partition_bytes) {
  uint64_t step = partition_bytes - partition_bytes % element;
  return std::max<uint64_t>(1, (bytes + step - 1) / step);
}

}  // namespace

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += StrCat(i ? "," : "", shape[i]);
  return s + "]";
}

TensorCatalog::TensorCatalog(uint64_t partition_bytes, std::vector<double> server_weights,
                             bool fixed_layouts, uint32_t first_id)
    : server_weights_(std::move(server_weights)), fixed_layouts_(fixed_layouts),
      next_id_(first_id), id_limit_(first_id == 0 ? kIdsPerProcessSet : first_id + kIdsPerProcessSet) {
  layouts_.push_back(std::make_unique<Layout>(partition_bytes, server_weights_));
}

std::shared_ptr<TensorInfo> TensorCatalog::Declare(const std::string& name, DataType dtype,
                                                   const std::vector<int64_t>& shape,
                                                   std::optional<int> priority,
                                                   std::shared_ptr<TensorInfo>* superseded) {
  FERRY_ENFORCE(IsValidDataType(static_cast<int32_t>(dtype)), ErrorCode::kInvalidArgument,
                "tensor '", name, "': unknown dtype ", static_cast<int>(dtype));
  for (int64_t d : shape) {
    FERRY_ENFORCE(d >= 0, ErrorCode::kInvalidArgument, "tensor '", name,
                  "': negative dimension in shape ", ShapeString(shape));
  }
  std::shared_ptr<TensorInfo> old;
  if (auto it = ids_.find(name); it != ids_.end()) {
    old = tensors_.at(it->second);
    if (old->dtype == dtype && old->count == CountOf(shape)) {
      if (priority) old->priority = *priority;
      return old;
    }
    FERRY_ENFORCE(!fixed_layouts_, ErrorCode::kInvalidArgument, "tensor '", name,
                  "' was declared as ", DataTypeName(old->dtype), ShapeString(old->shape),
                  " and is now used as ", DataTypeName(dtype), ShapeString(shape),
                  ": in asynchronous training (FERRY_ENABLE_ASYNC=1) the servers keep its "
                  "parameters, so its dtype and size are fixed");
  }
  FERRY_ENFORCE(next_id_ < id_limit_, ErrorCode::kInvalidArgument, "tensor '", name,
                "': every tensor id was used (", kIdsPerProcessSet, " declarations per process set)");
  auto t = std::make_shared<TensorInfo>();
  t->id = next_id_;
  t->name = name;
  t->dtype = dtype;
  t->shape = shape;
  t->count = CountOf(shape);
  t->bytes = t->count * DataTypeSize(dtype);
  t->hash = TensorHash(name, dtype, shape);
  // A re-declaration keeps an explicit priority; the default is by declaration order.
  t->priority = priority ? *priority
                : old    ? old->priority
                         : -static_cast<int>(std::min<uint32_t>(t->id, INT32_MAX));
  const uint64_t bytes = partition_bytes();
  const uint64_t parts = PartitionCount(t->bytes, DataTypeSize(dtype), bytes);
  FERRY_ENFORCE(parts <= kMaxPartitionsPerTensor, ErrorCode::kInvalidArgument, "tensor '", name,
                "' of ", t->bytes, " bytes would have ", parts, " partitions of ", bytes,
                " bytes; at most ", kMaxPartitionsPerTensor,
                " are possible: use larger partitions");
  if (old) {
    LOG(INFO) << "tensor '" << name << "' declared again as " << DataTypeName(dtype)
              << ShapeString(shape) << " (was " << DataTypeName(old->dtype)
              << ShapeString(old->shape) << "): id " << t->id << " replaces id " << old->id;
    Supersede(*old);
    if (superseded) *superseded = old;
  }
  next_id_++;
  CutTensor(layout_, *t);
  VLOG(1) << "declared tensor '" << name << "' id " << t->id << " " << DataTypeName(dtype)
          << ShapeString(shape) << " in " << parts << " partitions";
  ids_[name] = t->id;
  tensors_[t->id] = t;
  return t;
}

std::shared_ptr<TensorInfo> TensorCatalog::Find(const std::string& name) const {
  auto it = ids_.find(name);
  return it == ids_.end() ? nullptr : tensors_.at(it->second);
}

TensorInfo* TensorCatalog::FindId(uint32_t id) {
  auto it = tensors_.find(id);
  return it == tensors_.end() ? nullptr : it->second.get();
}

std::string TensorCatalog::NameOf(uint32_t id) const {
  auto it = tensors_.find(id);
  return it == tensors_.end() ? "?" : it->second->name;
}

void TensorCatalog::Supersede(TensorInfo& t) {
  CHECK(!t.superseded);
  for (uint32_t gen = 0; gen < t.cuts.size(); ++gen) {
    for (const PartitionSpec& p : t.cuts[gen].parts) {
      layouts_[gen]->placement.Release(p.server, p.bytes);
    }
  }
  t.superseded = true;
  ids_.erase(t.name);
}

void TensorCatalog::Undeclare(TensorInfo& t) {
  if (!t.superseded && !fixed_layouts_) Supersede(t);
}

std::vector<std::shared_ptr<TensorInfo>> TensorCatalog::UndeclareAll() {
  std::vector<std::shared_ptr<TensorInfo>> undone;
  for (auto& [id, t] : tensors_) {
    if (t->superseded) continue;
    Supersede(*t);
    undone.push_back(t);
  }
  return undone;
}

uint64_t TensorCatalog::Digest() const {
  uint64_t digest = next_id_;
  for (const auto& [id, t] : tensors_) {
    if (t->superseded) continue;
    uint64_t x = t->hash ^ (static_cast<uint64_t>(id) * 0x9e3779b97f4a7c15ull);
    x ^= x >> 31;  // splitmix64's finalizer: a sum of mixed terms, any order
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    digest += x;
  }
  return digest;
}

void TensorCatalog::Retire(uint32_t id) {
  auto it = tensors_.find(id);
  CHECK(it != tensors_.end() && it->second->superseded) << "retiring tensor " << id;
  tensors_.erase(it);
}

void TensorCatalog::CutTensor(uint32_t gen, TensorInfo& t) {
  Layout& l = *layouts_[gen];
  CHECK_LE(l.cut, t.id) << "tensors are cut in declaration order";
  Cut cut;
  cut.parts = SplitTensor(t.bytes, DataTypeSize(t.dtype), l.partition_bytes);
  CHECK_LE(cut.parts.size(), kMaxPartitionsPerTensor);
  for (auto& p : cut.parts) p.server = l.placement.Assign(p.bytes);
  cut.rounds.assign(cut.parts.size(), 0);
  if (t.cuts.size() <= gen) t.cuts.resize(gen + 1);
  t.cuts[gen] = std::move(cut);
  l.cut = t.id + 1;
}

uint32_t TensorCatalog::SwitchPartitionBytes(uint64_t bytes) {
  uint32_t gen = 0;
  while (gen < layouts_.size() && layouts_[gen]->partition_bytes != bytes) gen++;
  if (gen == layouts_.size()) {
    FERRY_ENFORCE(layouts_.size() < kMaxLayouts, ErrorCode::kInvalidArgument,
                  "cannot cut tensors with a ", kMaxLayouts + 1, "th partition size (", bytes,
                  " bytes): keys hold ", kMaxLayouts, " layouts");
    layouts_.push_back(std::make_unique<Layout>(bytes, server_weights_));
  }
  Layout& l = *layouts_[gen];
  // The current declarations not cut in this layout yet, in id order.
  std::vector<TensorInfo*> uncut;
  for (auto it = tensors_.lower_bound(l.cut); it != tensors_.end(); ++it) {
    if (!it->second->superseded) uncut.push_back(it->second.get());
  }
  for (const TensorInfo* u : uncut) {  // refuse before cutting any
    const TensorInfo& t = *u;
    FERRY_ENFORCE(PartitionCount(t.bytes, DataTypeSize(t.dtype), bytes) <= kMaxPartitionsPerTensor,
                  ErrorCode::kInvalidArgument, "tensor '", t.name, "' of ", t.bytes,
                  " bytes would have more than ", kMaxPartitionsPerTensor, " partitions of ", bytes,
                  " bytes");
  }
  for (TensorInfo* t : uncut) CutTensor(gen, *t);
  l.cut = next_id_;
  layout_ = gen;
  return gen;
}

void TensorCatalog::ResetRounds() {
  for (auto& [id, t] : tensors_) {
    for (Cut& cut : t->cuts) cut.rounds.assign(cut.parts.size(), 0);
    t->rows_rounds.assign(t->rows_rounds.size(), 0);
  }
}

size_t TensorCatalog::SetServerWeights(std::vector<double> weights) {
  CHECK_EQ(weights.size(), server_weights_.size());
  server_weights_ = std::move(weights);
  size_t moved = 0;
  for (uint32_t gen = 0; gen < layouts_.size(); ++gen) {
    Layout& l = *layouts_[gen];
    // The partitions to move, in id and partition order; released first, so that the
    // survivors' shares are measured without them.
    std::vector<PartitionSpec*> orphans;
    for (auto& [id, t] : tensors_) {
      if (t->superseded || t->cuts.size() <= gen) continue;
      for (PartitionSpec& p : t->cuts[gen].parts) {
        if (server_weights_[p.server] > 0) continue;
        l.placement.Release(p.server, p.bytes);
        orphans.push_back(&p);
      }
    }
    l.placement.SetWeights(server_weights_);
    for (PartitionSpec* p : orphans) p->server = l.placement.Assign(p->bytes);
    moved += orphans.size();
  }
  return moved;
}

std::vector<uint64_t> TensorCatalog::PlacedBytes() const {
  return layouts_[layout_]->placement.loads();
}

proto::CatalogSnapshot TensorCatalog::Snapshot() const {
  proto::CatalogSnapshot s;
  s.set_next_id(next_id_);
  s.set_layout(layout_);
  for (double w : server_weights_) s.add_server_weights(w);
  for (const auto& l : layouts_) {
    proto::CatalogSnapshot::Layout* out = s.add_layouts();
    out->set_partition_bytes(l->partition_bytes);
    out->set_cut(l->cut);
    for (uint64_t load : l->placement.loads()) out->add_loads(load);
    for (double w : l->placement.weights()) out->add_weights(w);
  }
  for (const auto& [id, t] : tensors_) {
    if (t->superseded) continue;
    proto::CatalogSnapshot::Tensor* out = s.add_tensors();
    out->set_id(id);
    out->set_name(t->name);
    out->set_dtype(static_cast<proto::DataTypeProto>(t->dtype));
    for (int64_t d : t->shape) out->add_shape(d);
    out->set_priority(t->priority);
    for (uint32_t gen = 0; gen < t->cuts.size(); ++gen) {
      if (t->cuts[gen].parts.empty()) continue;
      proto::CatalogSnapshot::Cut* cut = out->add_cuts();
      cut->set_layout(gen);
      for (const PartitionSpec& p : t->cuts[gen].parts) {
        proto::CatalogSnapshot::Part* part = cut->add_parts();
        part->set_offset(p.offset);
        part->set_bytes(p.bytes);
        part->set_server(p.server);
      }
    }
  }
  return s;
}

void TensorCatalog::Load(const proto::CatalogSnapshot& s) {
  auto bad = [](const std::string& why) {
    return FerryError(ErrorCode::kBadMessage, "tensor catalog snapshot refused: " + why);
  };
  const size_t servers = server_weights_.size();
  if (s.layouts().empty() || s.layout() >= static_cast<uint32_t>(s.layouts_size()) ||
      static_cast<size_t>(s.layouts_size()) > kMaxLayouts ||
      static_cast<size_t>(s.server_weights_size()) != servers) {
    throw bad(StrCat("layout ", s.layout(), " of ", s.layouts_size(), ", ",
                     s.server_weights_size(), " server weights for ", servers, " servers"));
  }
  std::vector<std::unique_ptr<Layout>> layouts;
  std::vector<double> weights(s.server_weights().begin(), s.server_weights().end());
  for (const auto& l : s.layouts()) {
    if (static_cast<size_t>(l.loads_size()) != servers ||
        static_cast<size_t>(l.weights_size()) != servers || l.partition_bytes() == 0) {
      throw bad(StrCat("a layout of ", l.loads_size(), " loads and ", l.weights_size(),
                       " weights for ", servers, " servers"));
    }
    auto layout = std::make_unique<Layout>(l.partition_bytes(), weights);
    layout->placement.Restore(std::vector<double>(l.weights().begin(), l.weights().end()),
                              std::vector<uint64_t>(l.loads().begin(), l.loads().end()));
    layout->cut = l.cut();
    layouts.push_back(std::move(layout));
  }
  std::map<uint32_t, std::shared_ptr<TensorInfo>> tensors;
  std::map<std::string, uint32_t> ids;
  for (const auto& in : s.tensors()) {
    if (in.id() >= s.next_id() || tensors.count(in.id()) || ids.count(in.name()) ||
        !IsValidDataType(static_cast<int32_t>(in.dtype()))) {
      throw bad(StrCat("tensor '", in.name(), "' id ", in.id(), " (next id ", s.next_id(),
                       "): repeated, out of range or of an unknown dtype"));
    }
    auto t = std::make_shared<TensorInfo>();
    t->id = in.id();
    t->name = in.name();
    t->dtype = static_cast<DataType>(in.dtype());
    t->shape.assign(in.shape().begin(), in.shape().end());
    for (int64_t d : t->shape) {
      if (d < 0) throw bad(StrCat("tensor '", t->name, "' has a negative dimension"));
    }
    t->count = CountOf(t->shape);
    t->bytes = t->count * DataTypeSize(t->dtype);
    t->hash = TensorHash(t->name, t->dtype, t->shape);
    t->priority = in.priority();
    for (const auto& c : in.cuts()) {
      if (c.layout() >= layouts.size()) throw bad(StrCat("tensor '", t->name, "' cut in layout ",
                                                         c.layout(), " of ", layouts.size()));
      if (t->cuts.size() <= c.layout()) t->cuts.resize(c.layout() + 1);
      Cut& cut = t->cuts[c.layout()];
      uint64_t offset = 0;
      for (const auto& p : c.parts()) {
        if (p.offset() != offset || p.server() < 0 || static_cast<size_t>(p.server()) >= servers) {
          throw bad(StrCat("tensor '", t->name, "': a partition at offset ", p.offset(),
                           " on server ", p.server()));
        }
        cut.parts.push_back(PartitionSpec{static_cast<uint32_t>(cut.parts.size()), p.offset(),
                                          p.bytes(), p.server()});
        offset += p.bytes();
      }
      if (offset != t->bytes || cut.parts.empty() || cut.parts.size() > kMaxPartitionsPerTensor) {
        throw bad(StrCat("tensor '", t->name, "': cuts of ", offset, " bytes in ",
                         cut.parts.size(), " partitions for ", t->bytes));
      }
      cut.rounds.assign(cut.parts.size(), 0);
    }
    ids[t->name] = t->id;
    tensors[t->id] = std::move(t);
  }
  server_weights_ = std::move(weights);
  layouts_ = std::move(layouts);
  layout_ = s.layout();
  tensors_ = std::move(tensors);
  ids_ = std::move(ids);
  next_id_ = s.next_id();
}

}  // namespace ferry
