"""docker-compose.yml is valid (Debian's docker-compose accepts it) and its rendered
services give every role what it needs."""

import re

import pytest
import yaml

from deploy_support import REPO, clean_env, need_compose, run

COMPOSE = REPO / "docker-compose.yml"
PERF = REPO / "docker" / "compose.perf.yml"
CLUSTER_VARS = ("DMLC_NUM_WORKER", "DMLC_NUM_SERVER", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT")


def render(*files, env=None):
    need_compose()
    argv = ["docker-compose"]
    for f in files or (COMPOSE,):
        argv += ["-f", f]
    code, out = run(argv + ["config"], timeout=60, env=clean_env(env), cwd=REPO)
    assert code == 0, "docker-compose config refused the file:\n" + out
    return yaml.safe_load(out)["services"]


@pytest.fixture(scope="module")
def rendered():
    """docker-compose.yml as docker-compose renders it (once per module: it is slow)."""
    return render()


def by_role(services):
    roles = {}
    for name, s in services.items():
        roles.setdefault(s["environment"]["DMLC_ROLE"], []).append(name)
    return roles


def health_port_var(service):
    test = service["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL", test
    m = re.search(r"sport = :\$\$\{(\w+)\}", test[1])
    assert m, "the health check should test the listening port: %r" % test
    return m.group(1)


def test_docker_compose_accepts_the_file(rendered):
    services = rendered
    assert set(services) == {"scheduler", "server-0", "server-1", "worker-0", "worker-1"}


def test_every_role_gets_its_environment_and_command(rendered):
    services = rendered
    roles = by_role(services)
    assert sorted(roles) == ["scheduler", "server", "worker"]
    assert len(roles["scheduler"]) == 1
    scheduler = roles["scheduler"][0]
    cluster = {v: services[scheduler]["environment"][v] for v in CLUSTER_VARS}
    # Every node agrees on the job's shape and on where the scheduler is: its service name.
    for name, s in services.items():
        env = s["environment"]
        for v in CLUSTER_VARS:
            assert env.get(v) == cluster[v], "%s: %s=%r, the scheduler has %r" % (name, v, env.get(v), cluster[v])
        assert s["build"]["dockerfile"] == "docker/Dockerfile"
        # Scheduler and servers: the runtime image (no compiler); workers: the example's.
        worker = env["DMLC_ROLE"] == "worker"
        assert s["image"] == ("ferry-example:latest" if worker else "ferry:latest")
        assert s["build"]["target"] == ("example" if worker else "runtime")
        assert s["command"][0] == "ferry-launch", "%s does not start through ferry-launch" % name
    assert cluster["DMLC_PS_ROOT_URI"] == scheduler
    assert int(cluster["DMLC_NUM_SERVER"]) == len(roles["server"]) == 2
    assert int(cluster["DMLC_NUM_WORKER"]) == len(roles["worker"]) == 2

    # Scheduler and servers: ferry-launch alone (it execs the program); health checks on
    # their own ports, and the others wait for the scheduler's.
    assert services[scheduler]["command"] == ["ferry-launch"]
    assert health_port_var(services[scheduler]) == "DMLC_PS_ROOT_PORT"
    # A scheduler that fails (exit 1, or 137 when killed) is started again and adopts the
    # running job; one that exits 0 (the job ended, or another scheduler leads) is not.
    assert re.fullmatch(r"on-failure:[1-9]\d*", services[scheduler]["restart"]), services[scheduler]["restart"]
    for name in roles["server"]:
        s = services[name]
        assert s["command"] == ["ferry-launch"]
        assert health_port_var(s) == "DMLC_PORT"
        assert 1 <= int(s["environment"]["DMLC_PORT"]) <= 65535
        assert s["restart"].startswith("on-failure")
        assert s["depends_on"] == {scheduler: {"condition": "service_healthy"}}

    # Workers: the training example from the installed tree, the package on PYTHONPATH,
    # distinct ranks.
    ids = []
    for name in roles["worker"]:
        s = services[name]
        env = s["environment"]
        assert s["command"] == ["ferry-launch", "python3", "/usr/local/share/ferry/examples/train_digits.py"]
        assert env["PYTHONPATH"] == "/usr/local/lib/ferry/python"
        assert s["depends_on"] == {scheduler: {"condition": "service_healthy"}}
        assert s["restart"] == "no"
        ids.append(int(env["DMLC_WORKER_ID"]))
    assert sorted(ids) == list(range(len(roles["worker"])))


def test_the_secret_comes_from_the_example_env_file(rendered):
    example = (REPO / "ferry.env.example").read_text()
    m = re.search(r"^FERRY_SECRET=(.+)$", example, re.M)
    assert m, "ferry.env.example has no FERRY_SECRET"
    secret = m.group(1)
    assert "FAKE" in secret and "replace" in secret.lower(), "the example secret must look fake"
    assert len(secret) >= 16
    for name, s in rendered.items():
        assert s["environment"]["FERRY_SECRET"] == secret, name


def test_an_env_file_of_ones_own_replaces_the_example(tmp_path):
    own = tmp_path / "ferry.env"
    own.write_text("FERRY_SECRET=0123456789abcdef0123456789abcdef\n")
    for name, s in render(env={"FERRY_ENV_FILE": str(own)}).items():
        assert s["environment"]["FERRY_SECRET"] == "0123456789abcdef0123456789abcdef", name
        assert "FERRY_LOG_LEVEL" not in s["environment"]


def test_the_perf_override_runs_ferry_perf_on_the_same_cluster(rendered):
    base, perf = rendered, render(COMPOSE, PERF)
    assert set(base) == set(perf)
    for name in base:
        if name.startswith("worker-"):
            assert perf[name]["command"][:2] == ["ferry-launch", "ferry-perf"]
            assert perf[name]["environment"] == base[name]["environment"]
        else:
            assert perf[name] == base[name]


def test_docker_compose_config_does_refuse_a_broken_file(tmp_path):
    """The validity check means something: a wrong key is refused."""
    need_compose()
    broken = tmp_path / "broken.yml"
    broken.write_text("services:\n  scheduler:\n    image: ferry\n    restart_policy_typo: always\n")
    code, out = run(["docker-compose", "-f", broken, "config"], timeout=60, env=clean_env())
    assert code != 0 and "restart_policy_typo" in out, out
