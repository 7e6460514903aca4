"""Run every Triton kernel through the interpreter when there is no GPU.

The variable must be set before any ``@triton.jit`` function is defined, so it is set here,
before the test modules import ``kernels``.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

HAS_CUDA = torch.cuda.is_available()
