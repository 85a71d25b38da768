#!/usr/bin/env python3
"""Integration benchmark: lexguide inside vLLM and transformers.

vLLM (CPU, SmolLM2 converted from its GGUF): the same chat prompts and JSON Schemas
(``tests/integration_helpers.py``: four prompts, four schemas, repeated) generated with
lexguide's logits processor and with vLLM's own structured-output backends, xgrammar and
guidance (llguidance), in one run. A vLLM engine has one backend, so two engines are started
(backend xgrammar, then guidance), each also loaded with lexguide's processor; lexguide runs
on both and the rounds alternate (lexguide, peer, lexguide, peer, ...), so each ratio compares
batches run minutes apart at most. Per backend: output tokens/s of the whole batch (wall
time of ``LLM.chat``), the share of outputs that parse as JSON and validate
(``jsonschema``), and the constraint work per engine step (wall and CPU ms: lexguide's
processor, or vLLM's ``grammar_bitmask`` + ``accept_tokens`` + ``apply_grammar_bitmask``),
which the model's forward pass does not blur. Unconstrained generation of the same batch is
the reference.

transformers (SmolLM2 from the same folder): ms per generated token of ``model.generate``
with lexguide's ``LogitsProcessor`` and without any, and the processor's own time per call,
for batches of 1 and 4 (1 and 2, 8 tokens, with ``--quick``).

    python bench/integrations.py --quick                # 4 requests, 1 round, xgrammar only
    python bench/integrations.py                        # 8 requests x 2 rounds, both peers
    python bench/integrations.py --part transformers    # or --part vllm

The vLLM part runs in the interpreter given by ``--vllm-python`` (default:
``$LEXGUIDE_VLLM_PYTHON``, else ``~/.cache/lexguide/vllm-venv/bin/python`` when it exists, else
this one); it is skipped, with a note, when that interpreter cannot import vllm. Results go
to ``bench/results/integrations.json`` (``--json PATH``). The machine is shared: the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))
import _results  # noqa: E402
del sys.path[0]
# bench/jsonschema.py would shadow the jsonschema package: drop this folder from the path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent / "tests"))

from integration_helpers import PROMPTS_AND_SCHEMAS, default_cache_dir, hf_folder  # noqa: E402

RESULTS = _HERE / "results" / "integrations.json"
KV_BYTES = 256 << 20


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _folder() -> Path:
    from lexguide.model_files import smollm2_path

    return hf_folder(smollm2_path(), default_cache_dir())


# -- vLLM ----------------------------------------------------------------------------------------
def _valid(text: str, schema: dict) -> bool:
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


class _ConstraintClock:
    """Time spent in the constraint work of each engine step, by backend: lexguide's
    processor (``apply``: following the output, ``fill_masks``, masking the logits) and, for
    vLLM's own backends, the structured-output manager (``grammar_bitmask``, ``accept_tokens``)
    plus the runner's ``apply_grammar_bitmask``. Wall and CPU (``process_time``: the steps run
    one at a time, so it is this work's) seconds, and the steps that had constrained rows."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0
        self.steps = 0

    def reset(self) -> None:
        self.wall = self.cpu = 0.0
        self.steps = 0

    def wrap(self, fn, counts_step):
        def timed(*args, **kwargs):
            w, c = time.perf_counter(), time.process_time()
            result = fn(*args, **kwargs)
            self.wall += time.perf_counter() - w
            self.cpu += time.process_time() - c
            if counts_step(args, result):
                self.steps += 1
            return result
        return timed

    def install(self) -> None:
        import vllm.v1.worker.gpu_model_runner as runner
        from vllm.v1.structured_output import StructuredOutputManager

        from lexguide.integrations.vllm import LexguideLogitsProcessor

        def never(args, result):
            return False

        LexguideLogitsProcessor.apply = self.wrap(
            LexguideLogitsProcessor.apply, lambda args, result: bool(args[0]._requests))
        StructuredOutputManager.grammar_bitmask = self.wrap(
            StructuredOutputManager.grammar_bitmask, lambda args, result: result is not None)
        StructuredOutputManager.accept_tokens = self.wrap(
            StructuredOutputManager.accept_tokens, never)
        runner.apply_grammar_bitmask = self.wrap(runner.apply_grammar_bitmask, never)


_CLOCK = _ConstraintClock()


def _vllm_batch(llm, backend: str, n: int, max_tokens: int, seed: int) -> dict:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    cases = [PROMPTS_AND_SCHEMAS[i % len(PROMPTS_AND_SCHEMAS)] for i in range(n)]
    params = []
    for i, (_, schema) in enumerate(cases):
        kw = {"max_tokens": max_tokens, "temperature": 0.7, "seed": seed + i}
        if backend == "lexguide":
            kw["extra_args"] = {"lexguide": {"json_schema": schema}}
        elif backend != "none":
            kw["structured_outputs"] = StructuredOutputsParams(json=schema)
        params.append(SamplingParams(**kw))
    messages = [[{"role": "user", "content": q}] for q, _ in cases]
    _CLOCK.reset()
    t0 = time.perf_counter()
    outs = llm.chat(messages, params, use_tqdm=False)
    wall = time.perf_counter() - t0
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    valid = sum(_valid(o.outputs[0].text, s) for o, (_, s) in zip(outs, cases))
    return {"wall_s": wall, "tokens": tokens, "valid": valid, "requests": n,
            "constraint_s": _CLOCK.wall, "constraint_cpu_s": _CLOCK.cpu,
            "constrained_steps": _CLOCK.steps}


