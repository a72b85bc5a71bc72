"""ferry.torch.elastic: Horovod's elastic API (run, TorchState, ElasticSampler).

Coming with elastic training (docs/reliability.md): until then every name here raises
NotImplementedError, so a Horovod elastic script fails at once with that reason."""

__all__ = ["run", "TorchState", "ElasticSampler"]

_WHY = ("ferry.torch.elastic: elastic training (a job that survives a dead worker or "
        "server and takes new ones) is not available yet; run the script without "
        "horovod.torch.elastic (a plain training loop)")


def run(func):
    raise NotImplementedError(_WHY)


class TorchState(object):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(_WHY)


class ElasticSampler(object):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(_WHY)
