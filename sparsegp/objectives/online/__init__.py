"""Online updates (Bui, Nguyen & Turner 2017; docs/math.md §10, §11): the streaming bound of
a new batch of data given a summary of the old data (`regression`: the collapsed Power-EP form;
`svgp`: the uncollapsed form for any likelihood), the bounds on the evidence a streamed model
approximates (`bounds`), and conditioning a posterior on new observations at fixed
hyperparameters (`conditioning`)."""

from .regression import (
    StreamingProblem,
    Summary,
    combined_statistics,
    streaming_objective,
    streaming_posterior_q,
    summarise,
    summary_statistics,
)

__all__ = ["StreamingProblem", "Summary", "combined_statistics", "streaming_objective",
           "streaming_posterior_q", "summarise", "summary_statistics"]
