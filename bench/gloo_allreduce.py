#!/usr/bin/python3
"""gloo allreduce reference benchmark for Ferry.

torch.distributed allreduce (gloo backend, CPU float32 tensors) between N local processes
(default 2), over loopback TCP only (rendezvous at tcp://127.0.0.1:<port>, gloo device bound to
the loopback interface). For each size from --min-bytes to --max-bytes (factor 2) it runs -w
warm-up and -n timed allreduces and prints

    bytes, time_us (median per allreduce), algbw_GBps (bytes / time, GB/s = 1e9 B/s)

Each timed allreduce starts after a barrier; its time is the slowest rank's, and the median is
taken over the iterations. Once per size the result is verified exactly (integer values held in
float32, so the sum is exact).

Run it with Debian's interpreter, which has torch:  /usr/bin/python3 bench/gloo_allreduce.py
Every wait is bounded: init_process_group and each collective have --timeout seconds, and the
parent kills the workers once --deadline seconds have passed. Exit status is non-zero on any
error, including a verification failure.
"""

import argparse
import datetime
import os
import queue
import socket
import statistics
import sys
import time
import traceback


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", "-p", type=int, default=2, help="number of processes (default 2)")
    p.add_argument("--min-bytes", type=int, default=4096, help="smallest tensor, bytes (default 4096)")
    p.add_argument("--max-bytes", type=int, default=268435456,
                   help="largest tensor, bytes (default 268435456 = 256 MiB)")
    p.add_argument("--factor", type=int, default=2, help="size step factor (default 2)")
    p.add_argument("--sizes", type=str, default="",
                   help="comma-separated byte sizes to run instead of the min/max/factor sweep")
    p.add_argument("-w", "--warmup", type=int, default=5, help="warm-up allreduces per size (default 5)")
    p.add_argument("-n", "--iters", type=int, default=20, help="timed allreduces per size (default 20)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads in each process (default 1)")
    p.add_argument("--format", choices=("text", "csv"), default="text")
    p.add_argument("--port", type=int, default=0, help="rendezvous port on 127.0.0.1 (default: a free one)")
    p.add_argument("--rank", type=int, default=None,
                   help="run only this rank, in this process (one host of an emulated cluster); "
                        "--nproc is the world size, --master the rendezvous, GLOO_SOCKET_IFNAME the "
                        "interface (default eth0); rank 0 prints the table")
    p.add_argument("--master", default="", help="ADDR:PORT of rank 0's rendezvous (with --rank)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds for init_process_group and for each collective (default 60)")
    p.add_argument("--deadline", type=float, default=1800.0,
                   help="seconds after which the whole run is killed (default 1800)")
    args = p.parse_args(argv)
    if args.nproc < 1:
        p.error("--nproc must be >= 1")
    if args.factor < 2:
        p.error("--factor must be >= 2")
    if args.iters < 1 or args.warmup < 0:
        p.error("-n must be >= 1 and -w >= 0")
    if args.threads < 1:
        p.error("--threads must be >= 1")
    if args.sizes:
        try:
            args.size_list = [int(s) for s in args.sizes.split(",") if s.strip()]
        except ValueError:
            p.error("--sizes must be comma-separated integers")
    else:
        if args.min_bytes < 4 or args.max_bytes < args.min_bytes:
            p.error("need 4 <= --min-bytes <= --max-bytes")
        args.size_list = []
        b = args.min_bytes
        while b <= args.max_bytes:
            args.size_list.append(b)
            b *= args.factor
    for b in args.size_list:
        if b < 4 or b % 4:
            p.error("sizes must be positive multiples of 4 bytes (float32): %d" % b)
    return args


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, init_method, results):
    """One rank. Puts ("row", ...) tuples (rank 0 only), then ("done", rank) or ("error", rank, text)."""
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(args.threads)
        timeout = datetime.timedelta(seconds=args.timeout)
        dist.init_process_group(backend="gloo", init_method=init_method,
                                rank=rank, world_size=args.nproc, timeout=timeout)
        world = args.nproc
        # Values (i % 1024) + rank sum exactly to world * (i % 1024) + world * (world - 1) / 2.
        offset = world * (world - 1) // 2
        for nbytes in args.size_list:
            numel = nbytes // 4
            # Verify once per size (exact: small integers held in float32).
            base = torch.arange(1024, dtype=torch.float32).repeat((numel + 1023) // 1024)[:numel]
            x = base + float(rank)
            dist.all_reduce(x)
            expect = base * float(world) + float(offset)
            ok = torch.tensor([1 if torch.equal(x, expect) else 0], dtype=torch.int32)
            dist.all_reduce(ok, op=dist.ReduceOp.MIN)
            if int(ok.item()) != 1:
                bad = int((x != expect).nonzero()[0].item()) if not torch.equal(x, expect) else -1
                raise RuntimeError("allreduce result wrong at %d bytes (rank %d, first bad element %d)"
                                   % (nbytes, rank, bad))
            del x, expect, base

            # Timed tensor: zeros stay zeros, so repeated in-place sums never overflow or go
            # denormal; the data volume and the work are the same as for any other values.
            t = torch.zeros(numel, dtype=torch.float32)
            for _ in range(args.warmup):
                dist.all_reduce(t)
            times = torch.zeros(args.iters, dtype=torch.float64)
            for i in range(args.iters):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(t)
                times[i] = time.perf_counter() - t0
            # Per iteration, the slowest rank's time.
            dist.all_reduce(times, op=dist.ReduceOp.MAX)
            if rank == 0:
                med = statistics.median(times.tolist())
                results.put(("row", nbytes, med * 1e6, nbytes / med / 1e9,
                             min(times.tolist()) * 1e6, max(times.tolist()) * 1e6))
            del t
        dist.barrier()
        dist.destroy_process_group()
        results.put(("done", rank))
    except BaseException:  # report everything, including KeyboardInterrupt, to the parent
        results.put(("error", rank, traceback.format_exc()))
        sys.exit(1)


class Printer:
    """Stands in for the result queue when one rank runs in this process."""

    def __init__(self, args):
        self.args, self.error = args, None

    def put(self, msg):
        if msg[0] == "row":
            _, nbytes, time_us, gbps, min_us, max_us = msg
            print("%d,%.2f,%.4f" % (nbytes, time_us, gbps) if self.args.format == "csv" else
                  "%12d %12.2f %11.4f %12.2f %12.2f" % (nbytes, time_us, gbps, min_us, max_us), flush=True)
        elif msg[0] == "error":
            self.error = msg[2]


def run_one_rank(args):
    if not args.master:
        print("gloo_allreduce: --rank needs --master ADDR:PORT", file=sys.stderr)
        return 2
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
    out = Printer(args)
    if args.rank == 0 and args.format == "csv":
        print("bytes,time_us,algbw_GBps", flush=True)
    try:
        worker(args.rank, args, "tcp://" + args.master, out)
    except SystemExit:
        pass
    if out.error:
        print("gloo_allreduce: rank %d failed:\n%s" % (args.rank, out.error), file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    args = parse_args(argv)
    if args.rank is not None:
        return run_one_rank(args)
    # Loopback only: gloo binds its pairs to this interface (the rendezvous is on 127.0.0.1).
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch.multiprocessing as mp

    port = args.port or free_port()
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args, "tcp://127.0.0.1:%d" % port, results), daemon=True)
             for r in range(args.nproc)]
    for pr in procs:
        pr.start()

    if args.format == "csv":
        print("bytes,time_us,algbw_GBps", flush=True)
    else:
        print("# gloo allreduce, %d processes, float32, torch.set_num_threads(%d), %d warm-up + %d timed"
              " per size; time = median over iterations of the slowest rank; GB/s = 1e9 B/s"
              % (args.nproc, args.threads, args.warmup, args.iters))
        print("%12s %12s %11s %12s %12s" % ("bytes", "time_us", "algbw_GBps", "min_us", "max_us"),
              flush=True)

    deadline = time.monotonic() + args.deadline
    done = set()
    rc = 0
    while len(done) < args.nproc:
        left = deadline - time.monotonic()
        if left <= 0:
            print("gloo_allreduce: deadline of %.0f s passed; killing the workers" % args.deadline,
                  file=sys.stderr)
            rc = 1
            break
        try:
            msg = results.get(timeout=min(left, 1.0))
        except queue.Empty:
            dead = [r for r, pr in enumerate(procs) if not pr.is_alive() and r not in done]
            if dead:
                # Give a dying worker's last message a moment to arrive before giving up.
                try:
                    msg = results.get(timeout=2.0)
                except queue.Empty:
                    print("gloo_allreduce: worker(s) %s exited without finishing (exit codes %s)"
                          % (dead, [procs[r].exitcode for r in dead]), file=sys.stderr)
                    rc = 1
                    break
            else:
                continue
        if msg[0] == "row":
            _, nbytes, time_us, gbps, min_us, max_us = msg
            if args.format == "csv":
                print("%d,%.2f,%.4f" % (nbytes, time_us, gbps), flush=True)
            else:
                print("%12d %12.2f %11.4f %12.2f %12.2f" % (nbytes, time_us, gbps, min_us, max_us),
                      flush=True)
        elif msg[0] == "done":
            done.add(msg[1])
        elif msg[0] == "error":
            print("gloo_allreduce: rank %d failed:\n%s" % (msg[1], msg[2]), file=sys.stderr)
            rc = 1
            break

    for pr in procs:
        pr.join(timeout=0 if rc else 10)
    for pr in procs:
        if pr.is_alive():
            pr.kill()
            pr.join(timeout=10)
        if rc == 0 and pr.exitcode != 0:
            print("gloo_allreduce: a worker exited with %s" % pr.exitcode, file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
