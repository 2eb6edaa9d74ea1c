"""How fast this CPU multiplies matrices: fp32 (and bf16 where the CPU has it) GFLOP/s on 1 and 2 threads.

The same kind of machine (2-core AMD EPYC, AVX2) has run the suite in 435 s one day and 1,005 s another, so
timings in docs/benchmarks.md and docs/results.md name this reading beside them: a time is comparable
across machines only per GFLOP/s.

    .venv/bin/python bench/machine_speed.py
"""

from __future__ import annotations

import time


def gflops(dtype, threads: int, n: int = 1024, reps: int = 20) -> float:
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    for _ in range(3):
        a @ b
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    return reps * 2 * n**3 / (time.perf_counter() - t0) / 1e9


def main() -> None:
    import torch

    from mcprl.models.devices import pick_dtype
    from side_by_side import print_table

    dtypes = [torch.float32] + ([torch.bfloat16] if pick_dtype("cpu") == torch.bfloat16 else [])
    rows = [(str(d).removeprefix("torch."), *(f"{gflops(d, t):.0f}" for t in (1, 2))) for d in dtypes]
    print_table("1024x1024 matmul, GFLOP/s", ("dtype", "1 thread", "2 threads"), rows)
    print(f"result: fp32_2_threads_gflops={rows[0][2]}")


if __name__ == "__main__":
    main()
