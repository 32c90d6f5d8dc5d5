"""torch.func transforms (`grad`, `vmap`, `jacrev`, …) around sparsegp's predictions: which
tensors they wrap, and building a model's posterior, which does not depend on the transformed
inputs, outside them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch
from torch import Tensor, nn


def under_transform(t: Tensor) -> bool:
    """Whether t is a tensor inside a `torch.func` transform: its values cannot be read (no
    data pointer, no data-dependent branches), only its shape."""
    return bool(torch._C._functorch.is_functorch_wrapped_tensor(t))


def in_transform() -> bool:
    """Whether the code runs inside a `torch.func` transform."""
    return torch._C._functorch.peek_interpreter_stack() is not None


@contextmanager
def outside_transforms(module: nn.Module) -> Iterator[None]:
    """Run the body outside any `torch.func` transform around it, where `module`'s parameters
    and buffers are plain tensors (a posterior built from them does not depend on the
    transformed inputs, and a chunked objective's sums refuse transforms); inside otherwise
    (a transform over the parameters, `functional_call`: the body then meets it)."""
    plain = in_transform() and not any(
        under_transform(t) for t in (*module.parameters(), *module.buffers()))
    context: AbstractContextManager[object] = nullcontext()
    if plain:
        try:
            from torch._functorch.pyfunctorch import temporarily_clear_interpreter_stack
        except ImportError:  # another torch: the transform meets the body
            pass
        else:
            context = temporarily_clear_interpreter_stack()
    with context:
        yield
