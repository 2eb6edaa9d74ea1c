"""Rollout throughput: naive per-episode `model.generate` vs the embedded batched engine (and vLLM when
importable), on the same tool-use episodes with the same sampling settings.

    .venv/bin/python bench/rollout_throughput.py [--quick] [--episodes 16] [--new-tokens 64]
                                                 [--model NAME_OR_DIR] [--device cpu|cuda]

Each episode is a chat prompt (a system prompt listing tools + a user question, ~250 tokens) and one
sampled completion of up to `--new-tokens` tokens (EOS may end it earlier; no minimum length is
forced). Naive variants generate one episode at a time; `--quick` times them on the first 4 episodes
only (they are sequential, so tokens/s does not depend on how many run). Speedups compare tokens/s.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import time
from dataclasses import dataclass

import torch
from rich.console import Console

from mcprl.models.devices import configure_threads
from mcprl.inference.engine import HFInferenceEngine
from mcprl.models.loading import DEFAULT_MODEL, load_model, resolve_model
from side_by_side import print_table

SYSTEM = """You are an assistant that can call tools. To call a tool, answer with exactly one line
<tool_call>{"name": TOOL_NAME, "arguments": {ARGUMENTS}}</tool_call>
and wait for the result. When you know the answer, reply with <answer>ANSWER</answer>.

Available tools:
- get_stock_price(ticker: string): latest trade price of a US stock, in USD.
- get_company_profile(ticker: string): sector, industry, employees and headquarters of a company.
- convert_currency(amount: number, from_currency: string, to_currency: string): convert an amount.
- get_current_time(timezone: string): current date and time in an IANA timezone, e.g. Europe/Paris.
- search_news(query: string, limit: integer): recent news headlines matching a query.
- run_sql(query: string): run a read-only SQL query on the sales database (tables: orders, customers).

Example:
User: What is Microsoft's stock price?
Assistant: <tool_call>{"name": "get_stock_price", "arguments": {"ticker": "MSFT"}}</tool_call>"""

QUESTIONS = [
    "What is Apple's stock price right now?",
    "How many employees does Nvidia have?",
    "Convert 250 US dollars to euros.",
    "What time is it in Tokyo?",
    "Find the latest news about electric cars.",
    "How many orders did we get last month?",
    "Which sector is Exxon Mobil in?",
    "What is Tesla's stock price in British pounds?",
    "What is the current time in New York?",
    "List the top 3 customers by revenue.",
    "Any news about interest rates today?",
    "Where is Amazon headquartered?",
    "Convert 1000 yen to dollars.",
    "What is Google's share price?",
    "What time is it in Paris?",
    "How many customers are in the database?",
]


@dataclass
class Row:
    variant: str
    episodes: int
    wall_s: float
    generated: int

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.wall_s


def build_prompts(tokenizer, episodes: int, group: int) -> list[list[int]]:
    distinct = [
        tokenizer.apply_chat_template(
            [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        for q in QUESTIONS[: max(1, episodes // group)]
    ]
    return [p for p in distinct for _ in range(group)][:episodes]


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"


def naive(model, prompts, new_tokens: int, temperature: float, seed: int, label: str) -> Row:
    """What a first attempt looks like: `model.generate` per episode, batch 1."""
    torch.manual_seed(seed)
    generated = 0
    start = time.perf_counter()
    with torch.inference_mode():
        for prompt in prompts:
            ids = torch.tensor([prompt], device=model.device)
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new_tokens,
                do_sample=True,
                temperature=temperature,
                top_k=0,
                top_p=1.0,
            )
            generated += out.shape[1] - ids.shape[1]
    return Row(label, len(prompts), time.perf_counter() - start, generated)


async def _concurrent(engine: HFInferenceEngine, prompts, sampling: dict) -> list:
    """One request per episode, all in flight at once, as SkyRL's generator issues them."""
    calls = [
        engine.generate({"prompt_token_ids": [p], "sampling_params": sampling, "session_ids": [f"episode-{i}"]})
        for i, p in enumerate(prompts)
    ]
    outputs = await asyncio.gather(*calls)
    for i in range(len(prompts)):
        await engine.finish_session(f"episode-{i}")
    return outputs


