#!/usr/bin/python3
"""broadcast_parameters of a ResNet-18 state_dict (122 tensors, 46.8 MB), 5 times; rank 0
prints the median. Run on a local cluster:
    PYTHONPATH=build/python scripts/local-cluster -s 2 -w 2 -- /usr/bin/python3 bench/broadcast_parameters_bench.py
"""
import time

import torchvision

import ferry.torch as hvd
hvd.init()
m = torchvision.models.resnet18()
sd = m.state_dict()
ts = []
for i in range(5):
    hvd.barrier(); t = time.time(); hvd.broadcast_parameters(sd, root_rank=0); ts.append(time.time() - t)
if hvd.rank() == 0:
    print("broadcast_parameters resnet18: %d tensors, %.1f MB, median %.1f ms (min %.1f, max %.1f)" % (
        len(sd), sum(v.numel() * v.element_size() for v in sd.values()) / 1e6,
        sorted(ts)[2] * 1e3, min(ts) * 1e3, max(ts) * 1e3), flush=True)
