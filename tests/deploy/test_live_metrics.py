"""Live metrics (FERRY_METRICS_PORT, docs/operations.md "Live metrics"): a real Prometheus
scrapes a running cluster and returns a ferry_* series for every node through its query
API; promtool accepts the exposition; headless Chromium renders the status page of a
2-server, 2-worker elastic job, with every node and a non-zero throughput, then a killed
worker marked dead with the scheduler's reason; bad HTTP requests get a 4xx while the
job trains on; without elastic training FERRY_METRICS_LINGER_MS keeps the failed job's
page up.

The workers are ferry-test-worker --mode=elastic: exact sums every step, a step boundary
each step (the iteration histogram), recovery from a dead worker.
"""

import html.parser
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from deploy_support import FERRY_BIN, REPO, Procs, clean_env, free_port, need_binaries

SERVERS = 2
WORKERS = 2


def need(program, package):
    path = shutil.which(program)
    if not path:
        pytest.fail("%s not found: install Debian's %s (scripts/install-deps --test)" % (program, package))
    return path


def get(url, timeout=5):
    """(status, body) of a GET; the status of an HTTP error too."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


class Job:
    """A scheduler, SERVERS servers and WORKERS elastic test workers on loopback, with the
    scheduler's metrics endpoint on a free port."""

    def __init__(self, procs, env=None):
        need_binaries("ferry-scheduler", "ferry-server", "ferry-test-worker")
        self.procs = procs
        self.metrics_port = free_port()
        self.url = "http://127.0.0.1:%d" % self.metrics_port
        self.env = clean_env({
            "DMLC_NUM_WORKER": str(WORKERS), "DMLC_NUM_SERVER": str(SERVERS),
            "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(free_port()),
            "DMLC_NODE_HOST": "127.0.0.1", "FERRY_LOG_LEVEL": "WARNING",
            "FERRY_METRICS_PORT": str(self.metrics_port), "FERRY_ELASTIC": "1",
            "FERRY_HEARTBEAT_INTERVAL_MS": "500", "FERRY_HEARTBEAT_TIMEOUT_MS": "3000",
            "FERRY_PARTITION_BYTES": "262144"})
        self.env.update(env or {})
        procs.start("scheduler", [FERRY_BIN / "ferry-scheduler"], dict(self.env, DMLC_ROLE="scheduler"))
        for i in range(SERVERS):
            procs.start("server %d" % i, [FERRY_BIN / "ferry-server"], dict(self.env, DMLC_ROLE="server"))
        for i in range(WORKERS):
            procs.start("worker %d" % i,
                        [FERRY_BIN / "ferry-test-worker", "--mode=elastic", "--rounds=1000000",
                         "--loop_sleep_ms=20", "--commit_every=3"],
                        dict(self.env, DMLC_ROLE="worker", DMLC_WORKER_ID=str(i)))

    def status(self):
        code, body = get(self.url + "/api/status")
        assert code == 200, (code, body)
        return json.loads(body)

    def wait_for(self, what, predicate, timeout=60):
        """Polls /api/status until predicate(status) holds; fails naming `what`."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = self.status()
                if predicate(last):
                    return last
            except (OSError, ValueError):
                pass
            time.sleep(0.3)
        pytest.fail("%s: not within %d s; last status %s\n%s" % (what, timeout, last, self.procs.dump()))

    def wait_training(self):
        """Every node listed alive, and every server and worker moving bytes."""
        def training(s):
            nodes = [n for n in s["nodes"] if n["role"] in ("server", "worker")]
            return (len(nodes) == SERVERS + WORKERS and all(n["alive"] for n in nodes) and
                    all(any(l["sent_bytes_per_s"] > 0 for l in n["links"]) for n in nodes))
        return self.wait_for("every node training", training)


def node_of(status, role, rank, alive=True):
    found = [n for n in status["nodes"] if n["role"] == role and n["rank"] == rank and n["alive"] == alive]
    return found[0] if found else None


# --- Prometheus and promtool -------------------------------------------------------------

def test_prometheus_scrapes_a_series_for_every_node_and_promtool_accepts_it(tmp_path):
    prometheus = need("prometheus", "prometheus")
    promtool = need("promtool", "prometheus")
    with Procs(tmp_path) as procs:
        job = Job(procs)
        job.wait_training()
        code, exposition = get(job.url + "/metrics")
        assert code == 200
        check = subprocess.run([promtool, "check", "metrics"], input=exposition.encode(),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        assert check.returncode == 0, check.stdout.decode() + exposition[:3000]

        prom_port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                          "scrape_configs:\n  - job_name: ferry\n    static_configs:\n"
                          "      - targets: ['127.0.0.1:%d']\n" % job.metrics_port)
        procs.start("prometheus", [prometheus, "--config.file=%s" % config,
                                   "--storage.tsdb.path=%s" % (tmp_path / "tsdb"),
                                   "--web.listen-address=127.0.0.1:%d" % prom_port], clean_env())
        api = "http://127.0.0.1:%d/api/v1/query?query=" % prom_port

        def query(q):
            try:
                code, body = get(api + urllib.request.quote(q))
            except OSError:  # Prometheus not up yet
                return []
            return json.loads(body)["data"]["result"] if code == 200 else []

        expected = {("scheduler", "0")} | {("server", str(i)) for i in range(SERVERS)} | \
                   {("worker", str(i)) for i in range(WORKERS)}
        deadline = time.monotonic() + 90
        up = sent = summed = []
        while time.monotonic() < deadline:
            up = query("ferry_node_up == 1")
            sent = query("ferry_bytes_sent_total > 0")
            summed = query("rate(ferry_summed_bytes_total[10s]) > 0")
            if ({(r["metric"]["role"], r["metric"]["rank"]) for r in up} == expected and
                    {(r["metric"]["role"], r["metric"]["rank"]) for r in sent} == expected - {("scheduler", "0")}
                    and len(summed) == SERVERS):
                break
            time.sleep(1)
        else:
            pytest.fail("Prometheus did not return every node's series within 90 s:\nup %s\nsent %s\n"
                        "summed %s\n%s" % (up, sent, summed, procs.dump()))
        # Every worker's urgent delay and iteration histograms reached Prometheus too.
        for name in ("ferry_urgent_queue_delay_seconds_count", "ferry_iteration_seconds_count",
                     "ferry_partition_round_seconds_count"):
            series = query("%s > 0" % name)
            assert {r["metric"]["rank"] for r in series} == {str(i) for i in range(WORKERS)}, (name, series)
        # Every query of the Grafana dashboard is valid PromQL over these series, and all but
        # the refusals (none here) return data from the running job.
        for expr in dashboard_queries():
            code, body = get(api + urllib.request.quote(expr))
            assert code == 200 and json.loads(body)["status"] == "success", (expr, body)
            if "> 0" not in expr:
                assert json.loads(body)["data"]["result"], "no data for the dashboard's %s" % expr
        # The workers' peers are the servers, the servers' the workers.
        assert {r["metric"]["peer"] for r in sent if r["metric"]["role"] == "worker"} == \
               {"server-%d" % i for i in range(SERVERS)}
        assert {r["metric"]["peer"] for r in sent if r["metric"]["role"] == "server"} == \
               {"worker-%d" % i for i in range(WORKERS)}


def dashboard_queries():
    dashboard = json.loads((REPO / "deploy" / "grafana" / "ferry-dashboard.json").read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def test_the_dashboard_uses_only_series_ferry_exports(tmp_path):
    # The series a training job exports, as its scheduler lists them (# TYPE lines): each is
    # declared where its value lives, so the running job is the one place that has them all.
    with Procs(tmp_path) as procs:
        job = Job(procs)
        job.wait_training()
        code, exposition = get(job.url + "/metrics")
    assert code == 200
    catalog = set(re.findall(r"^# TYPE (ferry_[a-z_]+) ", exposition, flags=re.M))
    assert len(catalog) >= 15, catalog
    used = set()
    for expr in dashboard_queries():
        for name in re.findall(r"ferry_[a-z_]+", expr):
            used.add(re.sub(r"_(bucket|sum|count)$", "", name) if name not in catalog else name)
    assert used and used <= catalog, used - catalog
    dashboard = json.loads((REPO / "deploy" / "grafana" / "ferry-dashboard.json").read_text())
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"  # importable: asks for the source


# --- The status page in Chromium ---------------------------------------------------------

class PageRows(html.parser.HTMLParser):
    """The rendered page's node rows (data-role, data-rank, data-state, text) and link rows
    (data-node, data-peer, data-bytes-per-s)."""

    def __init__(self):
        super().__init__()
        self.nodes, self.links = [], []
        self.row = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "node" in (a.get("class") or "").split():
            self.row = {"role": a["data-role"], "rank": int(a["data-rank"]), "state": a["data-state"],
                        "text": ""}
            self.nodes.append(self.row)
        elif tag == "tr" and a.get("class") == "link":
            self.row = None
            self.links.append({"node": a["data-node"], "peer": a["data-peer"],
                               "bytes_per_s": float(a["data-bytes-per-s"])})
        elif tag == "tr":
            self.row = None

    def handle_data(self, data):
        if self.row is not None:
            self.row["text"] += data


def render(url, tmp_path, screenshot=None):
    """The status page's DOM after Chromium ran its script (headless, as root: no sandbox)."""
    chromium = need("chromium", "chromium")
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--no-first-run", "--user-data-dir=%s" % (tmp_path / "chromium-profile"),
              "--virtual-time-budget=3000"]
    if screenshot:
        subprocess.run(common + ["--window-size=1400,800", "--screenshot=%s" % screenshot, url],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    out = subprocess.run(common + ["--dump-dom", url], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, timeout=120)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    page = PageRows()
    page.feed(out.stdout.decode())
    return page, out.stdout.decode()


def test_status_page_shows_every_node_throughput_and_a_dead_worker(tmp_path):
    with Procs(tmp_path) as procs:
        job = Job(procs)
        job.wait_training()
        shot = os.environ.get("FERRY_STATUS_SCREENSHOT")  # docs/images/status-page.png
        page, dom = render(job.url + "/", tmp_path)
        assert {(n["role"], n["rank"], n["state"]) for n in page.nodes} == \
               {("scheduler", 0, "alive")} | {("server", i, "alive") for i in range(SERVERS)} | \
               {("worker", i, "alive") for i in range(WORKERS)}, dom[-4000:]
        assert any(l["bytes_per_s"] > 0 for l in page.links), dom[-4000:]
        assert {l["peer"] for l in page.links if l["node"] == "worker-0"} == \
               {"server-%d" % i for i in range(SERVERS)}, page.links

        procs.procs["worker 1"].send_signal(signal.SIGKILL)
        status = job.wait_for("worker 1 dead and the survivor training again",
                              lambda s: node_of(s, "worker", 1, alive=False) is not None and
                              s["job"]["epoch"] >= 1)
        reason = node_of(status, "worker", 1, alive=False)["reason"]
        assert "presumed dead" in reason, reason
        page, dom = render(job.url + "/", tmp_path, screenshot=shot)
        dead = [n for n in page.nodes if n["state"] == "dead"]
        assert [(n["role"], n["rank"]) for n in dead] == [("worker", 1)], dom[-4000:]
        assert "presumed dead" in dead[0]["text"], dead[0]
        assert ("worker", 0, "alive") in {(n["role"], n["rank"], n["state"]) for n in page.nodes}
        assert procs.procs["worker 0"].poll() is None, procs.dump()  # the survivor trains on


# --- Safety --------------------------------------------------------------------------------

def raw_request(port, data, timeout=10):
    """Sends raw bytes; returns the HTTP status code of the answer (0: none)."""
    return raw_reply(port, data, timeout)[0]


def raw_reply(port, data, timeout=10):
    """Sends raw bytes; returns (status code or 0, the reply's head as text)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except OSError:
            pass  # the server may answer and close before a huge request is all sent
        reply = b""
        try:
            while b"\r\n\r\n" not in reply:
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
        except OSError:
            pass
    m = re.match(rb"HTTP/1\.[01] (\d{3})", reply)
    return (int(m.group(1)) if m else 0), reply.split(b"\r\n\r\n")[0].decode(errors="replace")


def test_bad_requests_get_4xx_and_the_job_trains_on(tmp_path):
    with Procs(tmp_path) as procs:
        job = Job(procs)
        before = job.wait_training()
        port = job.metrics_port
        code, head = raw_reply(port, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        assert code == 405 and "Allow: GET, HEAD" in head, head
        code, head = raw_reply(port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert code == 200 and "text/plain; version=0.0.4" in head, head
        assert raw_request(port, b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n") == 405
        assert raw_request(port, b"GET /secrets HTTP/1.1\r\nHost: x\r\n\r\n") == 404
        assert raw_request(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello") == 413
        assert 400 <= raw_request(port, b"HELLO THERE\r\n\r\n") < 500
        assert 400 <= raw_request(port, b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n") < 500
        assert 400 <= raw_request(port, b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 100000 +
                                  b"\r\n\r\n") < 500
        # A client that connects and says nothing holds no answer back from the others.
        with socket.create_connection(("127.0.0.1", port)):
            assert get(job.url + "/metrics")[0] == 200
        sent = lambda s: sum(l["sent_bytes"] for n in s["nodes"] for l in n["links"])
        job.wait_for("the job training on after the bad requests", lambda s: sent(s) > sent(before))
        for name, p in procs.procs.items():
            assert p.poll() is None, "%s ended:\n%s" % (name, procs.dump())
        # Bound to the loopback address by default (FERRY_METRICS_BIND).
        listening = subprocess.run(["ss", "-ltnH", "sport = :%d" % port], stdout=subprocess.PIPE,
                                   timeout=10).stdout.decode()
        assert "127.0.0.1:%d" % port in listening, listening


def test_linger_keeps_a_failed_jobs_page_up(tmp_path):
    """Without elastic training a dead worker ends the job; FERRY_METRICS_LINGER_MS keeps the
    scheduler serving the failure (and the dead node, with the reason) for that long."""
    with Procs(tmp_path) as procs:
        job = Job(procs, env={"FERRY_ELASTIC": "0", "FERRY_METRICS_LINGER_MS": "60000"})
        job.wait_training()
        procs.procs["worker 1"].send_signal(signal.SIGKILL)
        status = job.wait_for("the job failed", lambda s: s["job"]["state"] == "failed")
        assert "presumed dead" in status["job"]["failure"], status
        assert node_of(status, "worker", 1, alive=False) is not None, status
        time.sleep(2)  # past the failure: still serving
        assert job.status()["job"]["state"] == "failed"
        assert procs.procs["scheduler"].poll() is None, procs.dump()
        code, exposition = get(job.url + "/metrics")
        assert code == 200 and re.search(r'ferry_node_up\{role="worker",rank="1",node="\d+",'
                                         r'reason="[^"]*presumed dead[^"]*"\} 0', exposition), exposition
