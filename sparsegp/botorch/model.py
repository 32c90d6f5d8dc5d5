"""`SparseGPModel`: a sparsegp regression model as a BoTorch `Model` (see the package
docstring for what it does)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

import torch
from botorch.acquisition.objective import PosteriorTransform
from botorch.models.model import Model
from botorch.models.transforms.input import InputTransform
from botorch.models.transforms.outcome import OutcomeTransform
from botorch.posteriors.gpytorch import GPyTorchPosterior
from botorch.posteriors.posterior import Posterior
from botorch.sampling.base import MCSampler
from gpytorch import linear_operator
from gpytorch.constraints import Positive
from gpytorch.distributions import MultitaskMultivariateNormal, MultivariateNormal
from gpytorch.likelihoods import GaussianLikelihood
from torch import Tensor, nn

from .moments import Predictive, inputs_only, member_moments, shared_moments

if TYPE_CHECKING:
    from ..models import Model as SparseModel
    from ..validation import ArrayLike


@runtime_checkable
class _Conditions(Protocol):
    """A sparsegp model that conditions on new observations (GPR, SGPR)."""

    def condition_on_observations(self, X: Tensor, y: Tensor, noise: ArrayLike | None = None
                                  ) -> SparseModel: ...


def as_botorch(model: SparseModel, *, input_transform: InputTransform | None = None,
               outcome_transform: OutcomeTransform | None = None) -> SparseGPModel:
    """A fitted sparsegp regression model (GPR, SGPR, SVGP with a Gaussian likelihood; one
    output or several independent ones) as a BoTorch `Model` (`SparseGPModel`). With
    transforms, the model must have been built on the data they transformed (as
    `SparseGPModel.from_data` builds it).

    Example:

        >>> import torch, sparsegp as sg
        >>> from sparsegp.botorch import as_botorch
        >>> X = torch.linspace(0, 1, 6, dtype=torch.float64)[:, None]
        >>> model = as_botorch(sg.GPR(X, torch.sin(6 * X[:, 0]), noise_variance=1e-3))
        >>> posterior = model.posterior(torch.rand(4, 2, 1, dtype=torch.float64))
        >>> tuple(posterior.mean.shape), model.num_outputs
        ((4, 2, 1), 1)
    """
    return SparseGPModel(model, input_transform=input_transform,
                         outcome_transform=outcome_transform)


class SparseGPModel(Model):
    """A BoTorch `Model` of a fitted sparsegp regression model (see the package docstring).

    Example:

        >>> import torch, sparsegp as sg
        >>> from botorch.acquisition import qLogExpectedImprovement
        >>> from sparsegp.botorch import SparseGPModel
        >>> X = torch.rand(8, 2, dtype=torch.float64)
        >>> y = (X ** 2).sum(1)
        >>> gp = sg.GPR(X, y, noise_variance=1e-3)
        >>> acq = qLogExpectedImprovement(SparseGPModel(gp), best_f=y.max())
        >>> acq(torch.rand(5, 3, 2, dtype=torch.float64)).shape
        torch.Size([5])
    """

    def __init__(self, model: SparseModel, *, input_transform: InputTransform | None = None,
                 outcome_transform: OutcomeTransform | None = None) -> None:
        super().__init__()
        _check_model(model)
        outputs = getattr(model, "num_outputs", 1)
        self._set_members([model], torch.Size(), _fantasies(model), list(range(outputs)))
        if input_transform is not None:
            self.input_transform = input_transform.eval()
        if outcome_transform is not None:
            self.outcome_transform = outcome_transform.eval()

    @classmethod
    def from_data(cls, train_X: Tensor, train_Y: Tensor,
                  model: Callable[..., SparseModel], *,
                  input_transform: InputTransform | None = None,
                  outcome_transform: OutcomeTransform | None = None,
                  **options: Any) -> SparseGPModel:
        """A wrapper of `model(X, y, **options)` (e.g. `sg.SGPR`, unfitted: `.fit()` it) built
        on train_X [N, d] and train_Y [N, m] transformed as BoTorch's `SingleTaskGP` transforms
        its training data: the transforms learn their statistics here (Normalize's bounds
        when not given, Standardize's means and scales) and are then held (eval mode).
        y is [N] for m = 1 and [N, m] otherwise.

        Example:

            >>> import torch, sparsegp as sg
            >>> from botorch.models.transforms import Normalize, Standardize
            >>> from sparsegp.botorch import SparseGPModel
            >>> X = 5 + 10 * torch.rand(20, 2, dtype=torch.float64)  # not in the unit cube
            >>> Y = (X ** 2).sum(1, keepdim=True)
            >>> model = SparseGPModel.from_data(X, Y, sg.SGPR, input_transform=Normalize(2),
            ...                                 outcome_transform=Standardize(1)).fit()
            >>> model.posterior(X[:3]).mean.shape
            torch.Size([3, 1])
        """
        if not (isinstance(train_X, Tensor) and isinstance(train_Y, Tensor)) or (
                train_X.dim() != 2 or train_Y.dim() != 2 or train_X.shape[0] != train_Y.shape[0]):
            raise ValueError("from_data takes train_X [N, d] and train_Y [N, m] tensors (BoTorch's "
                             f"layout); got {tuple(getattr(train_X, 'shape', ()))} and "
                             f"{tuple(getattr(train_Y, 'shape', ()))}")
        X, Y = train_X, train_Y
        if input_transform is not None:
            input_transform.train()
            X = input_transform(train_X)
        if outcome_transform is not None:
            outcome_transform.train()
            Y, _ = outcome_transform(train_Y, X=X)
        y = Y[:, 0] if Y.shape[1] == 1 else Y
        return cls(model(X.detach(), y.detach(), **options), input_transform=input_transform,
                   outcome_transform=outcome_transform)

    def fit(self, **options: Any) -> SparseGPModel:
        """Fit the wrapped sparsegp model (`model.fit(**options)`); returns this wrapper."""
        self.model.fit(**options)
        return self

    def _set_members(self, models: list[SparseModel], input_batch: torch.Size,
                     fantasies: int | None, outputs: list[int]) -> None:
        #: one sparsegp model per element of the input batch (row-major)
        self.members = nn.ModuleList(models)
        self._input_batch = torch.Size(input_batch)
        self._num_fantasies = fantasies
        self._outputs = list(outputs)  # the wrapped model's outputs this wrapper gives

    def _like(self, models: list[SparseModel], input_batch: torch.Size,
              fantasies: int | None, outputs: list[int] | None = None) -> SparseGPModel:
        """A wrapper of `models` with this one's transforms (and outputs)."""
        new = type(self).__new__(type(self))
        Model.__init__(new)
        new._set_members(models, input_batch, fantasies,
                         self._outputs if outputs is None else outputs)
        for name in ("input_transform", "outcome_transform"):
            if hasattr(self, name):
                setattr(new, name, getattr(self, name))
        return new

    def _sparse(self) -> list[Predictive]:
        """The sparsegp models, one per element of the input batch."""
        return [m for m in self.members if isinstance(m, Predictive)]  # all (`_check_model`)

    # -- the Model protocol ------------------------------------------------------------------
    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    @property
    def batch_shape(self) -> torch.Size:
        """[] for a fitted model; [F, *b] for F fantasies over an input batch b."""
        head = torch.Size() if self._num_fantasies is None else torch.Size([self._num_fantasies])
        return head + self._input_batch

    @property
    def model(self) -> Any:
        """The wrapped sparsegp model (of a wrapper without an input batch)."""
        if len(self.members) != 1:
            raise AttributeError(f"this wrapper holds {len(self.members)} sparsegp models, one "
                                 f"per element of the input batch {list(self._input_batch)}")
        return self.members[0]

    @property
    def likelihood(self) -> GaussianLikelihood:
        """The wrapped model's noise variance as a GPyTorch likelihood (`ModelListGP` requires
        one): a record made on each access, not used by the predictions."""
        member = self.members[0]
        noise = torch.as_tensor(getattr(member, "noise_variance", 0.0), dtype=torch.float64)
        likelihood = GaussianLikelihood(noise_constraint=Positive()).to(torch.float64)
        likelihood.noise = noise.detach().reshape(-1).mean()
        return likelihood.requires_grad_(False)

    def subset_output(self, idcs: list[int]) -> SparseGPModel:
        """A wrapper of the outputs `idcs` (indices into this wrapper's outputs)."""
        outputs = self._pick(idcs)
        members = cast("list[SparseModel]", list(self.members))
        new = self._like(members, self._input_batch, self._num_fantasies,
                         [self._outputs[i] for i in outputs])
        if hasattr(self, "outcome_transform"):
            new.outcome_transform = self.outcome_transform.subset_output(list(outputs))
        return new

    def _pick(self, idcs: Sequence[int] | None) -> list[int]:
        """Positions among this wrapper's outputs (all for None), checked."""
        if idcs is None:
            return list(range(self.num_outputs))
        picked = [int(i) for i in idcs]
        if not picked or any(not -self.num_outputs <= i < self.num_outputs for i in picked):
            raise ValueError(f"this model has {self.num_outputs} output"
                             f"{'s' if self.num_outputs > 1 else ''}; output_indices must be "
                             f"indices among them, got {list(idcs)!r}")
        return [i % self.num_outputs for i in picked]

    def posterior(self, X: Tensor, output_indices: list[int] | None = None,
                  observation_noise: bool | Tensor = False,
                  posterior_transform: PosteriorTransform | None = None,
                  **kwargs: object) -> Posterior:
        """The joint predictive over each q-batch of X [..., q, d] (the original units: the
        input transform is applied), a `GPyTorchPosterior` of batch shape
        [..., *batch_shape], untransformed by the outcome transform: of f*, of y* with
        `observation_noise=True`, or of f* plus a given noise variance (a tensor broadcasting
        to [..., q, m], in the transformed units)."""
        if kwargs:
            raise TypeError(f"posterior() got unexpected arguments {sorted(kwargs)}")
        picked = self._pick(output_indices)
        X = self._check_inputs(X)
        observed = isinstance(observation_noise, bool) and observation_noise
        mean, cov = self._moments(self.transform_inputs(X), observed)  # [..., m, q(, q)]
        columns = [self._outputs[i] for i in picked]  # the wrapped model's outputs
        mean, cov = mean[..., columns, :], cov[..., columns, :, :]
        if isinstance(observation_noise, Tensor):
            noise = observation_noise.to(cov)
            if noise.dim() < 1 or noise.shape[-1] not in (1, len(picked)):
                raise ValueError("observation_noise as a tensor must end in the output "
                                 f"dimension (…, q, {len(picked)}); got shape "
                                 f"{tuple(noise.shape)}")
            noise = noise.expand(*noise.shape[:-1], len(picked)).transpose(-1, -2)
            cov = cov + torch.diag_embed(noise.expand(mean.shape))
        # a linear operator, not a tensor: MultivariateNormal factorises a tensor at once and
        # fails where the joint covariance is singular in floating point (many points, e.g.
        # a Thompson-sampling candidate set); an operator is factorised when sampled, with
        # jitter added as needed (as SingleTaskGP's posteriors are)
        dense = linear_operator.operators.DenseLinearOperator
        if len(picked) == 1:
            mvn = MultivariateNormal(mean[..., 0, :], dense(cov[..., 0, :, :]))
        else:  # independent outputs: block diagonal over [q, m], blocks per output (as
            # BoTorch's batched multi-output models lay it out: not interleaved)
            blocks = linear_operator.operators.BlockDiagLinearOperator(dense(cov), block_dim=-3)
            mvn = MultitaskMultivariateNormal(mean.mT, blocks, interleaved=False)
        posterior: Posterior = GPyTorchPosterior(mvn)
        if hasattr(self, "outcome_transform"):
            transform = self.outcome_transform
            if output_indices is not None:
                transform = transform.subset_output(picked)
            posterior = transform.untransform_posterior(posterior, X=X)
        if posterior_transform is not None:
            posterior = posterior_transform(posterior)
        return posterior

    def condition_on_observations(self, X: Tensor, Y: Tensor, *, noise: ArrayLike | None = None,
                                  **kwargs: object) -> SparseGPModel:
        """A new wrapper of the model conditioned on (X, Y) at fixed hyperparameters
        (sparsegp's `condition_on_observations`); this one is unchanged. X and Y are in the
        original units (transformed here as the training data were); `noise`, as BoTorch
        takes it, in the transformed units.

        X [*b, k, d], Y [*b, k, 1] (one set of targets per batch element) or [F, *b, k, 1]
        (F fantasies). A wrapper of F fantasies (no input batch) takes X [k, d] and Y
        [F, k, 1] or [k, 1]. `noise` (known noise variances of the new points, [..., k, 1] or
        a number) is passed on for models fitted with a noise variance per point."""
        if kwargs:
            raise TypeError(f"condition_on_observations() got unexpected arguments "
                            f"{sorted(kwargs)}")
        if isinstance(X, Tensor) and isinstance(Y, Tensor) and hasattr(self, "outcome_transform"):
            Y, _ = self.outcome_transform.eval()(Y, X=X)
        return self._condition(self.transform_inputs(X), Y, noise)

    def get_fantasy_model(self, inputs: Tensor, targets: Tensor, **kwargs: Any
                          ) -> SparseGPModel:
        """GPyTorch's name for conditioning, as `ModelListGP.condition_on_observations` calls
        it: inputs [*b, k, d] in the original units, targets [*b, k] (or [F, *b, k]) already
        outcome-transformed, `noise` in the transformed units."""
        noise = kwargs.pop("noise", None)
        if kwargs:
            raise TypeError(f"get_fantasy_model() got unexpected arguments {sorted(kwargs)}")
        return self._condition(self.transform_inputs(inputs), targets[..., None], noise)

    def _condition(self, X: Tensor, Y: Tensor, noise: ArrayLike | None) -> SparseGPModel:
        """Conditioning on X and Y in the wrapped model's own (transformed) units."""
        for member in self._sparse():
            _conditions(member)
        if X.dim() < 2 or Y.dim() < 2 or Y.shape[-1] != 1 or Y.shape[-2] != X.shape[-2]:
            raise ValueError(f"X must be [..., k, d] and Y [..., k, 1] with the same k; got X "
                             f"{tuple(X.shape)} and Y {tuple(Y.shape)}")
        if self.batch_shape != torch.Size():
            return self._condition_fantasies(X, Y, noise)
        input_batch = X.shape[:-2]
        extra = Y.dim() - 2 - len(input_batch)
        if extra not in (0, 1) or Y.shape[extra:-2] != input_batch:
            raise ValueError(f"Y must be [*b, k, 1] or [F, *b, k, 1] for X [*b, k, d]; got X "
                             f"{tuple(X.shape)} and Y {tuple(Y.shape)}")
        n = math.prod(input_batch)
        Xs = X.reshape(n, *X.shape[-2:])
        Ys = Y[..., 0].reshape(*Y.shape[:extra], n, Y.shape[-2])
        noises = _per_batch(noise, Y.shape[:-1], extra, n)
        first = _conditions(self._sparse()[0])
        models = [first.condition_on_observations(Xs[j], Ys[..., j, :], noises[j])
                  for j in range(n)]
        return self._like(models, input_batch, Y.shape[0] if extra else None)

    def _condition_fantasies(self, X: Tensor, Y: Tensor, noise: ArrayLike | None
                             ) -> SparseGPModel:
        if self._input_batch != torch.Size() or X.dim() != 2 or Y.dim() not in (2, 3):
            raise ValueError("conditioning a wrapper of fantasies again takes the wrapper of one "
                             "sparsegp model (no input batch), X [k, d] and Y [F, k, 1] or "
                             f"[k, 1]; this wrapper has batch shape {list(self.batch_shape)}, "
                             f"X {tuple(X.shape)}, Y {tuple(Y.shape)}")
        if isinstance(noise, Tensor):
            noise = noise.reshape(-1, X.shape[0])[0]
        new = _conditions(self._sparse()[0]).condition_on_observations(X, Y[..., 0], noise)
        return self._like([new], torch.Size(), self._num_fantasies)

    def fantasize(self, X: Tensor, sampler: MCSampler, observation_noise: Tensor | None = None,
                  **kwargs: Any) -> SparseGPModel:
        """A model of fantasies: Y sampled by `sampler` from the posterior of y* at X
        [*b, q, d], then conditioned on (`condition_on_observations`; batch shape [S, *b] for
        S samples). The noise is the model's σ², or `observation_noise` (a tensor [*b, q, 1]
        or [*b, 1, 1]: the known noise variance of the new points, for models fitted with a
        noise variance per point). Y keeps its graph to X, so one-step look-ahead values
        (`qKnowledgeGradient`) are differentiable with respect to X (through the fantasy
        data too)."""
        kwargs.pop("propagate_grads", None)
        if observation_noise is None:
            Y = sampler(self.posterior(X, observation_noise=True))  # [S, *b, q, 1]
            return self.condition_on_observations(X, Y, **kwargs)
        if not isinstance(observation_noise, Tensor):
            raise TypeError("fantasize: observation_noise must be None (the model's σ²) or a "
                            f"tensor of noise variances; got {type(observation_noise).__name__}")
        Y = sampler(self.posterior(X, observation_noise=observation_noise))
        return self.condition_on_observations(X, Y, noise=observation_noise, **kwargs)

    # the training inputs are the wrapped model's own, transformed when it was built:
    # nothing for BoTorch's train()/eval() to swap
    def _set_transformed_inputs(self) -> None:
        pass

    def _revert_to_original_inputs(self) -> None:
        pass

    # -- the moments ---------------------------------------------------------------------------
    def _check_inputs(self, X: Tensor) -> Tensor:
        if not isinstance(X, Tensor) or not X.is_floating_point() or X.dim() < 2:
            raise ValueError("X must be a floating-point tensor [..., q, d]; got "
                             f"{type(X).__name__} {tuple(getattr(X, 'shape', ()))}")
        d = getattr(self.members[0], "input_dim", None)
        if isinstance(d, int) and not hasattr(self, "input_transform") and X.shape[-1] != d:
            raise ValueError(f"X must have {d} features (its last dimension); got "
                             f"{X.shape[-1]}")
        if not bool(torch.isfinite(X.detach()).all()):
            raise ValueError("X holds NaN or infinite values")
        return X

    def _moments(self, X: Tensor, observed: bool) -> tuple[Tensor, Tensor]:
        """Mean [..., *batch_shape, m, q] and covariance [..., *batch_shape, m, q, q] at X
        (the wrapped model's inputs), m the wrapped model's outputs."""
        q, d = X.shape[-2:]
        try:
            full = torch.broadcast_shapes(X.shape[:-2], self.batch_shape)
        except RuntimeError as err:
            raise ValueError(f"X's batch shape {list(X.shape[:-2])} does not broadcast with the "
                             f"model's {list(self.batch_shape)}") from err
        at = len(full) - len(self.batch_shape)  # the fantasies' dimension in `full`
        spread = [i for i in range(at, len(full))
                  if self.batch_shape[i - at] == 1 and full[i] != 1]
        if spread:  # X spans a batch dimension along which the model is one (F = 1, say)
            return self._spread_moments(X, observed, full, spread)
        # whether X is the same under every fantasy (broadcast along their dimension, as
        # BoTorch's acquisition functions give it): then one prediction serves them all
        given = (1,) * (len(full) - X.dim() + 2) + tuple(X.shape[:-2])
        fantasies = self._num_fantasies is not None
        shared = fantasies and given[at] == 1
        X = X.expand(*full, q, d)
        lead = full[:at]
        n = len(self.members)
        F = 1 if self._num_fantasies is None else self._num_fantasies
        Xs = X.reshape(-1, F, n, q, d)  # rows, fantasies, input batch
        means, covs = [], []
        for j, member in enumerate(self._sparse()):
            with inputs_only(member):
                if shared or not fantasies:  # every fantasy (output) from one prediction
                    mean, cov = shared_moments(member, Xs[:, 0, j], observed)
                else:
                    mean, cov = member_moments(member, Xs[:, :, j], observed)
            if fantasies:  # [R, F, q] -> [R, F, 1, q]: one output
                mean, cov = mean[:, :, None], cov[:, :, None]
            else:  # [R, m, q] -> [R, 1, m, q]: no fantasies
                mean, cov = mean[:, None], cov[:, None]
            means.append(mean)
            covs.append(cov)
        m = means[0].shape[-2]
        shape = (*lead, *self.batch_shape, m, q)
        mean = torch.stack(means, 2).reshape(shape)
        cov = torch.stack(covs, 2).reshape(*shape, q)
        return mean, cov

    def _spread_moments(self, X: Tensor, observed: bool, full: torch.Size, spread: list[int]
                        ) -> tuple[Tensor, Tensor]:
        """`_moments` where X spans the batch dimensions `spread` of `full`, along which the
        model has one element: those dimensions are moved to the front (rows sharing the
        model's one element there), the moments taken, and moved back."""
        q, d = X.shape[-2:]
        others = [i for i in range(len(full)) if i not in spread]
        order = spread + others
        front = [full[i] for i in spread]
        kept = [1 if i in spread else full[i] for i in range(len(full))]
        Xs = X.expand(*full, q, d).permute(*order, len(full), len(full) + 1)
        mean, cov = self._moments(Xs.reshape(math.prod(front), *kept, q, d), observed)
        m = mean.shape[-2]
        inverse = [order.index(i) for i in range(len(full))]
        placeholders = tuple(len(front) + i for i in spread)
        mean = mean.reshape(*front, *kept, m, q).squeeze(placeholders)
        cov = cov.reshape(*front, *kept, m, q, q).squeeze(placeholders)
        n = len(full)
        return mean.permute(*inverse, n, n + 1), cov.permute(*inverse, n, n + 1, n + 2)


def _check_model(model: SparseModel) -> None:
    name = type(model).__name__
    if not (isinstance(model, nn.Module) and hasattr(model, "predict_f")
            and hasattr(model, "predict_y")):
        raise TypeError(f"as_botorch takes a fitted sparsegp regression model (GPR, SGPR, SVGP "
                        f"with a Gaussian likelihood); got {name}")
    if getattr(model, "mixing_matrix", None) is not None:
        raise ValueError(f"as_botorch takes a model of independent outputs; this {name}'s "
                         "outputs are correlated through its mixing matrix (the LMC), whose "
                         "joint over q points and the outputs predict_f does not give: wrap "
                         "one model per output (in a ModelListGP)")
    likelihood = getattr(model, "likelihood", None)
    if likelihood is not None and type(likelihood).__name__ != "Gaussian":
        raise ValueError(f"as_botorch takes a model with a Gaussian likelihood; this {name} has "
                         f"{type(likelihood).__name__}")


def _conditions(member: Predictive) -> _Conditions:
    """The member, which must condition on observations (a GPR or SGPR)."""
    if not isinstance(member, _Conditions):
        raise TypeError("condition_on_observations takes a GPR or SGPR; this wrapper "
                        f"holds a {type(member).__name__}")
    return member


def _fantasies(model: SparseModel) -> int | None:
    return getattr(model, "num_fantasies", None)


def _per_batch(noise: ArrayLike | None, targets: torch.Size, extra: int, n: int
               ) -> list[ArrayLike | None]:
    """The known noise of the new points for each of the n batch elements ([k] or None)."""
    if noise is None or not isinstance(noise, Tensor):
        return [noise] * n
    t = noise[..., 0] if noise.dim() >= 2 and noise.shape[-1] == 1 else noise
    t = t.expand(targets)
    t = t[0] if extra else t  # the fantasies share the noise
    return list(t.reshape(n, targets[-1]))