def embedded(model, tokenizer, prompts, sampling: dict, seed: int, dtype: str) -> Row:
    engine = HFInferenceEngine(model, tokenizer, dtype=dtype, seed=seed, max_batch_size=len(prompts))
    engine.generate_batch(prompts[:1], {**sampling, "max_tokens": 2})  # warm-up (weight copy, kernels)
    engine.reset_stats()
    start = time.perf_counter()
    outputs = asyncio.run(_concurrent(engine, prompts, sampling))
    wall = time.perf_counter() - start
    engine.close()
    generated = sum(len(o["response_ids"][0]) for o in outputs)
    label = f"embedded engine, {str(engine.dtype).removeprefix('torch.')}{' (auto)' * (dtype == 'auto')}"
    label += f", {engine.stats.batches} batch"
    return Row(label, len(prompts), wall, generated)


def vllm_row(model_name: str, prompts, new_tokens: int, temperature: float, seed: int) -> Row | None:
    try:
        import vllm
    except ImportError:
        return None
    llm = vllm.LLM(model=str(resolve_model(model_name)), dtype="bfloat16", seed=seed)
    params = vllm.SamplingParams(max_tokens=new_tokens, temperature=temperature, top_k=-1, seed=seed)
    start = time.perf_counter()
    outputs = llm.generate([vllm.TokensPrompt(prompt_token_ids=p) for p in prompts], params)
    wall = time.perf_counter() - start
    return Row("vLLM bf16 (batched)", len(prompts), wall, sum(len(o.outputs[0].token_ids) for o in outputs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="time naive variants on 4 episodes only")
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--group", type=int, default=2, help="samples per distinct prompt (GRPO group)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model alias, HF id in the local cache, or directory")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()

    configure_threads(args.threads)
    console = Console(width=120)
    model, tokenizer = load_model(args.model, dtype="float32", device=args.device)
    prompts = build_prompts(tokenizer, args.episodes, args.group)
    naive_prompts = prompts[:4] if args.quick else prompts
    sampling = {"max_tokens": args.new_tokens, "temperature": args.temperature, "top_k": -1, "top_p": 1.0}
    lengths = [len(p) for p in prompts]
    console.print(
        f"{len(prompts)} episodes, prompt tokens {min(lengths)}-{max(lengths)}, up to {args.new_tokens} new tokens, "
        f"T={args.temperature}, {device_name(model.device)}, {torch.get_num_threads()} thread(s), load average at start {os.getloadavg()[0]:.2f}"
    )

    model_bf16 = copy.deepcopy(model).to(torch.bfloat16)
    naive(model, naive_prompts[:1], 2, args.temperature, args.seed, "warm-up")
    naive(model_bf16, naive_prompts[:1], 2, args.temperature, args.seed, "warm-up")
    rows = [
        naive(model, naive_prompts, args.new_tokens, args.temperature, args.seed, "naive generate, fp32"),
        naive(model_bf16, naive_prompts, args.new_tokens, args.temperature, args.seed, "naive generate, bf16"),
        embedded(model, tokenizer, prompts, sampling, args.seed, "float32"),
        embedded(model, tokenizer, prompts, sampling, args.seed, "auto"),
    ]
    del model_bf16
    vllm_result = vllm_row(args.model, prompts, args.new_tokens, args.temperature, args.seed)
    if vllm_result is not None:
        rows.append(vllm_result)

    baseline = rows[0].tokens_per_s
    print_table(f"Rollout throughput ({args.model}, {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M)",
                ("variant", "episodes", "wall s", "generated tokens", "tokens/s", "speedup vs naive fp32"),
                [(row.variant, str(row.episodes), f"{row.wall_s:.1f}", str(row.generated), f"{row.tokens_per_s:.1f}",
                  f"{row.tokens_per_s / baseline:.2f}x") for row in rows], width=120)
    console.print(f"load average at end {os.getloadavg()[0]:.2f}")
    print(f"result: rollout_speedup={rows[3].tokens_per_s / baseline:.2f} (target >= 4)")


if __name__ == "__main__":
    main()
