"""A runs row whose `model` is not a workload id: matched to the catalogue by name or by its
architecture columns, so that structure the columns cannot state (head width, local attention)
is not silently dropped."""

from __future__ import annotations

import csv

import pytest

from perfmodel.cli import main
from perfmodel.validation.match import by_name
from perfmodel.validation.runs import COLUMNS as CONTRACT
from perfmodel.validation.runs import OPTIONAL_COLUMNS, RowError, row_run
from perfmodel.workload.catalog import load_workloads

COLUMNS = CONTRACT + OPTIONAL_COLUMNS
# Qwen3-30B-A3B as Megatron-Bridge's performance tables give it: 32 heads on hidden 2048, the
# dense intermediate_size 6144 that no layer uses; the heads are 128 wide in config.json
QWEN_COLUMNS = {"arch": "moe", "n_layers": "48", "hidden": "2048", "ffn_hidden": "6144", "n_heads": "32",
                "n_kv_heads": "4", "vocab": "151936", "n_experts": "128", "top_k": "8", "moe_ffn_hidden": "768"}
LAYOUT = {"seq_len": "4096", "global_batch": "512", "micro_batch": "1", "ep": "8", "n_gpus": "8",
          "precision": "bf16", "accelerator": "h100-sxm5-80gb"}


def _run(**cells: str):
    row = {c: "" for c in COLUMNS} | {"run_id": "r"} | LAYOUT | cells
    return row_run(row, load_workloads())


def test_name_matches_up_to_case_separators_and_org():
    for name in ("Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B", "qwen3_30b_a3b"):
        run = _run(model=name)
        assert run.spec.id == "qwen3-30b-a3b"
        assert f"model '{name}' read as workload qwen3-30b-a3b" in run.notes


@pytest.mark.parametrize("name, workload", [
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama3.1-8b"), ("Llama-3-70B", "llama3-70b"),
    ("llama2-7b-hf", "llama2-7b"), ("mistralai/Mixtral-8x22B-Instruct-v0.1", "mixtral-8x22b"),
    ("deepseek-ai/DeepSeek-V3-Base", "deepseek-v3"), ("Qwen/Qwen3-235B-A22B-Instruct-2507", "qwen3-235b-a22b"),
    ("GPT-3 175B", "gpt3-175b"), ("DeepSeekV3", "deepseek-v3"),  # Megatron-Bridge's table heading
    # two ids of one network (Llama 3.1 405B is also kept as llama3-405b): either is the answer
    ("Llama 3.1 405B", "llama3-405b"),
    # the publisher's own prefix and a checkpoint's weight format or trained context name the network
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nemotron3-nano"), ("NVIDIA-Nemotron-3-Super-120B-A12B", "nemotron3-super"),
    ("nvidia/Nemotron-H-56B-Base-8K", "nemotron-h-56b"), ("Qwen/Qwen3-30B-A3B-FP8", "qwen3-30b-a3b"),
    ("Nemotron_3_Nano", "nemotron3-nano"), ("Nemotron_3_5_Lightning", "nemotron3.5-lightning"),  # Megatron-Bridge's headings
])
def test_checkpoint_names_find_their_architecture(name, workload):
    assert by_name(name, load_workloads()).id == workload


# a bare version is part of the network's name: DeepSeek-V2 (236B, 160 experts) was once read as V3
@pytest.mark.parametrize("name, workload", [
    ("GPT-2 XL", "gpt2-1558m"), ("openai-community/gpt2-medium", "gpt2-350m"), ("gpt2", "gpt2-124m"),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4-scout"), ("bigscience/bloom", "bloom-176b"),
    ("GPT-3 XL", "gpt3-1.3b"), ("MT-NLG 530B", "megatron-530b"), ("DeepSeek V3 671B", "deepseek-v3"),
    # a table's bracketed note names the run, not the network
    ("Llama3 8B (FP8)", "llama3-8b"), ("Qwen3-30B-A3B [MXFP8]", "qwen3-30b-a3b"),
    # ... unless the bracket holds the size: only then are its words read
    ("GPT-3 (175B)", "gpt3-175b"), ("Llama 3 (70B)", "llama3-70b"),
    # models added 2026-12-07 and an alias of one network
    ("Qwen/Qwen2.5-72B", "qwen2.5-72b"), ("Qwen3-32B", "qwen3-32b"), ("mistralai/Mistral-7B-v0.1", "mistral-7b"),
    ("meta-llama/Llama-3.3-70B-Instruct", "llama3.1-70b"),
])
def test_published_names_of_a_workload_find_it(name, workload):
    """A workload's `aliases` (its Hugging Face repository, a paper's size name)."""
    assert by_name(name, load_workloads()).id == workload


