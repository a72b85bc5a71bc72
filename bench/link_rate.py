#!/usr/bin/python3
"""link_rate: measures the rate of one TCP stream between two hosts of a netns-cluster,
to check that the links are shaped as asked (scripts/netns-cluster).

  link_rate.py measure --name NAME --from worker0 --to server0 [--seconds 2] [--port 5201]
      runs `serve` in the receiver's namespace and `send` in the sender's, prints JSON
      {"from", "to", "bytes", "seconds", "mbit_per_s"}
  link_rate.py serve --bind ADDR --port P [--timeout S]    receive one stream, print JSON
  link_rate.py send --to ADDR --port P --seconds S [--timeout S]

The receiver measures: bytes received after the first SKIP_S seconds (which include the
token bucket's initial burst) divided by the time from then to the last byte.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
NETNS_CLUSTER = os.path.join(ROOT, "scripts", "netns-cluster")
CHUNK = 1 << 20
SKIP_S = 0.25


def serve(bind, port, timeout):
    """Accepts one connection and reads it to its end; returns the measurement."""
    with socket.create_server((bind, port)) as server:
        server.settimeout(timeout)
        print("listening", flush=True)      # tells `measure` the sender may start
        conn, _ = server.accept()
        with conn:
            conn.settimeout(timeout)
            return receive(conn)


def receive(conn):
    first = skip_at = None
    total = counted = 0
    last = time.monotonic()
    while True:
        data = conn.recv(CHUNK)
        now = time.monotonic()
        if not data:
            break
        if first is None:
            first = now
        total += len(data)
        if now - first < SKIP_S:
            skip_at = now
        else:
            counted += len(data)
        last = now
    start = skip_at or first or last
    seconds = last - start
    return {"bytes": total, "seconds": round(seconds, 3),
            "mbit_per_s": round(counted * 8 / seconds / 1e6, 1) if seconds > 0 else 0.0}


def send(to, port, seconds, timeout):
    payload = b"\0" * CHUNK
    with socket.create_connection((to, port), timeout=timeout) as conn:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)
        conn.recv(1)     # the receiver's close: every byte was read


def address(name, host):
    out = subprocess.run([NETNS_CLUSTER, "hosts", "--name", name, "--json"], check=True,
                         stdout=subprocess.PIPE, text=True, timeout=30).stdout
    return json.loads(out)[host]["address"]


def measure(name, src, dst, seconds, port):
    """One stream from host `src` to host `dst`; the receiver's measurement plus names."""
    me = os.path.realpath(__file__)
    timeout = seconds + 30
    exec_in = [NETNS_CLUSTER, "exec", "--name", name]
    rx = subprocess.Popen(exec_in + [dst, "--", sys.executable, me, "serve", "--bind",
                          address(name, dst), "--port", str(port), "--timeout", str(timeout)],
                          stdout=subprocess.PIPE, text=True)
    try:
        if rx.stdout.readline().strip() != "listening":
            raise SystemExit("link_rate: the receiver in %s did not start" % dst)
        subprocess.run(exec_in + [src, "--", sys.executable, me, "send", "--to", address(name, dst),
                       "--port", str(port), "--seconds", str(seconds), "--timeout", str(timeout)],
                       check=True, timeout=timeout)
        result = json.loads(rx.communicate(timeout=timeout)[0])
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait()
    return dict({"from": src, "to": dst}, **result)


def main():
    p = argparse.ArgumentParser(description="rate of one TCP stream between netns-cluster hosts")
    sub = p.add_subparsers(dest="action", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--name", required=True)
    m.add_argument("--from", dest="src", required=True)
    m.add_argument("--to", dest="dst", required=True)
    m.add_argument("--seconds", type=float, default=2.0)
    m.add_argument("--port", type=int, default=5201)
    s = sub.add_parser("serve")
    s.add_argument("--bind", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--timeout", type=float, default=60)
    c = sub.add_parser("send")
    c.add_argument("--to", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--seconds", type=float, required=True)
    c.add_argument("--timeout", type=float, default=60)
    a = p.parse_args()
    if a.action == "measure":
        print(json.dumps(measure(a.name, a.src, a.dst, a.seconds, a.port)))
    elif a.action == "serve":
        print(json.dumps(serve(a.bind, a.port, a.timeout)), flush=True)
    else:
        send(a.to, a.port, a.seconds, a.timeout)


if __name__ == "__main__":
    main()
