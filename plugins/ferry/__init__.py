"""Ferry: a parameter-server communication system for distributed training.

Framework plugins live in subpackages; for PyTorch::

    import ferry.torch as bps      # or: as hvd

The native extension ``ferry._core`` is built by the project's CMake into
``<build>/python/ferry``; put ``<build>/python`` on ``PYTHONPATH`` (docs/pytorch.md).
"""

__version__ = "0.1.0"
