"""KerasHub's samplers (``keras_hub.samplers``), as the engine's generation
options: ``CausalLM.compile(sampler="greedy" | "top_k" | "top_p" | "random")``
or one of these objects, with KerasHub's defaults
(keras_hub/src/samplers/{greedy,top_k,top_p,random}_sampler.py).
"""

from .. import _checks

__all__ = ["Sampler", "GreedySampler", "TopKSampler", "TopPSampler", "RandomSampler", "get"]


class Sampler:
    """How generate() picks each token: ``temperature`` (0: greedy),
    ``top_k`` (0: every token) and ``top_p`` (1: every token)."""

    temperature, top_k, top_p, seed = 1.0, 0, 1.0, None

    def _options(self):
        return self.temperature, self.top_k, self.top_p, self.seed

    def __repr__(self):
        return f"<keras_hub.samplers.{type(self).__name__}>"


class GreedySampler(Sampler):
    temperature = 0.0


class RandomSampler(Sampler):
    def __init__(self, seed=None, temperature=1.0):
        self.seed, self.temperature = seed, _temperature(temperature, "RandomSampler")


class TopKSampler(Sampler):
    def __init__(self, k=5, seed=None, temperature=1.0):
        self.top_k = _checks.integer(k, "k", "TopKSampler", 1, _checks.INT32_MAX)
        self.seed, self.temperature = seed, _temperature(temperature, "TopKSampler")


class TopPSampler(Sampler):
    def __init__(self, p=0.1, k=None, seed=None, temperature=1.0):
        self.top_p = _checks.number(p, "p", "TopPSampler", above=0, maximum=1)
        self.top_k = 0 if k is None else _checks.integer(k, "k", "TopPSampler", 1,
                                                         _checks.INT32_MAX)
        self.seed, self.temperature = seed, _temperature(temperature, "TopPSampler")


def _temperature(value, where):
    return _checks.number(value, "temperature", where, above=0)


_BY_NAME = {"greedy": GreedySampler, "top_k": TopKSampler, "top_p": TopPSampler,
            "random": RandomSampler}


def get(identifier):
    """A Sampler from an object or KerasHub's name ("greedy", "top_k", ...)."""
    if isinstance(identifier, Sampler):
        return identifier
    if isinstance(identifier, str) and identifier in _BY_NAME:
        return _BY_NAME[identifier]()
    raise ValueError(f"sampler must be one of {', '.join(_BY_NAME)} or a keras_hub.samplers "
                     f"object, not {identifier!r} (autoshard has no beam or contrastive search)")