def test_every_alias_reads_as_its_own_workload():
    workloads = load_workloads()
    aliased = [(a, s.id) for s in workloads.values() for a in s.aliases]
    assert len(aliased) >= 12
    for alias, wid in aliased:
        assert by_name(alias, workloads).id == wid, alias


@pytest.mark.parametrize("name", ["gpt-l24-h1024", "bert-large-uncased", "llama3-9b", "bloom-prequel-l72-h14336",
                                  "DeepSeek-V1", "Qwen/Qwen3-Next-80B-A3B", "GPT-3 (13.7B)",
                                  # a dotted version is a network of its own (V3.2 adds sparse attention to
                                  # V3): it used to read as 'DeepSeek' and match DeepSeek-V2.5's alias
                                  "deepseek-ai/DeepSeek-V3.2", "DeepSeek-V3.2-Exp"])
def test_names_of_no_workload_match_none(name):
    assert by_name(name, load_workloads()) is None


@pytest.mark.parametrize(("name", "wid"), [("DeepSeekV3 (w/o MTP)", "deepseek-v3"), ("Qwen3_30B_a3B (tokendrop)", "qwen3-30b-a3b"),
                                           ("mistralai/Mixtral-8x22B-Instruct-v0.1", "mixtral-8x22b"),
                                           # MLPerf Training's benchmark names
                                           ("llama31_405b", "llama3.1-405b"), ("llama31_8b", "llama3.1-8b"),
                                           # V3.1 is V3's network with a longer context (its model card)
                                           ("deepseek-ai/DeepSeek-V3.1-Terminus", "deepseek-v3")])
def test_a_note_with_a_slash_is_no_org_prefix(name, wid):
    """Megatron-Bridge's 25.11 table names 'DeepSeekV3 (w/o MTP)': the bracket goes before the org
    prefix is cut (it was read as the org 'DeepSeekV3 (w' and matched nothing); a v0.x revision
    is still a checkpoint suffix."""
    assert by_name(name, load_workloads()).id == wid


@pytest.mark.parametrize(("name", "wid"), [("DeepSeek-V2", "deepseek-v2"), ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),
                                           ("deepseek-ai/DeepSeek-R1", "deepseek-v3"), ("databricks/dbrx-base", "dbrx"),
                                           ("google/gemma-2-9b", "gemma-2-9b"), ("Qwen/Qwen2-57B-A14B", "qwen2-57b-a14b"),
                                           ("deepseek-ai/DeepSeek-V2.5", "deepseek-v2"), ("zai-org/GLM-4.5-Air", "glm-4.5-air"),
                                           ("zai-org/GLM-4.6", "glm-4.5")])
def test_a_bare_version_names_its_own_network(name, wid):
    """DeepSeek-V2 is not V3: a bare V-number is part of the network's name, not a checkpoint suffix."""
    assert by_name(name, load_workloads()).id == wid


def test_columns_of_a_published_model_take_its_head_width():
    run = _run(model="Qwen3-30B-A3B-Base-custom", **QWEN_COLUMNS)
    assert run.spec.id == "qwen3-30b-a3b" and run.spec.dhead == 128
    assert run.spec.seq_len == 4096
    assert any("match workload qwen3-30b-a3b: used its head_dim 128" in n for n in run.notes)


def test_a_stated_head_width_keeps_the_columns_model():
    # head_dim 64 contradicts the published 128: the row means another model, built from its columns
    run = _run(head_dim="64", **QWEN_COLUMNS)
    assert run.spec.id == "row-r" and run.spec.dhead == 64
    assert not any("match workload" in n for n in run.notes)


def test_local_attention_is_taken_from_the_published_config():
    cols = {"arch": "moe", "n_layers": "36", "hidden": "2880", "ffn_hidden": "2880", "n_heads": "64", "n_kv_heads": "8",
            "vocab": "201088", "n_experts": "128", "top_k": "4", "moe_ffn_hidden": "2880"}
    spec = _run(**cols).spec
    assert spec.id == "gpt-oss-120b"
    assert (spec.sliding_window, spec.global_every, spec.dhead) == (128, 2, 64)


