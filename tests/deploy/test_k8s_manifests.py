"""deploy/k8s: no cluster runs here, so the manifests' structure is checked: kinds,
selectors, each role's environment, ports, replicas against DMLC_NUM_*, the secret."""


import pytest
import yaml

from deploy_support import REPO

K8S = REPO / "deploy" / "k8s"
CLUSTER_VARS = ("DMLC_NUM_WORKER", "DMLC_NUM_SERVER", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT")


@pytest.fixture(scope="module")
def docs():
    out = []
    for f in sorted(K8S.glob("*.yaml")):
        if f.name == "kustomization.yaml":
            continue
        for d in yaml.safe_load_all(f.read_text()):
            if d:
                assert d.get("apiVersion") and d.get("kind") and d["metadata"].get("name"), (f, d)
                out.append(d)
    return out


def find(docs, kind, name):
    hits = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(hits) == 1, "%s/%s: %d found" % (kind, name, len(hits))
    return hits[0]


def container_env(docs, workload):
    """The container's environment as Kubernetes would give it: envFrom, then env.
    Values from fields (pod IP, labels) are returned as ('field', path)."""
    c = workload["spec"]["template"]["spec"]["containers"]
    assert len(c) == 1
    c = c[0]
    env = {}
    for src in c.get("envFrom", []):
        if "configMapRef" in src:
            env.update(find(docs, "ConfigMap", src["configMapRef"]["name"])["data"])
        elif "secretRef" in src:
            env.update(find(docs, "Secret", src["secretRef"]["name"])["stringData"])
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            env[e["name"]] = ("field", e["valueFrom"]["fieldRef"]["fieldPath"])
    return c, env


def test_kustomization_lists_every_manifest():
    k = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert k["kind"] == "Kustomization"
    files = sorted(f.name for f in K8S.glob("*.yaml") if f.name != "kustomization.yaml")
    assert sorted(k["resources"]) == files
    assert {i["name"] for i in k["images"]} == {"ferry", "ferry-example"}


def test_the_kinds_of_a_ferry_job(docs):
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert kinds == sorted([
        ("Secret", "ferry-secret"), ("ConfigMap", "ferry-cluster"),
        ("Service", "ferry-scheduler"), ("Deployment", "ferry-scheduler"),
        ("Service", "ferry-server"), ("StatefulSet", "ferry-server"),
        ("Service", "ferry-worker"), ("StatefulSet", "ferry-worker"),
    ])


def test_selectors_match_their_pods(docs):
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet"):
            labels = d["spec"]["template"]["metadata"]["labels"]
            assert d["spec"]["selector"]["matchLabels"].items() <= labels.items(), d["metadata"]["name"]
        if d["kind"] == "StatefulSet":
            svc = find(docs, "Service", d["spec"]["serviceName"])
            assert svc["spec"]["clusterIP"] == "None"
    for svc in (d for d in docs if d["kind"] == "Service"):
        pods = [w for w in docs if w["kind"] in ("Deployment", "StatefulSet")
                and svc["spec"]["selector"].items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert len(pods) == 1, svc["metadata"]["name"]


def test_every_role_gets_what_it_needs(docs):
    scheduler = find(docs, "Deployment", "ferry-scheduler")
    servers = find(docs, "StatefulSet", "ferry-server")
    workers = find(docs, "StatefulSet", "ferry-worker")
    shapes = []
    for workload, role in ((scheduler, "scheduler"), (servers, "server"), (workers, "worker")):
        c, env = container_env(docs, workload)
        assert env["DMLC_ROLE"] == role
        for v in CLUSTER_VARS:
            assert v in env, "%s lacks %s" % (role, v)
        shapes.append(tuple(env[v] for v in CLUSTER_VARS))
        # The pod's own address is what it advertises.
        assert env["DMLC_NODE_HOST"] == ("field", "status.podIP")
        assert env["FERRY_SECRET"] and "FAKE" in env["FERRY_SECRET"]
        # args, not command: the image's entrypoint (tini, ferry-entrypoint) stays.
        assert "command" not in c and c["args"][0] == "ferry-launch"
        assert c["image"] in ("ferry", "ferry-example")
    assert len(set(shapes)) == 1
    num_worker, num_server, root_uri, root_port = shapes[0]

    # The scheduler's Service is DMLC_PS_ROOT_URI, on DMLC_PS_ROOT_PORT, to its container port.
    svc = find(docs, "Service", root_uri)
    c, env = container_env(docs, scheduler)
    assert scheduler["spec"]["replicas"] == 1
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert svc["spec"]["ports"][0]["port"] == int(root_port) == ports[svc["spec"]["ports"][0]["targetPort"]]
    assert "DMLC_PS_ROOT_PORT" in " ".join(c["readinessProbe"]["exec"]["command"])

    # Servers: as many as DMLC_NUM_SERVER, listening on DMLC_PORT, their container port.
    c, env = container_env(docs, servers)
    assert servers["spec"]["replicas"] == int(num_server)
    assert [p["containerPort"] for p in c["ports"]] == [int(env["DMLC_PORT"])]
    assert "DMLC_PORT" in " ".join(c["readinessProbe"]["exec"]["command"])

    # Workers: as many pods as DMLC_NUM_WORKER (machines, whatever FERRY_LOCAL_SIZE), ranks
    # from the pod ordinal, the training example with the package on PYTHONPATH; the port
    # other workers' point-to-point sends arrive on.
    c, env = container_env(docs, workers)
    assert workers["spec"]["replicas"] == int(num_worker)
    assert env["DMLC_WORKER_ID"] == ("field", "metadata.labels['apps.kubernetes.io/pod-index']")
    assert env["PYTHONPATH"] == "/usr/local/lib/ferry/python"
    assert c["args"] == ["ferry-launch", "python3", "/usr/local/share/ferry/examples/train_digits.py"]
    assert c["image"] == "ferry-example"
    assert [p["containerPort"] for p in c["ports"]] == [int(env["DMLC_PORT"])] == [9200]


def test_an_elastic_job_gets_a_dead_server_back(docs):
    # FERRY_ELASTIC reaches every role from the ConfigMap, and a dead server's container is
    # restarted in its pod (the pod's restartPolicy stays Always): it then registers as a
    # spare and takes its slot back (docs/reliability.md, "Elastic training").
    assert find(docs, "ConfigMap", "ferry-cluster")["data"]["FERRY_ELASTIC"] in ("0", "1")
    for kind, name in (("Deployment", "ferry-scheduler"), ("StatefulSet", "ferry-server"),
                       ("StatefulSet", "ferry-worker")):
        workload = find(docs, kind, name)
        c, env = container_env(docs, workload)
        assert "FERRY_ELASTIC" in env, name
    servers = find(docs, "StatefulSet", "ferry-server")
    assert servers["spec"]["template"]["spec"].get("restartPolicy", "Always") == "Always"


def test_a_dead_scheduler_comes_back_at_the_same_address(docs):
    # The kubelet restarts the scheduler's container (restartPolicy Always; one replica, and
    # never two at once), and the nodes find the new one where they found the old: the
    # Service's stable cluster address (not headless: a pod replaced gets a new IP), which
    # is DMLC_PS_ROOT_URI. The scheduler listens on its pod's address, since the address
    # DMLC_PS_ROOT_URI resolves to is the Service's.
    scheduler = find(docs, "Deployment", "ferry-scheduler")
    spec = scheduler["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    assert spec["template"]["spec"].get("restartPolicy", "Always") == "Always"
    c, env = container_env(docs, scheduler)
    service = find(docs, "Service", env["DMLC_PS_ROOT_URI"])
    assert service["spec"].get("clusterIP") != "None"
    assert env["FERRY_BIND_ADDR"] == ("field", "status.podIP")


def test_the_scheduler_is_annotated_for_prometheus_on_the_pod_network(docs):
    # The scheduler serves every node's series (docs/operations.md, "Live metrics"): its pod
    # carries the prometheus.io annotations with the ConfigMap's port, listens on the pod's
    # address (not the loopback default), and names the port for the Service.
    port = find(docs, "ConfigMap", "ferry-cluster")["data"]["FERRY_METRICS_PORT"]
    scheduler = find(docs, "Deployment", "ferry-scheduler")
    notes = scheduler["spec"]["template"]["metadata"]["annotations"]
    assert notes == {"prometheus.io/scrape": "true", "prometheus.io/port": port,
                     "prometheus.io/path": "/metrics"}
    c, env = container_env(docs, scheduler)
    assert env["FERRY_METRICS_BIND"] == ("field", "status.podIP")
    assert {"name": "metrics", "containerPort": int(port), "protocol": "TCP"} in c["ports"]
    service = find(docs, "Service", "ferry-scheduler")
    assert {"name": "metrics", "port": int(port), "targetPort": "metrics", "protocol": "TCP"} in \
        service["spec"]["ports"]


def test_the_published_secret_is_marked_fake(docs):
    s = find(docs, "Secret", "ferry-secret")
    assert s["type"] == "Opaque" and list(s["stringData"]) == ["FERRY_SECRET"]
    text = (K8S / "secret.yaml").read_text()
    assert "FAKE" in s["stringData"]["FERRY_SECRET"] and "replace it" in text
