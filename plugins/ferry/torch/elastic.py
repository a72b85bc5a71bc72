"""ferry.torch.elastic: Horovod Elastic's API on Ferry's elastic training (FERRY_ELASTIC=1).

    import ferry.torch as hvd

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch, (x, y) in enumerate(loader):   # loader over an ElasticSampler
                ...forward, backward, optimizer.step()...
                state.sampler.record_batch(state.batch, batch_size)
                if state.batch % 10 == 0:
                    state.commit()
            state.batch = 0

    hvd.init()
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
    train(state)

When a server or worker dies, the operation each worker is in raises
MembershipChangedError (a FerryError, so Horovod's HorovodInternalError). `run` then, on
every worker: restores the last commit (state.restore()), takes the new membership
(ferry.torch.reset(): rank() and size() may change), runs the reset callbacks, takes rank
0's state (state.sync()) and calls the function again. No worker keeps a sum the others did
not apply: whatever was applied after the last commit is rolled back everywhere, and rank
0's committed state is everyone's (docs/reliability.md, "Elastic training").

New workers (a worker process started with the job's environment while it runs, up to
FERRY_MAX_WORKERS) join at the next commit: every worker's commit() raises
HostsUpdatedInterrupt, `run` admits them (reset()) and every worker takes rank 0's state; a
joining worker's own run() starts with that sync. Any other FerryError (the job failed for
good) propagates.
"""

import copy
import functools
import math
import os
import random
import sys
import time

import torch

from ferry.torch import ops
from ferry.torch.functions import (broadcast_object, broadcast_optimizer_state,
                                   broadcast_parameters)

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HostsUpdatedInterrupt"]


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's: workers wait to join (raised at a commit, on every worker; no rollback:
    the state was just committed). `run` then admits them (reset()) and every worker,
    the new ones included, takes rank 0's state."""

    def __init__(self, skip_sync=False):
        super().__init__("the job's workers were updated")
        self.skip_sync = skip_sync


class State(object):
    """What a worker commits, restores and takes from rank 0 (Horovod's State)."""

    def __init__(self):
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """`callbacks` run after each membership change, once the new membership is in
        (rank() and size() are the new ones): e.g. to scale the learning rate by size()."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state: the point every worker rolls back to after a failure. Commits
        cost a copy of the state; commit every few batches."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt when workers wait to join: every worker learns it at
        the same commit (a one-element push_pull), so all raise it together."""
        if ops._core.hosts_updated():
            raise HostsUpdatedInterrupt(skip_sync=False)

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        pass


class ObjectState(State):
    """Plain attributes (epoch=0, batch=0, ...): committed by copy, synced from rank 0 as
    one pickled object."""

    def __init__(self, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__()

    def save(self):
        self._saved_state = {k: copy.deepcopy(getattr(self, k)) for k in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = broadcast_object(self._saved_state, root_rank=0,
                                                 name="ferry.elastic.object_state")
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, copy.deepcopy(value))


class _StateDictHandler(object):
    """Commits and restores one object's state_dict(); a subclass's sync() makes it rank 0's."""

    def __init__(self, obj):
        self.obj = obj
        self.save()

    def save(self):
        self._saved = copy.deepcopy(self.obj.state_dict())

    def restore(self):
        self.obj.load_state_dict(self._saved)


class _ModelHandler(_StateDictHandler):
    def sync(self):
        broadcast_parameters(self.obj.state_dict(), root_rank=0)


class _OptimizerHandler(_StateDictHandler):
    def restore(self):
        super().restore()
        self.reset()

    def sync(self):
        broadcast_optimizer_state(self.obj, root_rank=0)

    def reset(self):
        # A DistributedOptimizer forgets the push_pulls of the step that failed.
        if hasattr(self.obj, "_reset_pending"):
            self.obj._reset_pending()


class _SamplerHandler(_StateDictHandler):
    def sync(self):
        self.obj.load_state_dict(broadcast_object(self.obj.state_dict(), root_rank=0,
                                                  name="ferry.elastic.sampler"))


class TorchState(ObjectState):
    """Horovod's TorchState(model, optimizer, **kwargs): the model's and the optimizer's
    state dicts, every ElasticSampler among `kwargs`, and the other `kwargs` as plain
    attributes (state.epoch, state.batch, ...). Construction commits the state as it is."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        self._handlers = []
        if model is not None:
            self._handlers.append(_ModelHandler(model))
        if optimizer is not None:
            self._handlers.append(_OptimizerHandler(optimizer))
        plain = {}
        for name, value in kwargs.items():
            if isinstance(value, ElasticSampler):
                setattr(self, name, value)
                self._handlers.append(_SamplerHandler(value))
            else:
                plain[name] = value
        super().__init__(**plain)

    def save(self):
        self._each("save")
        super().save()

    def restore(self):
        self._each("restore")
        super().restore()

    def sync(self):
        self._each("sync")
        super().sync()

    def _each(self, method):
        for handler in self._handlers:
            getattr(handler, method)()

    def reset(self):
        for handler in self._handlers:
            if hasattr(handler, "reset"):
                handler.reset()
        for handler in self._handlers:
            if isinstance(handler, _SamplerHandler):
                handler.obj.reset()  # the new rank() and size() split the data


def _log(message):
    sys.stderr.write("ferry.torch.elastic: %s\n" % message)
    sys.stderr.flush()


def run(func):
    """Horovod's elastic.run: `func(state, ...)` runs until it returns; after a membership
    change every worker restores its last commit, takes the new membership, runs the reset
    callbacks, takes rank 0's state and calls `func` again (see the module comment).
    Every wrapper call records state.membership_changes (count) and, for each change,
    the monotonic times of the failure and of the end of the recovery
    (state.recoveries: [(failed_at, recovered_at), ...])."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if os.environ.get("FERRY_ELASTIC", "0").lower() not in ("1", "true", "yes", "on"):
            _log("FERRY_ELASTIC is not set: this job is not elastic, and a dead node ends it "
                 "(set FERRY_ELASTIC=1 on every node)")
        if not hasattr(state, "recoveries"):
            state.recoveries = []
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except ops.MembershipChangedError as e:
                failed_at = time.monotonic()
                _log("membership changed; restoring the last commit (%s)" % e)
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                failed_at = time.monotonic()
                skip_sync = e.skip_sync
            ops.reset()
            state.on_reset()
            state.recoveries.append((failed_at, time.monotonic()))
            _log("reset: rank %d of %d" % (ops.rank(), ops.size()))

    return wrapper


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler: splits `dataset` over the workers like a
    DistributedSampler, and after a membership change splits what is left of the epoch
    over the new workers, so no sample of the epoch is processed twice or skipped by the
    committed state. Call record_batch(batch_idx, batch_size) after each batch and
    set_epoch(epoch) at each epoch; TorchState(sampler=...) commits and syncs it."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0  # samples of this epoch processed by all workers together
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """A batch of `batch_size` samples per worker is done (on every worker)."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        self.num_replicas = ops.size()
        self.rank = ops.rank()
        indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(indices)
        self.remaining_indices = indices[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / float(self.num_replicas)))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = list(self.remaining_indices)
        indices += indices[:(self.total_size - len(indices))]  # evenly divisible
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples
