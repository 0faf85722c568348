"""The `step` section of a measure_gpu.py JSON as rows of the runs-file format (docs/VALIDATION.md).

    python validation/device/to_runs.py validation/device/h200-2026-12-04/gpu_measurements.json \
        --accelerator h200-sxm-141gb > validation/runs_h200_measured.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

HEADER = Path(__file__).resolve().parents[1] / "runs_public.csv"

NOTES = ("step_time_s = median of 5 timed steps after 3 warm-ups (CUDA events) of measure_gpu.py's SmallLM: "
         "{acc} micro-batches of {mb} x {seq} tokens under torch.autocast(bf16) with fp32 parameters, "
         "loss = cross_entropy(logits.float()), then fused AdamW and zero_grad; "
         "one GPU, no data loader, random token ids; {arch}; "
         "torch {torch}, eager (no torch.compile); framework left empty: torch's own fused "
         "LayerNorm / RMSNorm kernels and one-kernel GELU, not a Hugging Face model's eager chains")
ARCH = {"gpt": "GPT style: LayerNorm, GELU MLP 4h, learned positions, tied embeddings, biases",
        "llama": "Llama style: RMSNorm, GQA, SwiGLU as silu(u[:f]) * u[f:] (two kernels), no positional "
                 "encoding (the SmallLM has no RoPE), untied head, no biases"}


def rows(meas: dict, accelerator: str, date: str) -> list[dict[str, object]]:
    torch_version = meas["meta"][0]["torch"]
    out = []
    for r in meas["step"]:
        acc_steps = r["global_batch"] // r["micro_batch"]
        out.append(dict(
            run_id=f"{accelerator.split('-')[0]}-measured-{r['name']}", source=f"perfmodel device measurement {date}",
            source_detail=f"validation/device/{accelerator.split('-')[0]}-{date}/gpu_measurements.json, "
                          "section step (validation/device/measure_gpu.py)",
            model=r["name"], arch=r["arch"], n_layers=r["n_layers"], hidden=r["hidden"], ffn_hidden=r["ffn_hidden"],
            n_heads=r["n_heads"], n_kv_heads=r["n_kv_heads"], vocab=r["vocab"], seq_len=r["seq_len"],
            global_batch=r["global_batch"], micro_batch=r["micro_batch"], tp=1, pp=1, dp=1, cp=1, ep=1, vp=1,
            zero_stage=0, recompute="none", precision="bf16", accelerator=accelerator, n_gpus=1, gpus_per_node=1,
            step_time_s=f"{r['step_seconds']:.6g}", tokens_per_s=f"{r['tokens_per_s']:.6g}",
            notes=NOTES.format(acc=acc_steps, mb=r["micro_batch"], seq=r["seq_len"], arch=ARCH[r["arch"]],
                               torch=torch_version)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json")
    ap.add_argument("--accelerator", required=True, help="hardware_specs/accelerators id of the part measured")
    a = ap.parse_args()
    meas = json.loads(Path(a.json).read_text())
    date = meas["meta"][0]["time_utc"][:10]
    fields = HEADER.read_text().splitlines()[0].split(",")
    w = csv.DictWriter(sys.stdout, fieldnames=fields, restval="", lineterminator="\n")
    w.writeheader()
    w.writerows(rows(meas, a.accelerator, date))
    return 0


if __name__ == "__main__":
    sys.exit(main())