def _vllm_child(args: argparse.Namespace) -> None:
    """Runs inside the vLLM interpreter; writes its results as JSON to ``args.child``."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import vllm

    from lexguide.integrations.vllm import LexguideLogitsProcessor

    _CLOCK.install()
    folder = _folder()
    peers = ["xgrammar"] if args.quick else ["xgrammar", "guidance"]
    n, rounds, max_tokens = (4, 1, 48) if args.quick else (8, 2, 64)
    runs: dict[str, list[dict]] = {}
    starts = {}
    for peer in peers:
        t0 = time.perf_counter()
        llm = vllm.LLM(model=str(folder), dtype="float32", max_model_len=512, enforce_eager=True,
                       kv_cache_memory_bytes=KV_BYTES, seed=0,
                       logits_processors=[LexguideLogitsProcessor],
                       structured_outputs_config={"backend": peer})
        starts[peer] = time.perf_counter() - t0
        # warm-up: compiles every schema for both backends, touches the mask caches
        for backend in ("lexguide", peer, "none"):
            _vllm_batch(llm, backend, len(PROMPTS_AND_SCHEMAS), 8, 1000)
        for r in range(rounds):
            for backend in (["lexguide", peer, "none"] if r % 2 == 0 else [peer, "lexguide", "none"]):
                key = f"{backend}@{peer}" if backend in ("lexguide", "none") else backend
                runs.setdefault(key, []).append(_vllm_batch(llm, backend, n, max_tokens, 10 * r))
                print(f"  {key:<18} round {r + 1}: {runs[key][-1]}", file=sys.stderr, flush=True)
        del llm
    Path(args.child).write_text(json.dumps({
        "runs": runs, "start_s": starts, "requests": n, "rounds": rounds,
        "max_tokens": max_tokens, "vllm": vllm.__version__}))


def _vllm_python(arg: str | None) -> str:
    if arg:
        return arg
    env = os.environ.get("LEXGUIDE_VLLM_PYTHON")
    if env:
        return env
    cached = default_cache_dir() / "vllm-venv" / "bin" / "python"
    return str(cached) if cached.exists() else sys.executable


def _child_env(python: str, tmp: Path) -> dict[str, str]:
    """The environment of the vLLM part: when its interpreter has no lexguide, this one's
    sources and compiled core side by side on PYTHONPATH (as .ci/run does for the vLLM tier;
    the same Python version is needed)."""
    env = dict(os.environ)
    probe = subprocess.run([python, "-c", "import lexguide._core"], capture_output=True,
                           check=False)
    if probe.returncode == 0:
        return env
    import lexguide._core  # binds lexguide too

    farm = tmp / "path" / "lexguide"
    farm.mkdir(parents=True)
    for item in Path(lexguide.__file__).parent.iterdir():
        if not item.name.startswith("_core"):
            (farm / item.name).symlink_to(item)
    core = Path(lexguide._core.__file__)
    (farm / core.name).symlink_to(core)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(farm.parent), env.get("PYTHONPATH")]))
    return env


def _summarise_vllm(data: dict) -> list[str]:
    def total(key: str, field: str) -> float:
        return sum(r.get(field, 0) for r in data["runs"][key])

    def tps(key: str) -> float:
        return total(key, "tokens") / total(key, "wall_s")

    lines = [(f"vLLM {data['vllm']} (CPU, V1 runner), SmolLM2-135M float32: "
              f"{data['requests']} requests x {data['rounds']} rounds, max_tokens "
              f"{data['max_tokens']}, temperature 0.7"),
             (f"{'backend':<26}{'tokens/s':>10}{'valid':>8}{'vs peer':>9}{'vs none':>9}"
              f"{'constraint ms/step':>20}{'(CPU)':>8}{'share of wall':>15}")]
    for key in data["runs"]:
        if key.startswith("none"):
            continue
        peer = key.split("@")[1] if "@" in key else key
        vs_peer = f"{tps(key) / tps(peer):.2f}" if "@" in key else "1.00"
        valid = f"{int(total(key, 'valid'))}/{int(total(key, 'requests'))}"
        steps = max(1, total(key, "constrained_steps"))
        lines.append(f"{key:<26}{tps(key):>10.1f}{valid:>8}{vs_peer:>9}"
                     f"{tps(key) / tps(f'none@{peer}'):>9.2f}"
                     f"{1000 * total(key, 'constraint_s') / steps:>20.2f}"
                     f"{1000 * total(key, 'constraint_cpu_s') / steps:>8.2f}"
                     f"{total(key, 'constraint_s') / total(key, 'wall_s'):>15.1%}")
    for key in data["runs"]:
        if key.startswith("none"):
            lines.append(f"{key + ' (no schema)':<26}{tps(key):>10.1f}{'—':>8}{'':>9}{1:>9.2f}")
    lines.append("lexguide@X: lexguide's processor on the engine whose backend is X; 'vs peer' = "
                 "tokens/s over X's on that engine; constraint ms/step: the constraint work of a "
                 "step with constrained rows (lexguide: its processor's apply; X: vLLM's "
                 "grammar_bitmask + accept_tokens + apply_grammar_bitmask)")
    return lines


# -- transformers --------------------------------------------------------------------------------
def _transformers(args: argparse.Namespace) -> tuple[dict, list[str]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lexguide.integrations.transformers import LexguideLogitsProcessor

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    folder = _folder()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    new_tokens = 8 if args.quick else 64
    repeats = 1 if args.quick else 3
    out: dict[str, dict] = {}
    lines = [(f"transformers, SmolLM2-135M float32 on the CPU ({torch.get_num_threads()} "
              f"threads), {new_tokens} new tokens, greedy, best of {repeats}"),
             (f"{'batch':>6}{'ms/token plain':>16}{'ms/token lexguide':>19}"
              f"{'processor ms/call':>19}{'overhead':>10}")]
    for batch in (1, 2) if args.quick else (1, 4):
        cases = [PROMPTS_AND_SCHEMAS[i % len(PROMPTS_AND_SCHEMAS)] for i in range(batch)]
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                               add_generation_prompt=True) for q, _ in cases]
        enc = tokenizer(texts, return_tensors="pt", padding=True)
        best = {"plain": float("inf"), "lexguide": float("inf"), "proc": float("inf")}
        for _ in range(repeats):
            for kind in ("plain", "lexguide"):
                timer = [0.0, 0]
                processors = []
                if kind == "lexguide":
                    inner = LexguideLogitsProcessor(tokenizer, [s for _, s in cases])

                    def timed(ids, scores, inner=inner, timer=timer):
                        t = time.perf_counter()
                        result = inner(ids, scores)
                        timer[0] += time.perf_counter() - t
                        timer[1] += 1
                        return result
                    processors = [timed]
                # the same number of steps with and without the processor: EOS is not a stop
                t0 = time.perf_counter()
                with torch.no_grad():
                    model.generate(**enc, logits_processor=processors, max_new_tokens=new_tokens,
                                   min_new_tokens=new_tokens if kind == "plain" else 0,
                                   do_sample=False, pad_token_id=tokenizer.pad_token_id)
                wall = time.perf_counter() - t0
                steps = new_tokens if kind == "plain" else max(1, timer[1])
                best[kind] = min(best[kind], 1000 * wall / steps)
                if kind == "lexguide":
                    best["proc"] = min(best["proc"], 1000 * timer[0] / max(1, timer[1]))
        out[str(batch)] = best
        lines.append(f"{batch:>6}{best['plain']:>16.2f}{best['lexguide']:>19.2f}"
                     f"{best['proc']:>19.3f}{best['lexguide'] / best['plain']:>10.2f}")
    lines.append("the constrained runs stop at the end of the JSON; ms/token divides by the "
                 "steps taken")
    return out, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke-sized run")
    parser.add_argument("--part", choices=("all", "vllm", "transformers"), default="all")
    parser.add_argument("--vllm-python", help="interpreter with vllm installed")
    parser.add_argument("--torch-threads", type=int, default=0,
                        help="torch threads of the transformers part (default: torch's choice)")
    parser.add_argument("--json", type=Path, default=RESULTS, help=f"results file ({RESULTS})")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # the vLLM part's output file
    _results.add_argument(parser)
    args = parser.parse_args()
    if args.child:
        _vllm_child(args)
        return
    print(_load(), flush=True)
    results: dict = {"quick": args.quick}
    tables: list[str] = []
    if args.part in ("all", "vllm"):
        python = _vllm_python(args.vllm_python)
        probe = subprocess.run([python, "-c", "import vllm"], capture_output=True, check=False)
        if probe.returncode != 0:
            tables += [f"vLLM: skipped ({python} cannot import vllm; see docs/integrations.md)"]
        else:
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "vllm.json"
                cmd = [python, str(Path(__file__).resolve()), "--child", str(out)]
                child = subprocess.run(cmd + ["--quick"] * args.quick, check=False,
                                       env=_child_env(python, Path(tmp)))
                if child.returncode != 0 or not out.exists():
                    raise SystemExit(f"the vLLM part failed (exit {child.returncode})")
                data = json.loads(out.read_text())
            results["vllm"] = data
            tables += _summarise_vllm(data)
    if args.part in ("all", "transformers"):
        data, lines = _transformers(args)
        results["transformers"] = data
        tables += [""] + lines if tables else lines
    print("\n".join(tables))
    print(_load())
    _results.write(__file__, "\n".join(tables), quick=args.quick, results=args.results,
                   variant=None if args.part == "all" else args.part, preformatted=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
