"""Network namespaces on a bridge that lives in a namespace of its own: the plumbing
shared by scripts/compose-local and scripts/netns-cluster.

The root network namespace is never touched: the bridge and both ends of every veth
pair are created inside the bridge's namespace, and one end then moves into the host's
namespace, where it becomes eth0. Nothing routes out of the bridge's namespace, so no
packet sent between these hosts can leave them.

Every command runs with a deadline (COMMAND_TIMEOUT_S); a failure raises NetnsError
naming the command and what it printed.
"""

import os
import re
import shutil
import signal
import subprocess

COMMAND_TIMEOUT_S = 30
# HTB's burst: what a link may send at once after an idle spell. tc's default (one
# timer tick's worth, 1375 bytes at 1gbit) is smaller than one GSO packet, and the link
# then delivers 85-90% of its rate; 4 ms of the rate (at least a 64 KiB GSO packet)
# delivers 99.5% while a burst stays a few ms of traffic.
BURST_S = 0.004
MIN_BURST_BYTES = 65536
RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)([kmgt]?)bit$")
BRIDGE = "br0"
HOST_DEVICE = "eth0"


class NetnsError(Exception):
    """A namespace, link or qdisc could not be made."""


def run_quiet(argv, timeout=COMMAND_TIMEOUT_S):
    """Runs argv; returns its output; raises NetnsError if it fails or outlives `timeout`."""
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise NetnsError("'%s' did not finish within %d s" % (" ".join(argv), timeout))
    except FileNotFoundError:
        raise NetnsError("'%s' not found" % argv[0])
    if r.returncode != 0:
        raise NetnsError("'%s' failed: %s" % (" ".join(argv), r.stdout.strip()))
    return r.stdout


CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21


def effective_capabilities():
    """This process's effective capability bits (/proc/self/status), or None if unknown."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return None


def unavailable_reason():
    """Why network namespaces cannot be made here, or None if they can."""
    if os.geteuid() != 0:
        return "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    caps = effective_capabilities()
    if caps is not None and (caps >> CAP_SYS_ADMIN & 1 == 0 or caps >> CAP_NET_ADMIN & 1 == 0):
        return "root without CAP_SYS_ADMIN and CAP_NET_ADMIN (an unprivileged container?)"
    if not shutil.which("ip"):
        return "no 'ip' command (Debian's iproute2)"
    try:
        run_quiet(["ip", "netns", "list"])
    except NetnsError as e:
        return "'ip netns' does not work: %s" % e
    return None


def list_namespaces():
    """Names of every network namespace `ip netns` knows."""
    out = run_quiet(["ip", "netns", "list"])
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def add_namespace(ns):
    """A new namespace with its loopback up."""
    run_quiet(["ip", "netns", "add", ns])
    run_quiet(["ip", "-n", ns, "link", "set", "lo", "up"])


def add_bridge(ns):
    """The bridge BRIDGE, up, inside namespace `ns` (which must exist)."""
    run_quiet(["ip", "-n", ns, "link", "add", BRIDGE, "type", "bridge"])
    run_quiet(["ip", "-n", ns, "link", "set", BRIDGE, "up"])


def attach(bridge_ns, ns, port, address):
    """Joins namespace `ns` to the bridge: a veth pair whose end `port` (at most 13
    characters) is a bridge port in `bridge_ns` and whose other end is HOST_DEVICE in
    `ns`, with `address` ("a.b.c.d/len")."""
    peer = "x-" + port
    run_quiet(["ip", "-n", bridge_ns, "link", "add", port, "type", "veth", "peer", "name", peer])
    run_quiet(["ip", "-n", bridge_ns, "link", "set", peer, "netns", ns])
    run_quiet(["ip", "-n", ns, "link", "set", peer, "name", HOST_DEVICE])
    run_quiet(["ip", "-n", ns, "addr", "add", address, "dev", HOST_DEVICE])
    run_quiet(["ip", "-n", ns, "link", "set", HOST_DEVICE, "up"])
    run_quiet(["ip", "-n", bridge_ns, "link", "set", port, "master", BRIDGE])
    run_quiet(["ip", "-n", bridge_ns, "link", "set", port, "up"])


def rate_bits(text):
    """Bits per second of a rate in tc's syntax ('200mbit', '1gbit' -> 1e9). Raises
    ValueError for anything else (tc's 'bps' means bytes per second: not accepted here)."""
    m = RATE_RE.match(text)
    if not m:
        raise ValueError("'%s' is not a rate: expected e.g. 200mbit, 1gbit or 2.5gbit" % text)
    bits = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
    if bits < 8000:
        raise ValueError("rate '%s' is below 8kbit" % text)
    return bits


def shape(ns, device, rate):
    """Limits what `device` in `ns` sends to `rate` (tc syntax: 1gbit, 200mbit) with one
    HTB class, which lets large (GSO) packets through at the exact average rate."""
    run_quiet(["tc", "-n", ns, "qdisc", "replace", "dev", device, "root", "handle", "1:",
               "htb", "default", "1"])
    reshape(ns, device, rate)


def reshape(ns, device, rate):
    """Sets the rate of a link shape() shaped (its HTB class), in place: traffic flows on."""
    burst = str(max(MIN_BURST_BYTES, int(rate_bits(rate) / 8 * BURST_S)))
    run_quiet(["tc", "-n", ns, "class", "replace", "dev", device, "parent", "1:", "classid", "1:1",
               "htb", "rate", rate, "ceil", rate, "burst", burst, "cburst", burst, "quantum", "60000"])


def address_of(ns, device=HOST_DEVICE):
    """The IPv4 address of `device` in `ns` ("a.b.c.d"), or None."""
    try:
        out = run_quiet(["ip", "-n", ns, "-4", "-o", "addr", "show", "dev", device])
    except NetnsError:
        return None
    m = re.search(r"\binet (\d+\.\d+\.\d+\.\d+)/", out)
    return m.group(1) if m else None


def kill_processes(ns):
    """SIGKILL to every process still running in `ns` (a namespace of ours: only what our
    own runs started lives there)."""
    r = subprocess.run(["ip", "netns", "pids", ns], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True, timeout=COMMAND_TIMEOUT_S)
    for pid in r.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def delete_namespace(ns):
    """Ends the processes in `ns` and deletes it (its veth ends go with it). Never fails:
    clean-up must go on with the next namespace."""
    try:
        kill_processes(ns)
    except subprocess.TimeoutExpired:
        pass
    try:
        subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pass
