"""Broadcasts of a model's state (horovod.torch's functions.py): parameters, optimizer
state and picklable objects, through ferry.torch's broadcast (the core's LocalGroup
Broadcast)."""

import io
import pickle

import torch

from ferry.torch._broadcast_allgather import _allgather, _bucket, broadcast_, broadcast_async_
from ferry.torch._checks import _check_root
from ferry.torch._horovod import _check_process_set
from ferry.torch.ops import rank, synchronize


def broadcast_parameters(params, root_rank, process_set=None):
    """Makes every worker's parameters equal to root_rank's, in place.

    params: a dict (model.state_dict()) or a list of (name, tensor) pairs
    (model.named_parameters()). Call on every worker with the same names (with a
    process_set: on its members, root_rank a member)."""
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, (list, tuple)) or hasattr(params, "__iter__"):
        params = list(params)
    else:
        raise ValueError("broadcast_parameters: params must be a dict or a list of (name, tensor), "
                         "got %s" % type(params).__name__)
    handles = []
    with torch.no_grad():
        for item in params:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise ValueError("broadcast_parameters: expected (name, tensor) pairs, got %r" % (item,))
            name, p = item
            if p is None:
                continue
            if not isinstance(p, torch.Tensor):
                raise ValueError("broadcast_parameters: '%s' is a %s, not a tensor"
                                 % (name, type(p).__name__))
            handles.append(broadcast_async_(p.data, root_rank, "parameters." + name,
                                            process_set))
        for h in handles:
            synchronize(h)


def _bucket_bytes(n):
    return max(256, _bucket(n))


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """Returns root_rank's `obj` (pickled) on every worker. On the root, `obj` itself."""
    _check_process_set(process_set, "broadcast_object")
    _check_root(root_rank)
    tag = "object." + (name or "default")
    root = rank() == root_rank
    if root:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        length = torch.tensor([len(data)], dtype=torch.int64)
    else:
        length = torch.zeros(1, dtype=torch.int64)
    broadcast_(length, root_rank, tag + ".length")
    n = int(length.item())
    bucket = _bucket_bytes(n)  # a few sizes only: one core tensor per power of two
    buf = torch.zeros(bucket, dtype=torch.uint8)
    if root:
        buf[:n] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    words = buf.view(torch.int32)
    broadcast_(words, root_rank, "%s.data.%d" % (tag, bucket))
    if root:
        return obj
    return pickle.load(io.BytesIO(buf[:n].numpy().tobytes()))


def allgather_object(obj, name=None, process_set=None):
    """Every worker's `obj` (pickled), as a list in rank order (this worker's own included)."""
    _check_process_set(process_set)
    tag = "object." + (name or type(obj).__name__)
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    mine = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)
    gathered = _allgather(torch.cat([mine, torch.zeros(1, dtype=torch.uint8)]), tag)
    # Each worker's bytes, then one pad byte (so no worker sends an empty tensor).
    out, offset = [], 0
    sizes = _allgather(torch.tensor([len(data)], dtype=torch.int64), tag + ".lengths").tolist()
    for n in sizes:
        out.append(pickle.loads(gathered[offset:offset + n].numpy().tobytes()))
        offset += n + 1
    return out


class _TensorSpec(object):
    """A tensor's shape and dtype, sent in place of the tensor."""

    def __init__(self, tensor):
        self.shape = tuple(tensor.shape)
        self.dtype = tensor.dtype


def broadcast_optimizer_state(optimizer, root_rank):
    """Makes every worker's optimizer state (and hyper-parameters) equal to root_rank's.

    The structure and scalars travel as one pickled object, the state tensors by
    broadcast; non-root workers then load_state_dict() the result."""
    optimizer = getattr(optimizer, "_ferry_optimizer", optimizer)  # a CrossBarrier
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("broadcast_optimizer_state does not support LBFGS")
    root = rank() == root_rank
    tensors = []
    if root:
        state_dict = optimizer.state_dict()
        skeleton = {"param_groups": state_dict["param_groups"], "state": {}}
        for pid, pstate in state_dict["state"].items():
            entry = {}
            for key, value in pstate.items():
                if isinstance(value, torch.Tensor):
                    entry[key] = _TensorSpec(value)
                    tensors.append(((pid, key), value))
                else:
                    entry[key] = value
            skeleton["state"][pid] = entry
    else:
        skeleton = None
    skeleton = broadcast_object(skeleton, root_rank, "optimizer_state")
    if not root:
        state = {}
        for pid, pstate in skeleton["state"].items():
            entry = {}
            for key, value in pstate.items():
                if isinstance(value, _TensorSpec):
                    value = torch.zeros(value.shape, dtype=value.dtype)
                    tensors.append(((pid, key), value))
                entry[key] = value
            state[pid] = entry
    handles = [broadcast_async_(t, root_rank, "optimizer_state.%s.%s" % (pid, key))
               for (pid, key), t in tensors]
    for h in handles:
        synchronize(h)
    if not root:
        optimizer.load_state_dict({"state": state, "param_groups": skeleton["param_groups"]})
