"""docker/Dockerfile cannot be built here (no engine, no registry). These tests check
that it installs the same Debian packages as scripts/install-deps and runs the same build
(scripts/build, scripts/install), that its runtime stage gets only run-time packages, and
run the pieces it runs (docker/runtime-packages, docker/entrypoint.sh) on this machine."""

import json
import re
import shlex
import subprocess

import pytest

from deploy_support import BUILD, REPO, SCRIPTS, clean_env, need_binaries, run

DOCKERFILE = REPO / "docker" / "Dockerfile"
COMPILERS = re.compile(r"^(gcc|g\+\+|cpp|clang|build-essential|cmake|make|binutils|protobuf-compiler"
                       r"|nvidia-cuda-toolkit|cuda-nvcc.*|gcc-\d+|g\+\+-\d+|cpp-\d+)$")


def instructions():
    """[(stage name, INSTRUCTION, arguments)] with continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out, stage = [], None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            stage = m.group(2) or m.group(1)
        out.append((stage, word, rest.strip()))
    return out


def in_stage(stage, word):
    return [rest for s, w, rest in instructions() if s == stage and w == word]


def install_deps_packages():
    text = (SCRIPTS / "install-deps").read_text()
    m = re.search(r"PACKAGES=\((.*?)\)", text, re.S)
    return [p for line in m.group(1).splitlines() for p in line.split("#")[0].split()]


def test_two_stages_on_debian_bookworm_and_the_cuda_variant():
    ins = instructions()
    args = {rest.split("=")[0]: rest.split("=", 1)[1] for s, w, rest in ins if w == "ARG" and "=" in rest}
    assert args["BUILD_IMAGE"] == "debian:bookworm"
    assert args["RUNTIME_IMAGE"].startswith("debian:bookworm")
    froms = [rest for _, w, rest in ins if w == "FROM"]
    assert froms == ["${BUILD_IMAGE} AS build", "${RUNTIME_IMAGE} AS runtime-base",
                     "runtime-base AS example", "runtime-base AS runtime"]
    # runtime, the default target (last), is runtime-base as it is.
    assert [(w, r) for s, w, r in ins if s == "runtime"] == [("FROM", "runtime-base AS runtime")]
    # The CUDA variant: NVIDIA's images through the same build arguments, and CUDA on.
    assert "FERRY_WITH_CUDA=OFF" in in_stage("build", "ARG")
    assert any('-DFERRY_WITH_CUDA="${FERRY_WITH_CUDA}"' in r for r in in_stage("build", "RUN"))
    text = DOCKERFILE.read_text()
    assert re.search(r"BUILD_IMAGE=nvidia/cuda:\S+-devel-", text)
    assert re.search(r"RUNTIME_IMAGE=nvidia/cuda:\S+-runtime-", text)
    assert "FERRY_WITH_CUDA=ON" in text


def test_the_build_stage_installs_with_the_projects_own_script():
    runs = in_stage("build", "RUN")
    # The same package list: scripts/install-deps itself runs, and nothing else installs.
    assert "scripts/install-deps scripts/install-deps" in in_stage("build", "COPY")
    assert any(shlex.split(r)[0] == "scripts/install-deps" for r in runs), runs
    assert not any("apt-get install" in r for r in runs), "the build stage must not install other packages"
    assert "python3-torch" in install_deps_packages() and "libzmq3-dev" in install_deps_packages()


def test_the_build_stage_runs_the_same_build_and_install():
    runs = " ; ".join(in_stage("build", "RUN"))
    assert re.search(r"scripts/build /src/build ", runs), runs
    assert "scripts/install --build /src/build --prefix /usr/local --destdir /stage" in runs
    assert "docker/runtime-packages /stage/usr/local > /stage/runtime-packages.txt" in runs
    # The image's install is the documented one, and what compose-local installs too.
    assert "--prefix\", IMAGE_PREFIX" in (SCRIPTS / "compose-local").read_text()


def test_the_runtime_stage_has_no_compiler():
    runs = in_stage("runtime-base", "RUN")
    installs = [r for r in runs if "apt-get install" in r]
    assert len(installs) == 1
    # It installs exactly the list docker/runtime-packages made in the build stage.
    assert "xargs -a /tmp/runtime-packages.txt apt-get install" in installs[0]
    assert "--no-install-recommends" in installs[0]
    copies = in_stage("runtime-base", "COPY")
    assert "--from=build /stage/runtime-packages.txt /tmp/runtime-packages.txt" in copies
    assert "--from=build /stage/usr/local/ /usr/local/" in copies
    assert not any("scripts/build" in r or "cmake" in r for r in runs)


def test_the_example_stage_adds_only_scikit_learn():
    runs = in_stage("example", "RUN")
    assert len(runs) == 1 and "apt-get install -y -q --no-install-recommends python3-sklearn " in runs[0]
    assert "python3-sklearn" in install_deps_packages()   # the same package the tests use


def test_entrypoint_is_tini_then_ferry_launch():
    entry = in_stage("runtime-base", "ENTRYPOINT")
    assert [json.loads(e) for e in entry] == [["tini", "--", "/usr/local/bin/ferry-entrypoint"]]
    runs = " ; ".join(in_stage("build", "RUN"))
    assert "install -m 0755 docker/entrypoint.sh /stage/usr/local/bin/ferry-entrypoint" in runs
    env = in_stage("runtime-base", "ENV")
    assert "PYTHONPATH=/usr/local/lib/ferry/python" in env


def test_the_build_context_leaves_out_local_build_folders():
    ignore = (REPO / "docker" / "Dockerfile.dockerignore").read_text().split()
    assert "build*/" in ignore and ".git" in ignore


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """What the build stage installs, from this machine's build."""
    need_binaries()
    dest = tmp_path_factory.mktemp("stage")
    code, out = run([SCRIPTS / "install", "--build", BUILD, "--prefix", "/usr/local", "--destdir", dest,
                     "--strip"], timeout=120)
    assert code == 0, out
    return dest / "usr" / "local"


