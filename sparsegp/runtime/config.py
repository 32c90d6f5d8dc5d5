"""Library-wide defaults (constants only: there are no global switches).

Every default here can be overridden by an argument of the function or model that uses it.
"""

from __future__ import annotations

import torch

#: dtype of every model unless the data are float32 tensors or `dtype=` says otherwise. A
#: float32 model does its heavy N·M² work in float32; its parameters, stored data and every
#: M×M factorisation stay in `PARAMETER_DTYPE` (float32 Cholesky factors of kernel matrices
#: are not robust: rounding alone makes them indefinite).
DEFAULT_DTYPE = torch.float64

#: dtype of every parameter, stored data set and factorisation, whatever the model's dtype.
PARAMETER_DTYPE = torch.float64

#: Jitter added to Kuu, relative to the mean of its diagonal (docs/math.md §7).
DEFAULT_JITTER = 1e-6

#: How many times the jitter is multiplied by 10 after a failed Cholesky before giving up.
JITTER_ESCALATIONS = 4

#: Smallest relative jitter tried when escalating from `jitter=0`.
MIN_ESCALATION_JITTER = 1e-10

#: Lower bound ("floor") on positive parameters: lengthscales, variances, periods.
POSITIVE_FLOOR = 1e-6

#: Lower bound on the Gaussian noise variance. FITC drives the noise towards 0 (Bauer et
#: al. 2016); the floor keeps the objective finite so that the collapse can be diagnosed.
NOISE_FLOOR = 1e-6

#: Memory budget, in bytes, for one chunk of the N×M work (Kuf and its temporaries); small
#: enough that a chunk stays in a 32 MB cache (measured fastest), large enough for BLAS-3.
CHUNK_MEMORY_BYTES = 32 * 2**20

#: Temporaries of size B×M alive at once inside one chunk (Kuf, L⁻¹Kuf, scratch).
CHUNK_TEMPORARIES = 4

#: On a GPU a chunk is sized from the device's free memory instead (caches do not matter,
#: kernel launches and small GEMMs do): this fraction of the free memory, and at least
#: `CUDA_MIN_CHUNK_ROWS` rows. Measured on an H100: VFE at N = 10⁶, M = 1000 took
#: 0.895 s per objective + gradient with the CPU's 32 MB chunks and 0.120 s with 10⁵-row ones.
CUDA_CHUNK_MEMORY_FRACTION = 0.25
CUDA_MIN_CHUNK_ROWS = 8192

#: Format version written by `save()`; `load()` refuses other versions.
FORMAT_VERSION = 2
