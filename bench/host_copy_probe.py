#!/usr/bin/env python3
"""host_copy_probe: what bounds a GPU server's end-to-end summation on this machine.

GpuSummer (server/gpu/cuda_summer.cc) copies every push from pageable host memory into a
pinned staging block with one std::memcpy on the calling thread, then to the GPU. This
measures, on one machine, the rates that can bound it: a copy between pageable buffers
on 1 and on T threads (torch's CPU copy, parallel over its intra-op threads), and the
GPU's host-to-device copy from pinned and from pageable memory. Medians of
--repeats, bytes per second of bytes copied (1 GB = 1e9 bytes).

  bench/host_copy_probe.py --sizes 4M,64M --threads 1,4,8
"""

import argparse
import statistics
import time



def parse(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def median_rate(fn, nbytes, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return nbytes / statistics.median(times) / 1e9


def host_copy(nbytes, threads, repeats, pool_bytes):
    import torch
    torch.set_num_threads(threads)
    # Sources cycle through a pool larger than the last-level cache, as a server's
    # received frames do.
    count = max(2, pool_bytes // nbytes)
    srcs = [torch.randint(0, 255, (nbytes,), dtype=torch.uint8) for _ in range(count)]
    dst = torch.empty(nbytes, dtype=torch.uint8)
    state = {"i": 0}

    def one():
        dst.copy_(srcs[state["i"] % count])
        state["i"] += 1

    one()
    return median_rate(one, nbytes, repeats)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="4M,64M")
    p.add_argument("--threads", default="1,4,8")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--pool", default="1G", help="bytes of source buffers to cycle through")
    a = p.parse_args()
    pool = parse(a.pool)
    for size in [parse(s) for s in a.sizes.split(",")]:
        for t in [int(x) for x in a.threads.split(",")]:
            print(f"host copy {size >> 20} MiB, {t} thread(s): "
                  f"{host_copy(size, t, a.repeats, pool):.1f} GB/s", flush=True)
    import torch
    if not torch.cuda.is_available():
        print("no GPU: host-to-device copies skipped")
        return
    for size in [parse(s) for s in a.sizes.split(",")]:
        dev = torch.empty(size, dtype=torch.uint8, device="cuda")
        pinned = torch.empty(size, dtype=torch.uint8).pin_memory()
        pageable = torch.empty(size, dtype=torch.uint8)

        def h2d(src):
            dev.copy_(src, non_blocking=True)
            torch.cuda.synchronize()

        h2d(pinned)
        print(f"h2d {size >> 20} MiB from pinned: {median_rate(lambda: h2d(pinned), size, a.repeats):.1f} GB/s; "
              f"from pageable: {median_rate(lambda: h2d(pageable), size, a.repeats):.1f} GB/s",
              flush=True)


if __name__ == "__main__":
    main()
