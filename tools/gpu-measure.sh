#!/usr/bin/env bash
# tools/gpu-measure.sh: one lease's measurements of issues 31 and 32 on a lent GPU machine, from what
# tools/gpu-pack.sh packed; each step within a time budget, everything side by side in one sitting.
# Usage (on the GPU machine, through the device tool with carry [PACK]): bash tools/gpu-measure.sh PACK SECONDS [STEPS]
#   PACK     the folder gpu-pack.sh filled (default .gpu)
#   SECONDS  the budget: a step starts only while half its own limit is left (default 400)
#   STEPS    comma-separated subset, in this order (default all): tests, gpt2 (llm.c and mptrain at batch 8 and 32,
#            eager and CUDA graph, PyTorch AMP's FP32 stream and gradients and llm.c's BF16 ones), kernels (--kernel-times of GPT-2 bf16 and 1.3B fp8-delayed), fp8 (bench_fp8 and
#            the 124M / 350M / 1.3B shapes in every recipe), baseline (the packed baseline's bench_train and
#            bench_fp8 beside the new ones), converge (issue 32's loss target: train_gpt at GPT-2 124M's shape on
#            tinyshakespeare, BF16 against each FP8 recipe with every layer FP8, final validation losses compared),
#            llama (Llama and GPT at vocabulary 32000), torch (compare_pytorch.py with torch.compile)
# Output: $OUT/log.txt (everything printed) and $OUT/results.tgz (every JSON); without $OUT, ./gpu-measure-out.
set -u
pack=${1:-.gpu} budget=${2:-400} steps=${3:-tests,gpt2,kernels,fp8,baseline,converge,llama,torch}
out=${OUT:-$PWD/gpu-measure-out}
mkdir -p "$out"
t0=$SECONDS
res=$(mktemp -d) bin=$(mktemp -d) lib=$(mktemp -d)
exec > >(tee -a "$out/log.txt") 2>&1
unxz_to() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$1" "$2"; }
for f in "$pack"/bin/*.xz; do n=$(basename "$f" .xz); unxz_to "$f" "$bin/$n"; chmod +x "$bin/$n"; done
for f in "$pack"/lib/*.xz; do unxz_to "$f" "$lib/$(basename "$f" .xz)"; done
# cuDNN's fused attention needs 9.16 or newer: torch's wheel brings one, put first.
site=$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null || true)
export LD_LIBRARY_PATH="$lib${site:+:$site/nvidia/cudnn/lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for l in $(ldd "$bin"/* 2>/dev/null | awk '/not found/ {print $1}' | sort -u); do
  d=$(find /usr/local /usr/lib /opt $site -name "$l" 2>/dev/null | head -n 1 | xargs -r dirname)
  [ -n "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
echo "gpu-measure: packed at $(cat "$pack/commit" 2>/dev/null || echo '?'); libraries still missing:" \
     "$(ldd "$bin"/* 2>/dev/null | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')"
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())' || true

wanted() { [[ ",$steps," == *",$1,"* ]]; }
# step NAME LIMIT CMD...: runs CMD within LIMIT seconds when at least half of LIMIT is left of the budget.
step() {
  local name=$1 limit=$2; shift 2
  local left=$((budget - (SECONDS - t0)))
  if [ "$left" -lt $((limit / 2)) ]; then echo "== $name SKIPPED (budget: $left s left)"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit $limit s, at $((SECONDS - t0)) s): $*"
  local s=$SECONDS
  timeout -k 5 "$limit" "$@"
  echo "== $name rc=$? in $((SECONDS - s)) s"
}
bt=$bin/bench_train old=$bin/bench_train_old
gpt2="--device cuda --layers 12 --heads 12 --embd 768 --seq 1024 --vocab 50257"
m350="--device cuda --layers 24 --heads 16 --embd 1024 --seq 1024 --vocab 50257 --batch 8"
m13="--device cuda --layers 24 --heads 16 --embd 2048 --seq 1024 --vocab 50257 --batch 8"
# llm.c's run at a batch size, then the lines where it reports its memory.
llmc_cmd() { echo "bash '$pack/llmc/run-llmc.sh' $1 30; grep -iE 'allocat|memory' /tmp/llmc-run/log | head -n 8"; }

wanted tests && step test_gpu 150 "$bin/test_gpu" --gtest_brief=1
if wanted gpt2; then
  [ -d "$pack/llmc" ] && step llmc-b8 60 bash -c "$(llmc_cmd 8)"
  step mptrain-b8 60 "$bt" $gpt2 --batch 8 --precision bf16 --warmup 3 --steps 10 --cuda-graph --json "$res/gpt2-b8-bf16.json"
  [ -d "$pack/llmc" ] && step llmc-b32 60 bash -c "$(llmc_cmd 32)"
  step mptrain-b32 60 "$bt" $gpt2 --batch 32 --precision bf16 --warmup 2 --steps 6 --cuda-graph --json "$res/gpt2-b32-bf16.json"
  # llm.c's own regime: the residual stream and the masters' gradients in BF16 (docs/numerics.md, "The residual
  # stream", "BF16 gradients").
  step mptrain-b8-llmc-regime 60 "$bt" $gpt2 --batch 8 --precision bf16 --residual bf16 --grads bf16 --warmup 3 \
    --steps 10 --cuda-graph --json "$res/gpt2-b8-llmc-regime.json"
  step mptrain-b32-llmc-regime 60 "$bt" $gpt2 --batch 32 --precision bf16 --residual bf16 --grads bf16 --warmup 2 \
    --steps 6 --cuda-graph --json "$res/gpt2-b32-llmc-regime.json"
fi
if wanted kernels; then
  step kernels-gpt2-bf16 60 "$bt" $gpt2 --batch 8 --precision bf16 --warmup 3 --steps 3 --kernel-times 50 --profile 30 \
    --json "$res/kernels-gpt2-bf16.json"
  step kernels-1.3b-fp8d 90 "$bt" $m13 --precision fp8-delayed --warmup 2 --steps 3 --kernel-times 50 --profile 30 \
    --json "$res/kernels-1.3b-fp8d.json"
fi
if wanted fp8; then
  # This GPU's calibration of the per-shape FP8 rule (docs/fp8.md, "Which layers run FP8"), used by the auto runs.
  # --sweep: GPT's Linear shapes at widths 768 / 1024 / 2048 timed per recipe beside the rule's predictions.
  step bench-fp8 60 "$bin/bench_fp8" --device cuda --tokens 8192 --in 2048 --out 8192 --reps 10 --json "$res/bench_fp8.json" \
    --calibration "$res/fp8-calibration.json" --sweep
  cal=""; [ -f "$res/fp8-calibration.json" ] && cal="--fp8-calibration $res/fp8-calibration.json"
  step 1.3b-bf16 60 "$bt" $m13 --precision bf16 --warmup 2 --steps 5 --json "$res/1.3b-bf16.json"
  step 1.3b-fp8-delayed-all 60 "$bt" $m13 --precision fp8-delayed --fp8-layers all --warmup 2 --steps 5 \
    --json "$res/1.3b-fp8-delayed-all.json"
  for p in fp8-delayed fp8-current fp8-block; do
    step "1.3b-$p-auto" 60 "$bt" $m13 --precision $p $cal --warmup 2 --steps 5 --json "$res/1.3b-$p-auto.json"
  done
  for p in bf16 fp8-delayed; do  # both sides with the BF16 residual stream and BF16 gradients
    step "1.3b-$p-bf16-stream" 60 "$bt" $m13 --precision $p $cal --residual bf16 --grads bf16 --warmup 2 --steps 5 \
      --json "$res/1.3b-$p-bf16-stream.json"
  done
  for n in bf16 fp8-delayed-all fp8-delayed-auto; do
    case $n in
      bf16) p="--precision bf16" ;;
      fp8-delayed-all) p="--precision fp8-delayed --fp8-layers all" ;;
      fp8-delayed-auto) p="--precision fp8-delayed $cal" ;;
    esac
    step "350m-$n" 40 "$bt" $m350 $p --warmup 2 --steps 5 --json "$res/350m-$n.json"
    step "124m-$n" 40 "$bt" $gpt2 --batch 8 $p --warmup 3 --steps 10 --json "$res/124m-$n.json"
  done
fi
if wanted baseline && [ -x "$old" ]; then
  step baseline-bench-fp8 40 "$bin/bench_fp8_old" --device cuda --tokens 8192 --in 2048 --out 8192 --reps 10 \
    --json "$res/baseline-bench_fp8.json"
  # The baseline's kernel times beside kernels-gpt2-bf16's: a kernel that changed, timed old against new.
  step baseline-kernels-gpt2-bf16 60 "$old" $gpt2 --batch 8 --precision bf16 --warmup 3 --steps 3 --kernel-times 50 \
    --json "$res/baseline-kernels-gpt2-bf16.json"
  for p in bf16 fp8-delayed; do
    step "baseline-1.3b-$p" 60 "$old" $m13 --precision $p --warmup 2 --steps 5 --json "$res/baseline-1.3b-$p.json"
    step "baseline-124m-$p" 40 "$old" $gpt2 --batch 8 --precision $p --warmup 3 --steps 10 \
      --json "$res/baseline-124m-$p.json"
  done
fi
if wanted converge; then
  # Issue 32: FP8's final validation loss within 0.5% of BF16's, same seed, data and schedule (a char-level GPT-2
  # 124M shape, 300 steps of 8 x 1024 tokens; every layer FP8 but the first and last blocks and the head: at this
  # width the per-shape rule would run them all in BF16).
  conv="--preset gpt2 --tokenizer char --steps 300 --lr 6e-4 --min-lr 6e-5 --seed 1337"
  conv="$conv --eval-every 0 --eval-batches 20 --log-every 50"
  for p in bf16 fp8-delayed fp8-current fp8-block; do
    fl=""; [ "$p" != bf16 ] && fl="--fp8-layers all"
    step "converge-$p" 60 "$bin/train_gpt" $conv --precision $p $fl --log-json "$res/converge-$p.jsonl"
  done
  python3 - "$res" <<'PY' || true
import json, pathlib, sys
final = {}
for f in sorted(pathlib.Path(sys.argv[1]).glob("converge-*.jsonl")):
    for line in f.read_text().splitlines():
        r = json.loads(line)
        if r.get("final"):
            final[r["precision"]] = r
base = final.get("bf16")
for p, r in final.items():
    rel = f", {100 * (r['val_loss'] / base['val_loss'] - 1):+.3f}% vs bf16" if base else ""
    print(f"converge {p}: final val loss {r['val_loss']:.4f}{rel}, {r['tokens_per_s']:.0f} tok/s, {r['steps']} steps")
PY
fi
if wanted llama; then
  v32="--device cuda --layers 12 --heads 12 --embd 768 --seq 1024 --vocab 32000 --batch 8 --precision bf16"
  step llama-bf16 40 "$bt" --model llama --kv-heads 4 $v32 --warmup 3 --steps 10 --json "$res/llama-v32k-bf16.json"
  step gpt-v32k-bf16 40 "$bt" $v32 --warmup 3 --steps 10 --json "$res/gpt-v32k-bf16.json"
fi
if wanted torch; then
  step torch-compile 180 python3 benchmarks/compare_pytorch.py --device cuda --bench "$bt" --models gpt2 --precisions bf16 \
    --compile --reps 1 --warmup 2 --steps 5 --timeout 170 --json "$res/compare_pytorch.json"
fi
tar -czf "$out/results.tgz" -C "$res" .
rm -rf "$res" "$bin" "$lib"
echo "gpu-measure: done at $((SECONDS - t0)) s: $out/log.txt, $out/results.tgz"
