"""The infrastructure every model family is built on (docs/architecture.md): the one base
(`model.Model`: one constructor, the posterior cache, `fit`, predictions, saving), the spec
(`spec`), the data and their units (`data`, `units`), the Gaussian noise (`noise`), the
prediction path (`predictions`), the training plans and their options (`fitting`,
`options`), conditioning (`conditioning`), the streaming update (`streaming`), the inducing
inputs (`inducing`), the output mixing (`mixing`), the random-input models' shared parts
(`latent`), saving and loading (`persistence`), the model registry (`registry`) and the key of
the posterior cache (`state`)."""

from __future__ import annotations

from ...moved import former


def __getattr__(name: str) -> object:
    """The former names of `sparsegp.models.core` (a module in sparsegp 0.4.0)."""
    return former(__name__, name)
