"""Per-layer compute spans for the worker's trace (FERRY_TRACE_DIR), what ferry-sim
--workload TRACE_DIR replays (docs/simulation.md, "Workloads from traces").

DistributedOptimizer makes one ComputeTracer when FERRY_TRACE_DIR is set (nothing is
installed otherwise). It reports through the core (Worker::TraceCompute), on the core's
clock, under the names Ferry knows the gradients by ("Gradient.<parameter>"):

- backward: each gradient-ready event (the optimizer's gradient hooks call
  gradient_ready) closes a span of that gradient's tensor that began at the previous
  event: the previous gradient, or the end of the last module's forward (the loss and the
  first layer's backward go to the first gradient), or the last step();
- forward: for every leaf module (no children) that owns parameters this optimizer
  pushes, the time from its forward pre-hook to its forward hook, split evenly between
  its parameters in their order (so weight and bias each have a forward span, together
  the module's). The pre-hook is the module's own, added at its first forward and so run
  after hooks registered before it (CrossBarrier's gate: waiting for a sum is not
  compute); that first forward is not timed. Finding the modules needs no model: two
  global module hooks (torch.nn.modules.module.register_module_forward_*_hook) look at
  every module's forward once and then only at the leaves that own parameters.

Cost with tracing on: a few Python calls per module forward and per gradient.
"""

import weakref

import torch

from ferry.torch import ops


class ComputeTracer(object):
    def __init__(self, names):
        """names: {parameter: the Ferry tensor name of its gradient}."""
        self._names = dict(names)
        self._seen = weakref.WeakKeyDictionary()  # module -> its tensor names, () if untimed
        self._start = {}  # id(module) -> start of its forward in flight
        self._last_us = ops._core.now_us()
        this = weakref.ref(self)

        def pre(module, inputs):
            tracer = this()
            if tracer is not None:
                tracer._first_sight(module)

        def post(module, inputs, output):
            tracer = this()
            if tracer is not None:
                tracer._forward_done(module)

        self._handles = [torch.nn.modules.module.register_module_forward_pre_hook(pre),
                         torch.nn.modules.module.register_module_forward_hook(post)]
        weakref.finalize(self, ComputeTracer._remove, list(self._handles))

    @staticmethod
    def _remove(handles):
        for h in handles:
            h.remove()

    def remove(self):
        """Removes the global hooks (also done when the tracer is collected)."""
        ComputeTracer._remove(self._handles)
        self._handles = []

    def _first_sight(self, module):
        try:
            if module in self._seen:
                return
        except TypeError:  # a module without weak references: never timed
            return
        own = ()
        if not module._modules:
            own = tuple(self._names[p] for p in module._parameters.values()
                        if p is not None and p in self._names)
        self._seen[module] = own
        if own:
            this = weakref.ref(self)

            def start(m, inputs):
                tracer = this()
                if tracer is not None:
                    tracer._start[id(m)] = ops._core.now_us()

            module.register_forward_pre_hook(start)

    def _forward_done(self, module):
        begin = self._start.pop(id(module), None)
        if begin is None:
            return
        end = ops._core.now_us()
        own = self._seen.get(module, ())
        n = len(own)
        for i, name in enumerate(own):
            ops._core.trace_compute(name, False, begin + (end - begin) * i // n,
                                    begin + (end - begin) * (i + 1) // n)
        self._last_us = end

    def gradient_ready(self, name):
        """The gradient of tensor `name` is final: its backward span ends now."""
        now = ops._core.now_us()
        ops._core.trace_compute(name, True, self._last_us, now)
        self._last_us = now

    def step(self):
        """The iteration ended (step()): the next backward's first span starts later."""
        self._last_us = ops._core.now_us()
