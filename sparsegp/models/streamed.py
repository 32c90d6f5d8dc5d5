"""What every streamed model (`StreamingSGPR`, `StreamingSVGP`) shares: how much data it has
seen, and the refusal of the checks that speak of one batch of data only."""

from __future__ import annotations

from typing import Any


class Streamed:
    """Mixin of a model made by `update`: its `_config["streaming"]` holds the rows seen and
    the updates made. The upper bound and the diagnostics look at one batch of data, while a
    streamed posterior also holds the data before it: they are refused, not silently wrong."""

    _config: dict[str, Any]

    @property
    def num_data_seen(self) -> int:
        """The rows of every batch this model has been updated with, this one too."""
        return int(self._config["streaming"]["seen"])

    @property
    def num_updates(self) -> int:
        """How many updates led to this model (1 for the first update of a batch model)."""
        return int(self._config["streaming"]["updates"])

    def _before(self) -> str:
        return (f"a {type(self).__name__}'s posterior also holds the data before its batch "
                f"(fit a batch model to all the data to diagnose the approximation)")

    def upper_bound(self) -> float:
        raise TypeError("upper_bound() bounds the evidence of one batch of data; "
                        + self._before())

    def diagnostics(self, **kwargs: Any) -> Any:
        raise TypeError("diagnostics() look at one batch of data; " + self._before())

    def diagnostic_view(self) -> Any:
        raise TypeError(f"a {type(self).__name__} has no diagnostic view: " + self._before())
