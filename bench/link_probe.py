"""link_probe: how busy each emulated host's link was, and how deep its queue, sampled.

scripts/netns-cluster joins every host to a bridge in a namespace of its own; the bridge
port named after a host is the far end of that host's eth0, so the port's rx_bytes are what
the host sent (after its eth0's HTB) and its tx_bytes what it received (after the port's
HTB, whose FIFO is the host's downlink queue). A sampler runs inside the bridge's
namespace (`ip netns exec`, which mounts that namespace's /sys) and prints, every
`interval` seconds, each port's counters and, every `qdisc_every` samples, each port's
qdisc backlog in bytes. `summary()` turns the samples into, per host and direction, the
share of the active span the link was busy (bytes moved / (rate x span)) and the downlink
queue's p50/p99/max backlog, where the active span runs from the first to the last sample
in which any link moved more than 10% of its rate.

    with LinkProbe("ub123-bridge", ["worker0", "worker1"], interval=0.01) as probe:
        ...  # the traffic
    print(probe.summary(rate_bytes_per_s))
"""

import json
import statistics
import subprocess
import tempfile

SAMPLER = r"""
import json, subprocess, sys, time
ports, interval, qdisc_every = sys.argv[1].split(","), float(sys.argv[2]), int(sys.argv[3])
def read(port, name):
    with open("/sys/class/net/%s/statistics/%s" % (port, name)) as f:
        return int(f.read())
n = 0
while True:
    line = {"t": time.monotonic(), "rx": [read(p, "rx_bytes") for p in ports],
            "tx": [read(p, "tx_bytes") for p in ports]}
    if n % qdisc_every == 0:
        out = subprocess.run(["tc", "-s", "-j", "qdisc", "show"], stdout=subprocess.PIPE, text=True).stdout
        backlog = {}
        for q in json.loads(out or "[]"):
            if q.get("dev") in ports and q.get("root"):
                backlog[q["dev"]] = q.get("backlog", 0)
        line["backlog"] = [backlog.get(p, 0) for p in ports]
    print(json.dumps(line), flush=True)
    n += 1
    time.sleep(interval)
"""


class LinkProbe:
    def __init__(self, bridge_namespace, ports, interval=0.01, qdisc_every=5):
        self.ns, self.ports = bridge_namespace, list(ports)
        self.interval, self.qdisc_every = interval, qdisc_every
        self.samples = []

    def __enter__(self):
        # A file, not a pipe: nobody reads while the traffic runs.
        self.out = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, "/usr/bin/python3", "-c", SAMPLER, ",".join(self.ports),
             str(self.interval), str(self.qdisc_every)],
            stdin=subprocess.DEVNULL, stdout=self.out, stderr=subprocess.DEVNULL, text=True)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.out.seek(0)
        self.samples = [json.loads(line) for line in self.out if line.startswith("{")]
        self.out.close()

    def summary(self, rate_bytes_per_s):
        """{host: {"up_bytes", "down_bytes", "up_busy", "down_busy", "backlog_p50", "backlog_p99",
        "backlog_max"}} plus "span_s" and idle_split's two figures, over the active span; {} when fewer than two samples
        came or no link was ever active."""
        s = self.samples
        if len(s) < 2:
            return {}
        active = []
        for a, b in zip(s, s[1:]):
            dt = b["t"] - a["t"]
            moved = max(max(y - x for x, y in zip(a[d], b[d])) for d in ("rx", "tx"))
            if dt > 0 and moved > 0.1 * rate_bytes_per_s * dt:
                active.append((a, b))
        if not active:
            return {}
        first, last = active[0][0], active[-1][1]
        span = last["t"] - first["t"]
        out = {"span_s": round(span, 3)}
        out.update(self.idle_split(rate_bytes_per_s, first["t"], last["t"]))
        inside = [x for x in s if first["t"] <= x["t"] <= last["t"] and "backlog" in x]
        for i, host in enumerate(self.ports):
            backlog = sorted(x["backlog"][i] for x in inside) or [0]
            up, down = last["rx"][i] - first["rx"][i], last["tx"][i] - first["tx"][i]
            out[host] = {
                "up_bytes": up, "down_bytes": down,
                "up_busy": round(up / (rate_bytes_per_s * span), 3),
                "down_busy": round(down / (rate_bytes_per_s * span), 3),
                "backlog_p50": int(statistics.median(backlog)),
                "backlog_p99": backlog[min(len(backlog) - 1, int(0.99 * len(backlog)))],
                "backlog_max": backlog[-1]}
        return out

    def idle_split(self, rate_bytes_per_s, start, end, bin_s=0.05, low=0.5):
        """The uplinks' idle time between `start` and `end`, in seconds of one host's link
        (the mean over hosts), split into bins where the hosts together sent less than `low`
        of their rate ("idle_s_gaps": a push_pull's start, end and the barrier between two)
        and the rest ("idle_s_steady": idle moments while the traffic flows)."""
        s = [x for x in self.samples if start <= x["t"] <= end]
        gaps = steady = 0.0
        i = 0
        while i < len(s) - 1:
            j = i + 1
            while j < len(s) - 1 and s[j]["t"] - s[i]["t"] < bin_s:
                j += 1
            dt = s[j]["t"] - s[i]["t"]
            share = sum(b - a for a, b in zip(s[i]["rx"], s[j]["rx"])) / (rate_bytes_per_s * dt * len(self.ports))
            lost = max(0.0, 1.0 - share) * dt
            if share < low:
                gaps += lost
            else:
                steady += lost
            i = j
        return {"idle_s_gaps": round(gaps, 3), "idle_s_steady": round(steady, 3)}

    def timeline(self, rate_bytes_per_s, bin_s=0.1):
        """[(t from the first sample, {host: (up share, down share, backlog)})] per bin."""
        s = self.samples
        if len(s) < 2:
            return []
        t0, rows, start = s[0]["t"], [], s[0]
        for x in s[1:]:
            if x["t"] - start["t"] >= bin_s:
                dt = x["t"] - start["t"]
                rows.append((round(start["t"] - t0, 2), {
                    h: (round((x["rx"][i] - start["rx"][i]) / (rate_bytes_per_s * dt), 2),
                        round((x["tx"][i] - start["tx"][i]) / (rate_bytes_per_s * dt), 2),
                        x.get("backlog", [None] * len(self.ports))[i])
                    for i, h in enumerate(self.ports)}))
                start = x
        return rows