def test_install_lays_out_what_the_image_and_compose_expect(staged):
    for f in ("bin/ferry-scheduler", "bin/ferry-server", "bin/ferry-perf", "bin/ferry-launch",
              "lib/libferry.so", "include/ferry/c_api.h"):
        assert (staged / f).is_file(), f
    if (BUILD / "python" / "ferry").is_dir():
        assert (staged / "lib/ferry/python/ferry/__init__.py").is_file()
    if (REPO / "examples" / "train_digits.py").is_file():
        assert (staged / "share/ferry/examples/train_digits.py").is_file()
    # The installed ferry-launch finds the programs next to it.
    code, out = run([staged / "bin" / "ferry-launch"], timeout=30, env=clean_env({
        "DMLC_ROLE": "scheduler", "DMLC_NUM_WORKER": "1", "DMLC_NUM_SERVER": "1",
        "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "not-a-port"}))
    assert code == 2 and "DMLC_PS_ROOT_PORT='not-a-port'" in out, out
    if (BUILD / "python" / "ferry").is_dir():
        # The installed ferry-run finds the programs and the package in the installed tree:
        # a DDP-style job of 2 ranks over the ferry backend, without the source tree's paths.
        script = staged / "allreduce.py"
        script.write_text("import torch, torch.distributed as dist\n"
                          "dist.init_process_group('ferry')\n"
                          "t = torch.full((3,), float(dist.get_rank() + 1))\n"
                          "dist.all_reduce(t)\n"
                          "print('sum', t.tolist())\n"
                          "dist.destroy_process_group()\n")
        code, out = run([staged / "bin" / "ferry-run", "--standalone", "--nproc-per-node", "2",
                         script], timeout=120, env=clean_env({}))
        assert code == 0 and out.count("sum [3.0, 3.0, 3.0]") == 2, out


def test_runtime_packages_are_the_run_time_halves_of_install_deps(staged):
    # The list is stdout (the Dockerfile redirects only that); notes such as "libnccl comes
    # with the CUDA base image" (a build with NCCL) go to stderr.
    r = subprocess.run([str(REPO / "docker" / "runtime-packages"), str(staged)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    packages = r.stdout.split()
    for p in ("libzmq5", "libsodium23", "libprotobuf32", "libgflags2.2", "python3", "python3-torch",
              "tini", "iproute2"):
        assert p in packages, "%s missing from %s" % (p, packages)
    assert not [p for p in packages if p.endswith("-dev") or COMPILERS.match(p)], packages

    # Every library package is what one of install-deps' packages depends on (the -dev
    # packages' libraries): the runtime stage installs the same packages' run-time halves.
    def depends(pkgs):
        r = subprocess.run(["dpkg-query", "-W", "-f", "${Depends},${Pre-Depends}\n"] + sorted(pkgs),
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        names = set()
        for alt in re.split(r"[,|]", r.stdout):
            name = alt.strip().split(" ")[0].split(":")[0]
            if name:
                names.add(name)
        return names
    closure, frontier = set(install_deps_packages()), set(install_deps_packages())
    for _ in range(6):
        frontier = depends(frontier) - closure
        closure |= frontier
    not_from_deps = [p for p in packages if p not in closure and p != "tini"]
    assert not not_from_deps, "runtime packages not provided through install-deps: %s" % not_from_deps

    # And nothing in the runtime list pulls a compiler in.
    r = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
                        "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"] + packages,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=120)
    pulled = {line.strip() for line in r.stdout.splitlines() if not line.startswith(" ")}
    assert pulled, "apt-cache depends gave nothing"
    assert not [p for p in pulled if COMPILERS.match(p)], sorted(p for p in pulled if COMPILERS.match(p))


@pytest.mark.parametrize("role,args,expect", [
    (None, ["echo", "plain"], "plain"),                                  # no role: run as is
    ("worker", ["sh", "-c", "echo launched $FERRY_LOCAL_RANK"], "launched 0"),  # via ferry-launch
    ("worker", ["ferry-launch", "sh", "-c", "echo explicit $FERRY_LOCAL_SIZE"], "explicit 1"),
])
def test_entrypoint_hands_off_to_ferry_launch(tmp_path, role, args, expect):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ferry-launch").symlink_to(SCRIPTS / "ferry-launch")
    env = clean_env({"PATH": "%s:/usr/bin:/bin" % bindir, "DMLC_NUM_WORKER": "1", "DMLC_NUM_SERVER": "1",
                     "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "9000"})
    if role:
        env["DMLC_ROLE"] = role
    code, out = run([REPO / "docker" / "entrypoint.sh"] + args, timeout=30, env=env)
    assert code == 0 and out.strip() == expect, out
