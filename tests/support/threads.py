"""Torch's intra-op threads in the tests: one per worker when pytest-xdist runs several on the cores.

Beside a second busy process on the 2-core machine, torch at 2 threads ran 1.6-3x slower than at 1
(a 600-token prefill 10.4 s against 6.5 s, a decode step 313 ms against 116 ms, a 512-token training
step 27.8 s against 17.6 s; docs/benchmarks.md): two workers of two threads each oversubscribe the cores.
Serially (`TEST_JOBS=0`) the trainer's default of 2 stands.
"""

import os

TORCH_THREADS = 1 if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1 else 2
