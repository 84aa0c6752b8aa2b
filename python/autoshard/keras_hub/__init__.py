"""KerasHub's names on autoshard's engine (docs/keras-hub.md, "From Python")::

    import autoshard.keras_hub as keras_hub

    lm = keras_hub.models.GPT2CausalLM.from_preset("path/to/preset", mesh="model=2")
    lm.compile(sampler="greedy")
    lm.generate({"token_ids": ids, "padding_mask": mask}, stop_token_ids=None)

``models`` has a Backbone and a CausalLM (or, for BERT and RoBERTa, a
TextClassifier) class for each backbone the engine's model families read;
``samplers`` KerasHub's samplers. Presets are local directories.
"""

from . import models, samplers

__all__ = ["models", "samplers"]
