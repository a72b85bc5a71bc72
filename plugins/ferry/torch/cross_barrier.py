"""CrossBarrier: per-layer gating instead of a global barrier between iterations.

With a plain DistributedOptimizer, step() waits for every gradient's sum before it
updates anything, and the next forward waits for step(): a global barrier. With

    optimizer = ferry.torch.DistributedOptimizer(optimizer, model.named_parameters())
    optimizer = ferry.torch.CrossBarrier(model, optimizer)

step() returns at once. Each parameter is updated on its own, as soon as its own sum
is here: a forward pre-hook on every module waits only for that module's parameters
(and applies, on the way, every other update whose sum has already arrived), so layer
l of the next iteration starts while later layers still synchronise
(BytePS's cross-barrier, ByteScheduler's per-layer gating).

The update of one parameter runs the wrapped optimizer's own algorithm on that
parameter alone (a one-parameter instance of the same class sharing the optimizer's
state and hyper-parameters), so the result equals the plain optimizer's for every
optimizer whose update is per parameter (SGD, momentum, Adam, AdamW, RMSprop, ...);
optimizers that couple parameters (LBFGS) are refused.

Requirements: forward goes through `model`, and every parameter is used in the forward
of a module that owns it (a parameter used elsewhere could be read before its update:
detected, and reported as an error in backward rather than training on a stale weight). Read parameters
outside forward (evaluation by hand, saving) after synchronize(), which applies every
pending update; state_dict() does that itself.
"""

import torch

from ferry.torch import ops
from ferry.torch.compression import Compression
from ferry.torch.optimizer import DistributedOptimizer


