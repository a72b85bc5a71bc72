"""DistributedOptimizer: push each gradient as soon as backward produced it.

As in horovod.torch / byteps.torch, DistributedOptimizer(optimizer, named_parameters)
returns an optimizer of the same class whose step() first waits for the averaged
gradients. A hook on every parameter's gradient accumulator starts the push_pull the
moment the gradient is final, so communication overlaps the rest of backward.

Priority: every gradient is declared to the core at construction, in named_parameters
order (the model's registration order, which is forward order). The core's priority is
-(declaration index), so gradients of the layers nearest the input, which the next
forward needs first, go first. (byteps.torch declares them sorted by name, which puts
"layer10" before "layer2" and the classifier before the stem.)

With FERRY_TRACE_DIR set, each layer's forward and backward compute goes to the trace
(compute_trace.py): what ferry-sim --workload TRACE_DIR replays.
"""

import os
import warnings
from contextlib import contextmanager

import torch

from ferry.torch.compression import Compression
from ferry.torch.compute_trace import ComputeTracer
from ferry.torch import _checks, _horovod, _push_pull, _runtime, ops


class _SparseContext(object):
    """A sparse gradient's push_pull: the dense sum's compression context and the handle of
    the mask of rows any worker touched."""
    __slots__ = ("ctx", "rows_handle")

    def __init__(self, ctx, rows_handle):
        self.ctx, self.rows_handle = ctx, rows_handle


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, original,
                 op=ops.Average, gradient_predivide_factor=1.0):
        super(self.__class__, self).__init__(params)
        self._average = _horovod._average(None, op)
        if gradient_predivide_factor != 1.0 and op != ops.Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        # Horovod's: each gradient is divided by the factor before the sum, and the sum
        # multiplied by it after (then averaged over size()).
        self._prescale = 1.0 / float(gradient_predivide_factor)
        self._postscale = float(gradient_predivide_factor)
        # Keep whatever state the wrapped optimizer already had (Horovod drops it).
        self.state = original.state
        compression = compression or Compression.none
        # A core compressor (compression.py) is the core's to run; another runs here.
        self._core_compression = getattr(compression, "core", None) or ""
        self._compression = Compression.none if self._core_compression else compression
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1, got %r" % (backward_passes_per_step,))
        self.backward_passes_per_step = int(backward_passes_per_step)

        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [("param.%d" % i, p) for i, p in enumerate(all_params)]
        if any(not isinstance(item, tuple) or len(item) != 2 for item in named_parameters):
            raise ValueError("named_parameters should be a sequence of (name, parameter) tuples, "
                             "usually model.named_parameters()")
        names = [k for k, _ in named_parameters]
        dups = sorted({k for k in names if names.count(k) > 1})
        if dups:
            raise ValueError("parameter names in named_parameters must be unique; duplicates: %s"
                             % ", ".join(dups))
        optimizer_ids = {id(p) for p in all_params}
        # Only the parameters this optimizer updates, in the given (forward) order.
        ordered = [(k, p) for k, p in named_parameters if id(p) in optimizer_ids]
        named_ids = {id(p) for _, p in ordered}
        unnamed = [p for p in all_params if id(p) not in named_ids]
        if unnamed:
            raise ValueError("named_parameters was given, but %d parameter(s) of the optimizer are "
                             "not named in it (shapes %s)"
                             % (len(unnamed), [tuple(p.shape) for p in unnamed[:5]]))
        self._parameter_names = {}
        for k, p in ordered:
            self._parameter_names.setdefault(p, k)  # a tied parameter keeps its first name
        self._ordered_params = list(self._parameter_names)
        self._push_pull_delay = {p: self.backward_passes_per_step for p in self._ordered_params}
        self._sparse_dims = {}  # parameter -> sparse_dim of its sparse gradients, once seen
        self._handles = {}
        _runtime._optimizers.add(self)  # elastic: reset() calls _reset_pending
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        ops._core.require_initialized()  # the core's FerryError unless initialised
        # Declare every gradient now, in forward order: the declaration index is the
        # tensor id and -(id) its default priority (nearest the input = most urgent).
        for p in self._ordered_params:
            if p.requires_grad:
                self._declare_gradient(p)
        self._register_hooks()
        # With FERRY_TRACE_DIR: per-layer compute spans in the trace (compute_trace.py).
        self._compute_tracer = None
        if os.environ.get("FERRY_TRACE_DIR"):
            self._compute_tracer = ComputeTracer(
                {p: self._gradient_name(p) for p in self._requires_update})

    def _gradient_name(self, p):
        return "Gradient." + self._parameter_names[p]

    def _declare_gradient(self, p):
        _checks._check_tensor(p, "parameter '%s'" % self._parameter_names[p])
        dtype = p.dtype
        if self._compression is Compression.fp16 and dtype.is_floating_point:  # Python-side
            dtype = torch.float16
        code = _checks._DTYPES.get(dtype)
        if code is None:
            raise TypeError("ferry.torch: parameter '%s' has dtype %s; gradients must be float32, "
                            "float16, bfloat16, float64, int32 or int64"
                            % (self._parameter_names[p], p.dtype))
        # In a process set: declared there (on its members), so the global set's placement
        # stays the same on every worker.
        name = _horovod._set_name(self._ferry_process_set, self._gradient_name(p), code, p.shape)
        _checks._declare(name, code, p.shape, self._core_compression)

    def _register_hooks(self):
        for p in self._ordered_params:
            if not p.requires_grad:
                continue
            # p.grad stays None until backward makes it (dense or sparse), as in Horovod.
            self._requires_update.add(p)
            p_tmp = p.expand_as(p)
            grad_acc = p_tmp.grad_fn.next_functions[0][0]
            grad_acc.register_hook(self._make_hook(p))
            self._grad_accs.append(grad_acc)

    def _push_pull_grad_async(self, p):
        if p.grad is None:  # unused in this backward, or set to None by zero_grad
            p.grad = self._zero_grad(p)
        if not p.grad.is_sparse:
            return self._push_pull_dense(p, p.grad)
        # A sparse gradient (nn.Embedding(sparse=True)) travels dense, beside a mask of the
        # rows any worker touched; _finish makes the sum sparse again over exactly those
        # rows (the entries of Horovod's sparse path, summed), so SparseAdam gets sparse
        # gradients whatever sparse_as_dense says.
        grad = p.grad.coalesce()
        sparse_dim = grad.sparse_dim()
        self._sparse_dims[p] = sparse_dim
        rows = torch.zeros(p.shape[:sparse_dim], dtype=torch.float32, device=p.device)
        rows[tuple(grad.indices())] = 1.0
        rows_handle = _push_pull._push_pull_async(rows, rows, False,
                                                  self._gradient_name(p) + ".rows", None,
                                                  compression="none")  # the mask stays exact
        handle, ctx = self._push_pull_dense(p, grad.to_dense())
        return handle, _SparseContext(ctx, rows_handle)

    def _zero_grad(self, p):
        sparse_dim = self._sparse_dims.get(p)
        if sparse_dim is None:
            return torch.zeros_like(p.data)
        return torch.sparse_coo_tensor(
            torch.empty((sparse_dim, 0), dtype=torch.int64, device=p.device),
            torch.empty((0,) + tuple(p.shape[sparse_dim:]), dtype=p.dtype, device=p.device),
            p.shape)

    def _push_pull_dense(self, p, grad):
        compressed, ctx = self._compression.compress(grad)
        _checks._check_tensor(compressed, "gradient '%s'" % self._gradient_name(p))
        handle = _push_pull._push_pull_async(compressed, compressed, self._average,
                                             self._gradient_name(p), None, self._prescale,
                                             self._postscale,
                                             compression=self._core_compression,
                                             process_set=self._ferry_process_set)
        return handle, ctx

    def _make_hook(self, p):
        def hook(*ignore):
            if self._compute_tracer is not None:
                self._compute_tracer.gradient_ready(self._gradient_name(p))
            if p in self._handles and self._handles[p][0] is not None:
                if self._push_pull_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times before "
                        "call to step(). Increase backward_passes_per_step to accumulate "
                        "gradients locally.")
            assert not p.grad.requires_grad
            assert self._push_pull_delay[p] > 0
            handle, ctx = None, None
            self._push_pull_delay[p] -= 1
            if self._push_pull_delay[p] == 0:
                handle, ctx = self._push_pull_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def _start_missing(self):
        """Starts the push_pulls backward did not (unused parameters, accumulation
        steps not yet complete), so every worker pushes every gradient, in forward order."""
        for p in self._ordered_params:
            if p not in self._requires_update:
                continue
            handle = self._handles.get(p, (None, None))[0]
            if handle is None:
                self._handles[p] = self._push_pull_grad_async(p)

    def _finish(self, p, handle, ctx):
        output = ops.synchronize(handle)
        self._push_pull_delay[p] = self.backward_passes_per_step
        if isinstance(ctx, _SparseContext):
            dense = self._compression.decompress(output, ctx.ctx)
            rows = ops.synchronize(ctx.rows_handle).nonzero().t()
            p.grad = torch.sparse_coo_tensor(rows, dense[tuple(rows)], p.shape).coalesce()
        elif output is not p.grad:
            p.grad.copy_(self._compression.decompress(output, ctx))

    def synchronize(self):
        """Waits for every gradient's push_pull; p.grad then holds the average."""
        self._start_missing()
        try:
            for p in self._ordered_params:
                if p in self._handles:
                    handle, ctx = self._handles[p]
                    self._finish(p, handle, ctx)
        except BaseException:
            self._reset_pending()  # elastic training goes on after a membership change
            raise
        finally:
            self._handles.clear()
        self._synchronized = True

    def left_out(self):
        """Backup workers: whether the last step's sums left this worker out for every
        gradient (its pushes came late): the signal to sit_out() the next step. Only a worker
        left out of every sum sits out, so at most FERRY_BACKUP_WORKERS workers sit a round
        out and some worker always contributes to it."""
        rank = ops.rank()
        return all(rank not in ops.contributors(self._gradient_name(p))
                   for p in self._ordered_params if p in self._requires_update)

    def sit_out(self):
        """Backup workers (FERRY_BACKUP_WORKERS; docs/stragglers.md): instead of this step's
        forward and backward, take the step's averaged gradients without contributing to
        them (the servers do not wait for this worker); then call step() as usual. For a
        worker whose last step's gradients all came late (left_out()): it skips a step whose
        gradient would be dropped anyway and catches up, while applying the same update as
        every worker."""
        if self._handles:
            raise AssertionError("sit_out() after backward(): call it instead of backward()")
        if self._prescale != 1.0 or not self._average or self._core_compression or \
                self._compression is not Compression.none or self._ferry_process_set is not None:
            raise ValueError("sit_out() needs plain averaged gradients: no compression, "
                             "gradient_predivide_factor, op other than Average, or process set")
        for p in self._ordered_params:
            if p not in self._requires_update:
                continue
            if p.grad is None or p.grad.is_sparse:
                p.grad = torch.zeros_like(p.data)
            self._handles[p] = (_push_pull._pull_average_async(p.grad, self._gradient_name(p)),
                                None)

    def _reset_pending(self):
        """Forgets the push_pulls of a step that failed (ferry.torch.elastic: after a
        membership change the step starts over from the restored state)."""
        self._handles.clear()
        for p in self._push_pull_delay:
            self._push_pull_delay[p] = self.backward_passes_per_step
        self._synchronized = False

    @contextmanager
    def skip_synchronize(self):
        """A context in which step() does not synchronize: for clipping gradients after an
        explicit optimizer.synchronize() (as in Horovod)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        result = super(self.__class__, self).step(closure)
        # The iteration's end: every gradient is in (FERRY_AUTOTUNE may switch here).
        ops.step_boundary()
        if self._compute_tracer is not None:
            self._compute_tracer.step()
        return result

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def _check_groups(groups, num_groups):
    """Horovod's `groups` / `num_groups` checks. Ferry fuses small tensors by its own
    scheduling policy, so a valid grouping changes nothing about the result or the order."""
    if num_groups:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed "
                      "in v0.23.0.", DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is None:
        return
    if isinstance(groups, int):
        if groups < 0:
            raise ValueError("groups should be a non-negative integer or a list of list of "
                             "torch.Tensor.")
        return
    if not isinstance(groups, (list, tuple)) or not all(isinstance(g, (list, tuple)) for g in groups):
        raise ValueError("groups should be a non-negative integer or a list of list of torch.Tensor.")
    seen = set()
    for group in groups:
        for t in group:
            if not isinstance(t, torch.Tensor):
                raise ValueError("groups must consist of torch.Tensor.")
            if id(t) in seen:
                raise ValueError("A parameter can only appear once in groups.")
            seen.add(id(t))


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=ops.Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None):
    """Wraps a torch optimizer so that step() uses gradients averaged over all workers.

    optimizer: any torch.optim.Optimizer. named_parameters: model.named_parameters()
    (forward order decides the push priority; without it parameters are named
    param.<index> in the optimizer's order). compression: Compression.none (the default:
    FERRY_COMPRESSION decides), fp16, bf16, onebit, topk(r), randomk(r), dither(s) or
    custom(text) (docs/compression.md). backward_passes_per_step: local gradient accumulation steps
    before each push. Call ferry.torch.init() first, and create the optimizer in the
    same order on every worker.

    Horovod's options: op=Average (default) or Sum (Adasum, Min, Max, Product raise
    NotImplementedError); gradient_predivide_factor=f divides each gradient by f before the
    sum and multiplies the sum by f (op=Average only); groups / num_groups are checked as
    Horovod checks them and otherwise change nothing (Ferry fuses small tensors itself);
    sparse gradients always travel dense and come back sparse, over the rows any worker
    touched (with sparse_as_dense False or True; the values equal those of Horovod's sparse
    path), so torch.optim.SparseAdam trains; process_set: the gradients are averaged over its
    members only (registered with add_process_set; dense gradients).

    The result is an instance of the optimizer's own class with synchronize() and
    skip_synchronize() added (as horovod.torch / byteps.torch)."""
    _check_groups(groups, num_groups)
    base = optimizer.__class__
    if getattr(base, "_ferry_distributed", False):
        raise ValueError("the optimizer is already a ferry.torch.DistributedOptimizer")
    members = {k: v for k, v in _DistributedOptimizer.__dict__.items()
               if k not in ("__dict__", "__weakref__")}
    members["_ferry_distributed"] = True
    members["_ferry_base_class"] = base
    members["_ferry_process_set"] = None if _horovod._is_global(process_set) else process_set
    cls = type(base.__name__, (base,), members)
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               optimizer, op, gradient_predivide_factor)