@pytest.mark.parametrize("drop", ["vocab", "n_heads"])
def test_too_few_columns_identify_nothing(drop):
    cells = {k: v for k, v in QWEN_COLUMNS.items() if k != drop}
    run = _run(**cells)
    assert run.spec.id == "row-r"
    assert not any("match workload" in n for n in run.notes)


def test_columns_that_say_everything_keep_their_model():
    # Llama-3-8B's columns state the whole model, so nothing is substituted (and Llama 3 and 3.1
    # share them: two matches would be ambiguous anyway)
    cols = {"arch": "llama", "n_layers": "32", "hidden": "4096", "ffn_hidden": "14336", "n_heads": "32",
            "n_kv_heads": "8", "vocab": "128256"}
    run = _run(**cols, ep="1")
    assert run.spec.id == "row-r"


def test_the_published_width_costs_more_attention_time(tmp_path):
    """Through the CLI: the matched row predicts a longer step than the same row held to
    head_dim 64 (attention 2048 wide instead of 4096), and its message names the match."""
    runs, out = tmp_path / "runs.csv", tmp_path / "pred.csv"
    rows = [{"run_id": "matched"} | LAYOUT | QWEN_COLUMNS, {"run_id": "narrow", "head_dim": "64"} | LAYOUT | QWEN_COLUMNS]
    with open(runs, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({c: "" for c in COLUMNS} | r)
    assert main(["validate", "--runs", str(runs), "--out", str(out), "--calibration", "none"]) == 0
    with open(out, newline="") as f:
        got = {r["run_id"]: r for r in csv.DictReader(f)}
    assert "match workload qwen3-30b-a3b" in got["matched"]["message"]
    wide, narrow = (float(got[k]["predicted_step_time_s"]) for k in ("matched", "narrow"))
    assert wide > 1.05 * narrow


@pytest.mark.parametrize("col, written, field, value", [
    ("recompute", "Full", "recompute", "full"), ("recompute", "uniform", "recompute", "full"),
    ("recompute", "false", "recompute", "none"), ("zero_stage", "FULL_SHARD", "zero_stage", 3),
    ("zero_stage", "ZeRO-1", "zero_stage", 1), ("zero_stage", "2.0", "zero_stage", 2),
    ("sequence_parallel", "on", "sequence_parallel", True),
    ("recompute", "full AC", "recompute", "full"), ("recompute", "activation checkpointing", "recompute", "full"),
    ("recompute", "per-op SAC", "recompute", "selective"), ("recompute", "selective (attention)", "recompute", "selective"),
])
def test_enumerated_columns_read_as_stacks_write_them(col, written, field, value):
    run = _run(**({"model": "llama3-8b", "tp": "2", "ep": "1"} | {col: written}))
    assert getattr(run.plan, field) == value


@pytest.mark.parametrize("col, written", [("recompute", "true"), ("recompute", "some"), ("zero_stage", "2.5"),
                                          ("sequence_parallel", "maybe")])
def test_ambiguous_or_unknown_spellings_are_errors(col, written):
    # "true" is not read for recompute: Megatron-LM's --recompute-activations is selective, Hugging Face's full
    with pytest.raises(RowError, match=f"column {col} '{written}'; allowed values: "):
        _run(**({"model": "llama3-8b", "tp": "2", "ep": "1"} | {col: written}))


def test_a_bare_yes_for_recompute_says_why_it_is_refused():
    with pytest.raises(RowError, match=r"column recompute 'Yes'.*ambiguous.*selective.*full: write which"):
        _run(model="llama3-8b", tp="2", ep="1", recompute="Yes")


def test_the_optional_schedule_column_sets_the_pipeline_schedule():
    """A row may say which pipeline schedule ran (DeepSeek-V3: DualPipe); empty keeps the plan's
    default, an unknown name or one the layout cannot run is the row's error."""
    base = {"model": "llama3-8b", "tp": "1", "ep": "1", "pp": "4", "dp": "2", "n_gpus": "8", "global_batch": "16"}
    run = _run(**(base | {"schedule": "DualPipe"}))
    assert run.plan.schedule_name == "dualpipe"
    zb = _run(**(base | {"schedule": "zero bubble"}))
    assert zb.plan.schedule_name == "zb-h1" and "schedule 'zero bubble' read as zb-h1" in zb.notes
    assert _run(**base).plan.schedule_name == "1f1b"
    with pytest.raises(RowError, match="column schedule 'chimera'; allowed values: 1f1b, interleaved"):
        _run(**(base | {"schedule": "chimera"}))
    with pytest.raises(RowError, match="dualpipe' needs an even pp"):
        _run(**(base | {"schedule": "dualpipe", "global_batch": "6"}))


def test_the_optional_attention_column_names_the_kernel_that_ran():
    """A row may say which attention kernel ran (Hugging Face's attn_implementation names read as
    the kernel they load); it outranks the row's framework, empty keeps the framework's, and a
    FlashAttention generation the chip's generation never measured is the row's error, not a rate
    borrowed from another kernel."""
    from perfmodel.calibration.profile import load_profile
    from perfmodel.validation.predict import predict_row

    base = {"model": "llama3-8b", "tp": "1", "ep": "1", "n_gpus": "8", "global_batch": "8", "seq_len": "8192",
            "accelerator": "h200-sxm-141gb", "framework": "deepspeed", "step_time_s": "1"}
    fa3 = _run(**(base | {"attention": "flash_attention_3"}))
    assert fa3.plan.attention_impl == "flash3"
    assert "attention 'flash_attention_3' read as flash3" in fa3.notes
    assert "attention_impl" not in _run(**base).plan.model_fields_set
    with pytest.raises(RowError, match="column attention 'sdpa'; allowed values: flash, flash3, flash4, fused, flash1"):
        _run(**(base | {"attention": "sdpa"}))
    row = {c: "" for c in COLUMNS} | {"run_id": "r"} | LAYOUT | base
    wl, physics = load_workloads(), load_profile("none")
    stack, named = (predict_row(row | {"attention": a}, wl, "analytic", None, physics) for a in ("", "FA3"))
    assert stack["status"] == named["status"] == "ok"
    # one 8k sequence per GPU, 32 layers of causal attention on hidden 4096: 3.5 x 2 s^2 h = 1.924
    # TFLOP a layer fwd+bwd, at H100's curve (H200 reads it): FA2 308, FA3 3.5 / (1/638.6 + 2.5/561.4)
    # x 602/646 = 541.9 TFLOP/s, on the slowest of the 8 GPUs (1 + 0.013 x 1.4342, hardware/variability.py);
    # nothing else in the step changes
    from perfmodel.hardware.variability import SPEED_SPREAD, slowest_unit_factor

    flop = 32 * 3.5 * 2 * 8192**2 * 4096
    fa3_rate = 3.5 / (1 / 638.6e12 + 2.5 / 561.4e12) * 602 / 646
    saved = float(stack["predicted_step_time_s"]) - float(named["predicted_step_time_s"])
    assert saved == pytest.approx((flop / 308e12 - flop / fa3_rate) * slowest_unit_factor(SPEED_SPREAD, 8), rel=2e-3)
    a100 = predict_row(row | {"attention": "flash3", "accelerator": "a100-sxm4-80gb"}, wl, "analytic", None, physics)
    assert a100["status"] == "error"
    assert "attention flash3: no flash3 rate is measured on NVIDIA A100" in a100["message"]


def test_the_optional_optimizer_column_sets_the_optimizer():
    """A row may say which optimizer ran (Megatron-Bridge's Kimi-K2 rows: Muon); AdamW reads as adam
    (same state and step), empty keeps adam, an unknown one is the row's error."""
    base = {"model": "llama3-8b", "tp": "1", "ep": "1", "n_gpus": "8", "global_batch": "8"}
    assert _run(**(base | {"optimizer": "Muon"})).plan.optimizer == "muon"
    adamw = _run(**(base | {"optimizer": "AdamW"}))
    assert adamw.plan.optimizer == "adam" and "optimizer 'AdamW' read as adam" in adamw.notes
    assert _run(**base).plan.optimizer == "adam"
    with pytest.raises(RowError, match="column optimizer 'lion'; allowed values: adam, adamw-bf16, adam8bit, sgd"):
        _run(**(base | {"optimizer": "lion"}))