class CrossBarrier(object):
    """Wraps a DistributedOptimizer (or a plain optimizer, which is wrapped first) so that
    iterations overlap: see the module documentation."""

    def __init__(self, model, optimizer, named_parameters=None, compression=Compression.none,
                 backward_passes_per_step=1, num_steps=None):
        # BytePS's num_steps: the training's last step; after it every pending update is
        # applied at once (the parameters are final without a synchronize()).
        if num_steps is not None and (not isinstance(num_steps, int) or num_steps < 1):
            raise ValueError("CrossBarrier: num_steps must be a positive int, got %r" % (num_steps,))
        self._num_steps = num_steps
        self._steps = 0
        if not getattr(optimizer.__class__, "_ferry_distributed", False):
            if named_parameters is None:
                named_parameters = model.named_parameters()
            optimizer = DistributedOptimizer(optimizer, named_parameters, compression,
                                             backward_passes_per_step)
        if isinstance(optimizer, torch.optim.LBFGS):
            raise ValueError("CrossBarrier cannot update parameters one by one with LBFGS")
        self._ferry_optimizer = optimizer
        self._model = model
        self._pending = {}       # parameter -> (handle, ctx): sum requested, update not applied
        self._zero_after = {}    # parameter -> set_to_none: zero_grad deferred past the update
        self._group_of = {}      # parameter -> its param group in the optimizer
        self._single = {}        # parameter -> one-parameter optimizer of the base class
        base = optimizer._ferry_base_class
        for group in optimizer.param_groups:
            for p in group["params"]:
                self._group_of[p] = group
                options = {k: v for k, v in group.items() if k != "params"}
                self._single[p] = base([dict(options, params=[p])])
        self._hooks = []
        self._pending_at_forward = set()  # pending when the last forward through `model` began
        self._gated = set()               # parameters whose module's pre-hook ran since then
        self._hooks.append(model.register_forward_pre_hook(self._begin_forward))
        tracked = set(self._group_of)
        for module in model.modules():
            own = [p for p in module.parameters(recurse=False) if p in tracked]
            if own:
                self._hooks.append(module.register_forward_pre_hook(self._make_pre_hook(own)))
        # A parameter still waiting for its update when backward reaches it was read
        # stale by forward: refuse loudly instead of training on it.
        for p in tracked:
            if p.requires_grad:
                self._hooks.append(p.register_hook(self._make_grad_check(p)))

    # ------------------------------------------------------------------ the gating

    def _begin_forward(self, module, inputs):
        self._pending_at_forward = set(self._pending)
        self._gated = set()

    def _make_pre_hook(self, own):
        def pre_hook(module, inputs):
            self._gated.update(own)
            if not self._pending:
                return
            for p in own:
                if p in self._pending:
                    self._apply(p)
            self._apply_arrived()
        return pre_hook

    def _make_grad_check(self, p):
        def check(grad):
            # Pending when forward began, yet its module's forward never ran: it was read
            # somewhere else, perhaps before its update (which may have come later).
            if p in self._pending or (p in self._pending_at_forward and p not in self._gated):
                name = self._ferry_optimizer._parameter_names.get(p, "?")
                raise RuntimeError(
                    "ferry.torch.CrossBarrier: parameter '%s' was used in forward before its "
                    "update was applied; it is used outside the forward of the module that "
                    "owns it, which CrossBarrier cannot gate. Use DistributedOptimizer alone, "
                    "or call optimizer.synchronize() before forward." % name)
            return grad
        return check

    def _apply_arrived(self):
        # Every update whose sum has arrived, asking the core (one call per update, none
        # waits): the sums come roughly in priority (forward) order.
        by_handle = {handle: p for p, (handle, _) in self._pending.items()}
        while by_handle:
            done = ops.wait_any(list(by_handle), 0)
            if done is None:
                return
            self._apply(by_handle.pop(done))

    def _apply(self, p):
        handle, ctx = self._pending.pop(p)
        opt = self._ferry_optimizer
        opt._finish(p, handle, ctx)
        single = self._single[p]
        single.state = opt.state  # shared, and follows load_state_dict()
        group = single.param_groups[0]
        for k, v in self._group_of[p].items():  # follows LR schedulers
            if k != "params":
                group[k] = v
        single.step()
        if p in self._zero_after:
            self._zero(p, self._zero_after.pop(p))

    @staticmethod
    def _zero(p, set_to_none):
        if p.grad is None:
            return
        if set_to_none:
            p.grad = None
        else:
            if p.grad.grad_fn is not None:
                p.grad.detach_()
            else:
                p.grad.requires_grad_(False)
            p.grad.zero_()

    # ------------------------------------------------------------------ optimizer API

    def step(self, closure=None):
        """Starts the push_pulls backward did not and returns without waiting: each
        parameter is updated when its own sum arrives, at the latest right before the
        forward of its module."""
        if closure is not None:
            raise ValueError("CrossBarrier.step() does not take a closure")
        opt = self._ferry_optimizer
        # Updates no forward waited for (parameters unused in the last forward).
        self.synchronize()
        opt._start_missing()
        # Forward order: the order the next forward needs the parameters in.
        self._pending = {p: opt._handles[p] for p in opt._ordered_params if p in opt._handles}
        opt._handles.clear()
        # The iteration's end. This iteration's sums are still on their way; the core
        # waits for them only at the iterations where FERRY_AUTOTUNE switches.
        ops.step_boundary()
        if opt._compute_tracer is not None:
            opt._compute_tracer.step()
        self._steps += 1
        if self._num_steps is not None and self._steps >= self._num_steps:
            self.synchronize()
        return None

    def synchronize(self):
        """Applies every pending update (waits for the sums): parameters are then current."""
        for p in list(self._pending):
            if p in self._pending:
                self._apply(p)

    def zero_grad(self, set_to_none=False):
        """Zeroes gradients; a gradient whose update is still pending is zeroed right after
        its update."""
        if self._ferry_optimizer._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step(). This is prohibited as it can cause "
                                 "a race condition.")
        for p in self._group_of:
            if p in self._pending:
                self._zero_after[p] = set_to_none
            else:
                self._zero(p, set_to_none)

    def state_dict(self):
        self.synchronize()
        return self._ferry_optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self.synchronize()
        return self._ferry_optimizer.load_state_dict(state_dict)

    @property
    def param_groups(self):
        return self._ferry_optimizer.param_groups

    @property
    def state(self):
        return self._ferry_optimizer.state

    @property
    def optimizer(self):
        """The wrapped DistributedOptimizer (give this one to LR schedulers)."""
        return self._ferry_optimizer

    def remove(self):
        """Applies pending updates and removes the hooks; the model is then plain again."""
        self.synchronize()
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def __getattr__(self, name):
        return getattr(self.__dict__["_ferry_optimizer"], name)


# `import byteps.torch.cross_barrier as bps` gives BytePS programs the whole API: so does
# this module (every name of ferry.torch, looked up when first used).
def __getattr__(name):
    import ferry.torch as api
    if name in api.__all__:
        return getattr(api, name)
    raise AttributeError("module 'ferry.torch.cross_barrier' has no attribute %r" % (name,))


def __dir__():
    import ferry.torch as api
    return sorted(set(globals()) | set(api.__all__))

