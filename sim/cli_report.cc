// ferry-sim's output for one run (sim/cli.h): text and JSON.

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/util/strings.h"
#include "sim/cli.h"
#include "sim/pipeline_report.h"

namespace ferry::sim {
namespace {

std::string Num(double v) { return JsonNumber(v); }
std::string Quote(const std::string& s) { return JsonQuote(s); }

// "1 Gbit/s", or with uneven links "worker links 1,1,1,0.25 Gbit/s" (and the servers' own
// where they have hosts of their own).
std::string LinksText(const ClusterSpec& c) {
  if (c.worker_rates_bits_per_s.empty()) return StrCat(Num(c.rate_bits_per_s / 1e9), " Gbit/s");
  std::string rates;
  for (double r : c.worker_rates_bits_per_s)
    rates += StrCat(rates.empty() ? "" : ",", Num(r / 1e9));
  const bool own_hosts = !c.colocate || c.cpu_servers > 0;
  return StrCat("worker links ", rates, " Gbit/s",
                own_hosts ? StrCat(", servers' ", Num(c.rate_bits_per_s / 1e9), " Gbit/s") : "");
}

// Uneven links' decisions, where in force: "pieces     per link (...)" and "decompose  ..."
// lines. A worker's pieces by server: one number where every server's is the same.
std::string LinkModesText(const SimResult& r) {
  std::string out;
  if (r.per_link) {
    out += "pieces     per link (FERRY_PARTITION_PER_LINK), by worker:";
    for (const std::vector<uint64_t>& by_server : r.link_pieces) {
      const bool one = std::all_of(by_server.begin(), by_server.end(),
                                   [&](uint64_t b) { return b == by_server.front(); });
      const size_t shown = one ? std::min<size_t>(1, by_server.size()) : by_server.size();
      std::string pieces;
      for (size_t s = 0; s < shown; ++s) pieces += StrCat(s ? "/" : "", by_server[s]);
      out += StrCat(" ", pieces.empty() ? "-" : pieces);
    }
    out += StrCat(" bytes; ", r.link_decisions, " decisions\n");
  }
  if (r.per_layer) {
    out += "decompose  per-layer (FERRY_DECOMPOSE), layers cut by worker:";
    for (int n : r.layers_cut) out += StrCat(" ", n);
    out += StrCat("; ", r.layer_decisions, " decisions\n");
  }
  return out;
}

}  // namespace

namespace {

template <typename T>
std::string CountsJson(const std::vector<T>& counts) {
  std::string out = "[";
  for (T n : counts) out += StrCat(out.size() > 1 ? "," : "", n);
  return out + "]";
}

std::string PiecesJson(const std::vector<std::vector<uint64_t>>& by_worker) {
  std::string out = "[";
  for (const std::vector<uint64_t>& w : by_worker) {
    out += StrCat(out.size() > 1 ? "," : "", CountsJson(w));
  }
  return out + "]";
}

std::string NumbersJson(const std::vector<double>& v) {
  std::string out = "[";
  for (double x : v) out += StrCat(out.size() > 1 ? "," : "", Num(x));
  return out + "]";
}

// "80 late pushes (worker 3: 80)": a count by worker, its total and the workers with some.
template <typename T>
std::string CountsText(const std::vector<T>& counts, const std::string& what) {
  uint64_t total = 0;
  std::string by;
  for (size_t w = 0; w < counts.size(); ++w) {
    total += static_cast<uint64_t>(counts[w]);
    if (counts[w] == 0) continue;
    by += StrCat(by.empty() ? "" : ", ", "worker ", w, ": ", counts[w]);
  }
  return StrCat(total, " ", what, by.empty() ? "" : StrCat(" (", by, ")"));
}

// "backup     FERRY_BACKUP_WORKERS=1: 80 late pushes (worker 3: 80); 6 backward passes sat
// out (worker 3: 6), steps uneven: mean 915.80 ms", or "" without.
std::string LatePushesText(const SimOptions& o, const SimResult& r) {
  if (r.late_pushes.empty()) return "";
  std::string out = StrCat("backup     FERRY_BACKUP_WORKERS=", o.env.at("FERRY_BACKUP_WORKERS"),
                           ": ", CountsText(r.late_pushes, "late pushes"), "; ");
  if (o.catch_up == CatchUp::kOff) return out + "no catching up (--catch-up off)\n";
  out += CountsText(r.sat_out, "backward passes sat out");
  if (std::any_of(r.sat_out.begin(), r.sat_out.end(), [](int n) { return n > 0; })) {
    char mean[64];
    std::snprintf(mean, sizeof(mean), ", steps uneven: mean %.2f ms", r.mean_ms);
    out += mean;
  }
  return out + "\n";
}

}  // namespace

std::string FormatJson(const CliOptions& cli, const SimResult& r, double wall_s) {
  if (r.pipeline) return FormatPipelineJson(cli, r, wall_s);
  const SimOptions& o = cli.sim;
  std::string env = "{";
  for (const auto& [name, value] : o.env) {
    env += StrCat(env.size() > 1 ? "," : "", Quote(name), ":", Quote(value));
  }
  env += "}";
  std::string hosts = "[";
  for (const HostUse& h : r.hosts) {
    hosts += StrCat(hosts.size() > 1 ? "," : "", "{\"name\":", Quote(h.name), ",\"up\":", Num(h.up),
                    ",\"down\":", Num(h.down), "}");
  }
  hosts += "]";
  std::string iterations = "[";
  for (double ms : r.iteration_ms) iterations += StrCat(iterations.size() > 1 ? "," : "", Num(ms));
  iterations += "]";
  return StrCat(
      "{\"program\":\"ferry-sim\",\"model\":", Quote(o.workload.model),
      ",\"byte_scale\":", Num(cli.byte_scale), ",\"compute_scale\":", Num(cli.compute_scale),
      ",\"workers\":", o.cluster.workers, ",\"servers\":", o.cluster.servers,
      ",\"colocate\":", o.cluster.colocate ? "true" : "false",
      ",\"cpu_servers\":", o.cluster.cpu_servers,
      ",\"rate_bits_per_s\":", Num(o.cluster.rate_bits_per_s),
      ",\"worker_rates_bits_per_s\":", NumbersJson(o.cluster.worker_rates_bits_per_s),
      ",\"partition_per_link\":", r.per_link ? "true" : "false",
      ",\"link_pieces\":", PiecesJson(r.link_pieces), ",\"link_decisions\":", r.link_decisions,
      ",\"decompose\":", Quote(r.per_layer ? "per-layer" : "off"),
      ",\"layers_cut\":", CountsJson(r.layers_cut), ",\"layer_decisions\":", r.layer_decisions,
      ",\"latency_us\":", Num(o.cluster.latency_us),
      ",\"env\":", env, ",\"policy\":", Quote(r.policy), ",\"partition_bytes\":", r.partition_bytes,
      ",\"network\":", Quote(NetworkModelName(o.model.network)), ",\"seed\":", o.seed,
      ",\"jitter\":", Num(o.model.compute_jitter), ",\"warmup\":", o.warmup,
      ",\"iteration_ms\":", Num(r.median_ms), ",\"p90_ms\":", Num(r.p90_ms),
      ",\"mean_ms\":", Num(r.mean_ms), ",\"lb1_ms\":", Num(r.lb1_ms),
      ",\"t_opt_ms\":", Num(r.t_opt_ms), ",\"allreduce_ms\":", Num(r.ring_ms),
      ",\"over_lb1\":", Num(r.median_ms / r.lb1_ms),
      ",\"ring_over_ferry\":", Num(r.ring_ms / r.median_ms), ",\"iterations_ms\":", iterations,
      ",\"hosts\":", hosts, ",\"events\":", r.events, ",\"messages\":", r.messages,
      ",\"rounds\":", r.rounds, ",\"late_pushes\":", CountsJson(r.late_pushes),
      ",\"catch_up\":", Quote(CatchUpName(o.catch_up)), ",\"sat_out\":", CountsJson(r.sat_out),
      ",\"ack_delay_us_p50\":", Num(r.ack_delay_p50_us),
      ",\"ack_delay_us_p99\":", Num(r.ack_delay_p99_us), ",\"simulated_ms\":", Num(r.run_ms),
      ",\"wall_s\":", Num(wall_s), "}\n");
}

// "vgg16 (16 layers, N bytes), 8 workers, 8 colocated servers, 1 Gbit/s, latency 0 us"
std::string DescribeJob(const SimOptions& o) {
  const ClusterSpec& c = o.cluster;
  uint64_t bytes = 0;
  for (const Layer& l : o.workload.layers) bytes += l.bytes;
  std::string servers =
      c.colocate ? StrCat(c.workers, " colocated servers") : StrCat(c.servers, " servers");
  if (c.cpu_servers > 0) servers += StrCat(" + ", c.cpu_servers, " CPU-only");
  return StrCat(o.workload.model, " (", o.workload.layers.size(), " layers, ", bytes, " bytes), ",
                c.workers, " workers, ", servers, ", ", LinksText(c), ", latency ",
                Num(c.latency_us), " us");
}

std::string FormatPartsJson(const SimResult& r) {
  nlohmann::json parts = nlohmann::json::array();
  for (const PartRecord& p : r.parts) {
    parts.push_back({{"iteration", p.iteration},
                     {"layer", p.layer},
                     {"server", p.server},
                     {"bytes", p.bytes},
                     {"ready_us", p.ready_us},
                     {"sent_us", p.sent_us},
                     {"acked_us", p.acked_us},
                     {"result_us", p.result_us}});
  }
  return nlohmann::json{{"parts", parts}}.dump() + "\n";
}

std::string FormatTextTail(const SimOptions& o, const SimResult& r, double wall_s) {
  std::string out;
  char line[512];
  const HostUse* busiest = nullptr;
  for (const HostUse& h : r.hosts) {
    if (!busiest || std::max(h.up, h.down) > std::max(busiest->up, busiest->down)) busiest = &h;
  }
  if (busiest) {
    std::snprintf(line, sizeof(line), "links      busiest: %s, up %.0f%%, down %.0f%%\n",
                  busiest->name.c_str(), 100 * busiest->up, 100 * busiest->down);
    out += line;
  }
  std::snprintf(line, sizeof(line),
                "simulated  %.1f ms of the job in %.2f s (%llu events, %s network model)\n",
                r.run_ms, wall_s, static_cast<unsigned long long>(r.events),
                NetworkModelName(o.model.network));
  return out + line;
}

std::string FormatText(const CliOptions& cli, const SimResult& r, double wall_s) {
  if (r.pipeline) return FormatPipelineText(cli, r, wall_s);
  const SimOptions& o = cli.sim;
  const ClusterSpec& c = o.cluster;
  std::string out = StrCat("ferry-sim: ", DescribeJob(o), "; policy ", r.policy, ", partitions ",
                           r.partition_bytes, " bytes\n");
  char line[512];
  std::snprintf(line, sizeof(line),
                "iteration  median %.2f ms, p90 %.2f ms (%zu iterations over %d workers)\n"
                "bounds     LB1 %.2f ms (median / LB1 %.3f); T_opt of one push_pull %.2f ms\n"
                "ring       all-reduce model %.2f ms (ring / Ferry %.3f)\n",
                r.median_ms, r.p90_ms, r.iteration_ms.size(), c.workers, r.lb1_ms,
                r.median_ms / r.lb1_ms, r.t_opt_ms, r.ring_ms, r.ring_ms / r.median_ms);
  return out + line + LinkModesText(r) + LatePushesText(o, r) + FormatTextTail(o, r, wall_s);
}

}  // namespace ferry::sim
