"""kernels: the Triton layer of ozaki.

One module per pipeline stage, named as ozaki's (``scaling``, ``accuracy``, ``residues``,
``products``, ``crt``), each holding its kernel, launcher, configurations and the plain reference it is
tested against; the chained-MMA sums (``tc_sum``); the autotuner; compilation to PTX
without a GPU (``ptx``); the launches, which go to a compiled kernel's launcher directly once
Triton has compiled it for their specialization (``dispatch``); and the bitwise checker
(``kernels.check``, the ``ozaki-check`` tool).  Import what you need from the module that holds
it: the package itself loads nothing, so ``kernels.digits`` (the digit sets), ``kernels.float64``
(the format's constants) and ``kernels.moduli`` (the modulus range), shared with the library and
the search engine, load without torch or Triton.
"""
