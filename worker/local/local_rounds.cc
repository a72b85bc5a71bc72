#include "worker/local/local_rounds.h"

#include "common/util/status.h"
#include "common/util/strings.h"

namespace ferry {

LocalRound& LocalRounds::Submit(const std::string& key, int lr, LocalOp kind, DataType dtype,
                                uint64_t count, bool average, int root, uint64_t seq) {
  LocalRoundQueue& rs = by_key_[key];
  if (rs.next.empty()) rs.next.assign(local_size_, 0);
  const uint64_t index = rs.next[lr] - rs.base;
  while (rs.q.size() <= index) {
    rs.q.emplace_back();
    rs.q.back().have.assign(local_size_, false);
    rs.q.back().seq.assign(local_size_, 0);
  }
  LocalRound& round = rs.q[index];
  if (round.kind == LocalOp::kHello) {
    round.kind = kind;
    round.dtype = dtype;
    round.count = count;
    round.average = average;
    round.root = root;
  } else if (round.kind != kind || round.dtype != dtype || round.count != count ||
             round.average != average || round.root != root) {
    // The group cannot go on: the ranks' sequences of calls differ.
    throw FerryError(
        ErrorCode::kMismatch,
        StrCat("local ranks disagree on round ", rs.base + index, " of '", key, "': local rank ",
               lr, " called ", LocalOpName(kind), " (", count, " x ", DataTypeName(dtype),
               ", average ", average, ", root ", root, ") where another called ",
               LocalOpName(round.kind), " (", round.count, " x ", DataTypeName(round.dtype),
               ", average ", round.average, ", root ", round.root, ")"));
  }
  rs.next[lr]++;
  round.have[lr] = true;
  round.seq[lr] = seq;
  return round;
}

LocalRoundQueue* LocalRounds::Find(const std::string& key) {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : &it->second;
}

std::string LocalRounds::Missing(const LocalRound& round) const {
  std::string s;
  for (int lr = 1; lr < local_size_; ++lr) {
    if (round.have.empty() || !round.have[lr]) {
      s += StrCat(s.empty() ? "" : ", ", lr, " (pid ", pid_of_(lr), ")");
    }
  }
  return s;
}

std::string LocalRounds::Describe(const std::function<bool(const LocalRound&)>& is_op,
                                  const std::string& barrier_key) const {
  for (const auto& [key, rs] : by_key_) {
    for (const LocalRound& round : rs.q) {
      if (!is_op(round)) continue;
      const std::string what =
          StrCat(LocalOpName(round.kind), " of '", key == barrier_key ? "barrier" : key, "'");
      if (!round.started) {
        const std::string missing = Missing(round);
        if (!missing.empty()) return StrCat(what, ": waiting for local rank(s) ", missing);
        return StrCat(what, ": queued behind an earlier operation of the same tensor");
      }
      return StrCat(what, ": waiting for the servers' sum (the machine's push_pull)");
    }
  }
  return "an operation that has just finished";
}

}  // namespace ferry
