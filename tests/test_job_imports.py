"""Megatron argument lists and torchtitan TOML files (tests/data/megatron, tests/data/torchtitan,
written from the published Megatron-LM examples and torchtitan train_configs) give the model and
the layout they state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.errors import SpecError
from perfmodel.workload.catalog import get_workload
from perfmodel.workload.hf_config import param_counts
from perfmodel.workload.megatron_args import load_megatron_args_file, moe_layer_pattern, parse_megatron_args
from perfmodel.workload.torchtitan_config import load_torchtitan

DATA = Path(__file__).parent / "data"
MEG, TT = DATA / "megatron", DATA / "torchtitan"


def test_megatron_gpt3_175b_example() -> None:
    job = load_megatron_args_file(MEG / "gpt3-175b.args")
    s = job.spec
    # GPT2BPETokenizer 50257 padded to a multiple of 128 x tp 8 = 1024 -> 51200 (Megatron's padding)
    assert (s.num_layers, s.hidden, s.num_heads, s.ffn_hidden, s.vocab, s.seq_len) == (96, 12288, 96, 4 * 12288, 51200, 2048)
    assert (s.activation, s.norm, s.position, s.tied_embeddings, s.bias) == ("gelu", "layernorm", "learned", True, True)
    lay = job.layout
    assert (lay["tp"], lay["pp"], lay["micro_batch"], lay["global_batch"], lay["precision"]) == (8, 16, 1, 1536, "fp16")
    total, _ = param_counts(s)
    assert total == pytest.approx(175e9, rel=0.01)
    assert "--lr" in job.ignored and "--train-iters" in job.ignored


def test_megatron_mixtral_example_is_the_catalogue_mixtral() -> None:
    job = load_megatron_args_file(MEG / "mixtral-8x7b.args")
    assert param_counts(job.spec) == param_counts(get_workload("mixtral-8x7b"))
    lay = job.layout
    # --sequence-parallel with tp 1 is dropped, as Megatron does; the distributed optimizer is ZeRO-1
    assert (lay["tp"], lay["pp"], lay["ep"], lay["sp"], lay["zero"], lay["global_batch"]) == (1, 4, 8, False, 1, 256)


def test_megatron_moe_latent_size_is_read() -> None:
    """--moe-latent-size (Nemotron 3 Super's release config) puts the routed experts at the latent
    width instead of being ignored (which would size them at the hidden width)."""
    base = ("--num-layers 2 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 2688 --seq-length 4096 "
            "--vocab-size 131072 --num-experts 512 --moe-router-topk 22 --moe-shared-expert-intermediate-size 5376")
    job = parse_megatron_args(base + " --moe-latent-size 1024")
    assert job.spec.moe_latent_size == 1024 and "moe-latent-size" not in " ".join(job.ignored)
    assert parse_megatron_args(base).spec.moe_latent_size is None


def test_megatron_nemotron3_super_release_args_are_the_catalogue_model() -> None:
    """NVIDIA's Nemotron 3 Super release arguments (Megatron-LM tests/functional_tests/.../
    nemotron3_super_release_gb200/model_config.yaml, vocab given) build the catalogue model:
    hybrid pattern with two '/*E' MTP depths, Mamba-2 sizes from Megatron's defaults, squared
    ReLU, LatentMoE."""
    args = ("--num-layers 88 --hidden-size 4096 --ffn-hidden-size 2688 --num-attention-heads 32 --group-query-attention "
            "--num-query-groups 2 --kv-channels 128 --is-hybrid-model --mamba-num-heads 128 --hybrid-layer-pattern "
            "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME/*E/*E "
            "--position-embedding-type none --normalization RMSNorm --untie-embeddings-and-output-weights "
            "--disable-bias-linear --squared-relu --seq-length 8192 --vocab-size 131072 --num-experts 512 "
            "--moe-router-topk 22 --moe-latent-size 1024 --moe-shared-expert-intermediate-size 5376 "
            "--mtp-num-layers 2 --mtp-use-repeated-layer --tensor-model-parallel-size 2")
    job = parse_megatron_args(args)
    assert param_counts(job.spec) == param_counts(get_workload("nemotron3-super"))
    assert (job.spec.mtp_depth, job.spec.mtp_pattern, job.spec.mamba.state_dim) == (2, "*E", 128)  # type: ignore[union-attr]
    with pytest.raises(SpecError, match="--mtp-num-layers"):
        parse_megatron_args(args.replace("--mtp-num-layers 2", "--mtp-num-layers 3"))
    with pytest.raises(SpecError, match="--hybrid-layer-pattern"):
        parse_megatron_args(args.replace("--num-layers 88", "--num-layers 87"))


def test_megatron_bridge_overrides_vp_recompute_fp8_and_moe_pattern() -> None:
    job = parse_megatron_args(
        "model.num_layers=61 model.hidden_size=7168 model.num_attention_heads=128 model.seq_length=4096 "
        "model.vocab_size=129280 model.gated_linear_unit=true model.normalization=RMSNorm "
        "model.position_embedding_type=rope model.share_embeddings_and_output_weights=false model.add_bias_linear=false "
        "model.ffn_hidden_size=18432 model.num_moe_experts=256 model.moe_router_topk=8 model.moe_ffn_hidden_size=2048 "
        "model.moe_shared_expert_intermediate_size=2048 model.moe_layer_freq=[0]*3+[1]*58 "
        "model.multi_latent_attention=true model.q_lora_rank=1536 model.kv_lora_rank=512 model.qk_head_dim=128 "
        "model.qk_pos_emb_head_dim=64 model.v_head_dim=128 model.tensor_model_parallel_size=2 "
        "model.pipeline_model_parallel_size=8 --virtual-pipeline-model-parallel-size 2 model.expert_model_parallel_size=64 "
        "model.sequence_parallel=true --recompute-granularity full --fp8-format hybrid --micro-batch-size 1 "
        "--global-batch-size 4096")
    s = job.spec
    assert (s.first_dense_layers, s.moe_layer_freq, s.num_shared_experts, s.attention) == (3, 1, 1, "mla")
    # the same parameters as the catalogue's DeepSeek-V3 (129280 is already a multiple of 128 x 2)
    assert param_counts(s) == param_counts(get_workload("deepseek-v3"))
    lay = job.layout
    assert (lay["tp"], lay["pp"], lay["vp"], lay["ep"], lay["sp"], lay["recompute"], lay["precision"]) == (
        2, 8, 2, 64, True, "full", "fp8")
    assert (lay["fp8_recipe"], lay["optimizer"]) == ("delayed", "adamw")  # Megatron's defaults
    base = "--num-layers 2 --hidden-size 64 --num-attention-heads 2 --seq-length 8 --vocab-size 8 "
    for extra, want in (("--fp8-format e4m3 --fp8-recipe tensorwise", ("fp8", "current")),
                        ("--fp8-format e4m3 --fp8-recipe mxfp8", ("mxfp8", "mxfp8")),
                        ("--fp4-format e2m1 --fp4-recipe nvfp4", ("nvfp4", "nvfp4")), ("--bf16", ("bf16", None))):
        got = parse_megatron_args(base + extra).layout
        assert (got["precision"], got["fp8_recipe"]) == want


def test_bridge_none_is_an_argument_not_given() -> None:
    """Megatron-Bridge prints the fields it leaves unset as None; each one is Megatron's default, a
    later None clears an earlier value, and the Megatron-LM flag form still refuses the word."""
    base = ("model.num_layers=8 model.hidden_size=1024 model.num_attention_heads=16 model.seq_length=2048 "
            "model.vocab_size=32000 model.pipeline_model_parallel_size=2 ")
    lay = parse_megatron_args(base + "model.virtual_pipeline_model_parallel_size=None model.context_parallel_size=null "
                              "model.expert_model_parallel_size=None model.recompute_granularity=None "
                              "model.recompute_method=None model.recompute_num_layers=None "
                              "model.recompute_modules=None model.sequence_parallel=None").layout
    assert (lay["vp"], lay["cp"], lay["ep"], lay["sp"], lay["recompute"]) == (1, 1, 1, False, "none")
    assert (lay["recompute_method"], lay["recompute_num_layers"]) == (None, None)
    cleared = parse_megatron_args(base + "model.virtual_pipeline_model_parallel_size=2 "
                                  "model.virtual_pipeline_model_parallel_size=None").layout
    assert cleared["vp"] == 1
    # 'none' is a value, not Bridge's nothing: Megatron's --position-embedding-type has a 'none' choice
    assert parse_megatron_args(base + "model.position_embedding_type=none").spec.position == "none"
    with pytest.raises(SpecError, match=r"--virtual-pipeline-model-parallel-size.*'None'"):
        parse_megatron_args(base + "--virtual-pipeline-model-parallel-size None")


def test_megatron_moe_mechanisms_reach_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The MoE choices a Megatron job states (dispatcher, combined-1F1B overlap, forced balance, the
    flex kernels' SMs) are the plan's; where it is silent the stack's defaults hold; Megatron's
    allgather dispatcher, which perfmodel does not model, is refused by name."""
    base = ("--num-layers 4 --hidden-size 2048 --ffn-hidden-size 6144 --num-attention-heads 32 --seq-length 4096 "
            "--vocab-size 151936 --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768 "
            "--expert-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 64 --bf16 ")
    stated = parse_megatron_args(base + "--moe-token-dispatcher-type flex --overlap-moe-expert-parallel-comm "
                                 "--moe-router-force-load-balancing --moe-hybridep-num-sms 32").layout
    assert (stated["moe_dispatcher"], stated["moe_a2a_overlap"], stated["moe_imbalance"], stated["moe_a2a_sms"]) == (
        "flex", True, 1.0, 32)
    silent = parse_megatron_args(base).layout
    assert all(silent[k] is None for k in ("moe_dispatcher", "moe_a2a_overlap", "moe_imbalance", "moe_a2a_sms"))
    bridge = parse_megatron_args(base + "model.moe_token_dispatcher_type=alltoall model.moe_flex_dispatcher_num_sms=24 "
                                 "model.moe_shared_expert_overlap=true").layout
    assert (bridge["moe_dispatcher"], bridge["moe_a2a_sms"], bridge["moe_shared_overlap"]) == ("alltoall", 24, True)
    with pytest.raises(SpecError, match=r"allgather.*alltoall or flex"):
        parse_megatron_args(base + "--moe-token-dispatcher-type allgather")
    args = tmp_path / "moe-stated.args"
    args.write_text(base + "--moe-token-dispatcher-type flex --moe-router-force-load-balancing --moe-deepep-num-sms 24")
    assert main(["estimate", "--megatron-args-file", str(args), "--hardware", "h100-sxm5-80gb", "--n-gpus", "8",
                 "--calibration", "none", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert (plan["moe_dispatcher"], plan["moe_imbalance"], plan["moe_a2a_sms"]) == ("flex", 1.0, 24)


def test_megatron_moe_expert_gemms_are_per_expert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Megatron-Core issues one GEMM per local expert with --moe-grouped-gemm (TEGroupedMLP on
    Transformer Engine's GroupedLinear) and without it (SequentialMLP): a MoE job is per-expert and
    the flag is read, not listed as ignored; a dense job states nothing; a command line that names
    --expert-gemm wins over what the job implies."""
    base = ("--num-layers 4 --hidden-size 2048 --ffn-hidden-size 6144 --num-attention-heads 32 --seq-length 4096 "
            "--vocab-size 151936 --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768 "
            "--expert-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 64 --bf16 ")
    grouped = parse_megatron_args(base + "--moe-grouped-gemm")
    assert grouped.layout["expert_gemm"] == "per-expert" and "--moe-grouped-gemm" not in grouped.ignored
    assert parse_megatron_args(base).layout["expert_gemm"] == "per-expert"
    dense = parse_megatron_args("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
                                "--vocab-size 50257 --micro-batch-size 1 --global-batch-size 8 --bf16")
    assert dense.layout["expert_gemm"] is None
    args = tmp_path / "moe.args"
    args.write_text(base + "--moe-grouped-gemm")
    for extra, want in (([], "per-expert"), (["--expert-gemm", "grouped"], "grouped")):
        assert main(["estimate", "--megatron-args-file", str(args), "--hardware", "h100-sxm5-80gb", "--n-gpus", "8",
                     "--calibration", "none", "--json", *extra]) == 0
        assert json.loads(capsys.readouterr().out)["plan"]["expert_gemm"] == want


def test_megatron_cuda_graphs_reach_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A job that graphs whole layers (full_iteration; local / transformer_engine over the whole layer,
    also by the deprecated flags) runs one host launch per layer; a partial capture (attention, router
    and preprocess, as Megatron-Bridge's bf16 / fp8 MoE recipes set) and none stay eager; silence
    leaves the stack's default; an unknown implementation is refused with the allowed ones."""
    base = ("--num-layers 4 --hidden-size 2048 --ffn-hidden-size 6144 --num-attention-heads 32 --seq-length 4096 "
            "--vocab-size 151936 --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768 "
            "--expert-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 64 --bf16 ")
    graphs = {extra: parse_megatron_args(base + extra).layout["cuda_graphs"] for extra in (
        "", "--cuda-graph-impl none", "--cuda-graph-impl full_iteration", "--cuda-graph-impl local",
        "--cuda-graph-impl transformer_engine --cuda-graph-modules attn moe_router moe_preprocess",
        "--cuda-graph-impl transformer_engine --cuda-graph-scope attn moe", "--enable-cuda-graph",
        "model.cuda_graph_impl=transformer_engine model.cuda_graph_scope=[attn,moe_router,moe_preprocess]",
        "model.cuda_graph_impl=full_iteration model.cuda_graph_scope=[]")}
    assert list(graphs.values()) == [None, False, True, True, False, True, True, False, True]
    with pytest.raises(SpecError, match=r"--cuda-graph-impl.*none, local, transformer_engine, full_iteration"):
        parse_megatron_args(base + "--cuda-graph-impl everything")
    args = tmp_path / "graphed.args"
    args.write_text(base + "--cuda-graph-impl full_iteration")
    assert main(["estimate", "--megatron-args-file", str(args), "--hardware", "b200", "--n-gpus", "8",
                 "--framework", "megatron-core", "--calibration", "none", "--json"]) == 0
    graphed = json.loads(capsys.readouterr().out)
    assert graphed["plan"]["cuda_graphs"] is True
    args.write_text(base)
    main(["estimate", "--megatron-args-file", str(args), "--hardware", "b200", "--n-gpus", "8",
          "--framework", "megatron-core", "--calibration", "none", "--json"])
    eager = json.loads(capsys.readouterr().out)
    assert eager["plan"]["cuda_graphs"] is False
    # one sequence per micro-batch on 16 local experts: the eager host sets the pace, the graphs remove it
    assert graphed["step_time_s"] < 0.8 * eager["step_time_s"]


def test_megatron_optimizer_moments_and_fp8_swiglu_inputs_reach_the_plan() -> None:
    """DeepSeek-V3's memory savers as Megatron states them: bf16 AdamW moments (precision-aware
    optimizer, also in Megatron-Bridge's torch.bfloat16 spelling) and SwiGLU inputs kept in fp8;
    moment widths perfmodel does not model are refused with the allowed ones."""
    base = ("--num-layers 2 --hidden-size 1024 --ffn-hidden-size 2816 --num-attention-heads 16 --seq-length 1024 "
            "--vocab-size 32000 --swiglu --bf16 ")
    assert parse_megatron_args(base).layout["optimizer"] == "adamw"
    bf16 = parse_megatron_args(base + "--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 "
                               "--activation-func-fp8-input-store").layout
    assert (bf16["optimizer"], bf16["act_fp8_input_store"]) == ("adamw-bf16", True)
    bridge = parse_megatron_args(base + "optimizer.exp_avg_dtype=torch.bfloat16 optimizer.exp_avg_sq_dtype=torch.bfloat16")
    assert bridge.layout["optimizer"] == "adamw-bf16"
    with pytest.raises(SpecError, match="both fp32 or both bf16"):
        parse_megatron_args(base + "--exp-avg-dtype fp8 --exp-avg-sq-dtype bf16")


def test_megatron_virtual_stages_and_errors() -> None:
    base = "--num-layers 32 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --vocab-size 1000 "
    assert parse_megatron_args(base + "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 2"
                               ).layout["vp"] == 4  # 32 layers / (4 stages x 2 layers per chunk)
    with pytest.raises(SpecError, match="--num-layers-per-virtual-pipeline-stage"):
        parse_megatron_args(base + "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 3")
    with pytest.raises(SpecError, match=r"--hidden-size.*\$HIDDEN"):
        parse_megatron_args("--num-layers 2 --hidden-size $HIDDEN --num-attention-heads 2 --seq-length 8 --vocab-size 8")
    with pytest.raises(SpecError, match="--vocab-size"):
        parse_megatron_args("--num-layers 2 --hidden-size 8 --num-attention-heads 2 --seq-length 8")
    assert moe_layer_pattern("([0]*1+[1, 0]*2)", 5) == (1, 2)
    with pytest.raises(SpecError, match="--moe-layer-freq"):
        moe_layer_pattern("[1, 1, 0, 1]", 4)
    with pytest.raises(SpecError, match="--moe-layer-freq"):
        moe_layer_pattern("__import__('os')", 4)


def test_torchtitan_llama3_70b_preset_on_64_gpus() -> None:
    job = load_torchtitan(TT / "llama3_70b.toml", n_gpus=64)
    assert job.spec.id == "llama3-70b"
    lay = job.layout
    # data_parallel_shard_degree -1 fills 64 GPUs / tp 8 = 8 FSDP ranks; 8 sequences each
    assert (lay["dp"], lay["tp"], lay["zero"], lay["sp"], lay["micro_batch"], lay["global_batch"]) == (8, 8, 3, True, 8, 64)
    assert (lay["recompute"], lay["precision"], lay["seq_len"]) == ("full", "bf16", 8192)


def test_torchtitan_float8_and_errors(tmp_path: Path) -> None:
    lay = load_torchtitan(TT / "llama3_8b.toml", n_gpus=64).layout
    assert (lay["dp"], lay["tp"], lay["precision"], lay["recompute"], lay["global_batch"]) == (64, 1, "fp8", "selective", 64)
    assert (lay["fp8_recipe"], lay["optimizer"]) == ("current", "adamw")  # torchtitan's tensorwise float8, AdamW
    with pytest.raises(SpecError, match="data_parallel_shard_degree"):
        load_torchtitan(TT / "llama3_8b.toml")
    bad = tmp_path / "x.toml"
    bad.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\ndata_parallel_replicate_degree = 2\n')
    with pytest.raises(SpecError, match="HSDP"):
        load_torchtitan(bad, n_gpus=8)
    bad.write_text('[model]\nname = "llama3"\nflavor = "17B"\n')
    with pytest.raises(SpecError, match=r"llama3 17B.*llama3 8B"):
        load_torchtitan(bad, n_gpus=8)


def test_cli_estimate_from_megatron_and_torchtitan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "--megatron-args-file", str(MEG / "mixtral-8x7b.args"), "--n-gpus", "64",
                 "--hardware", "h100-sxm5-80gb", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    plan = out["plan"]
    assert (plan["dp"], plan["pp"], plan["ep"], plan["zero_stage"], plan["global_batch"]) == (16, 4, 8, 1, 256)
    assert out["params"] == pytest.approx(46.7e9, rel=0.01)
    assert main(["estimate", "--torchtitan", str(TT / "llama3_70b.toml"), "--n-gpus", "64", "--hardware",
                 "a100-sxm4-80gb", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert (plan["dp"], plan["tp"], plan["zero_stage"], plan["recompute"], plan["seq_len"]) == (8, 8, 3, "full", 8192)


def test_cli_megatron_etp_reaches_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    """--expert-tensor-parallel-size becomes the plan's etp (MoE parallel folding); unset, it is
    the tp size, as Megatron-LM's arguments.py sets it."""
    assert load_megatron_args_file(MEG / "mixtral-8x7b.args").layout["etp"] == 1  # tp 1
    args = (MEG / "mixtral-8x7b.args").read_text() + "\n--expert-tensor-parallel-size 2\n"
    rc = main(["estimate", "--megatron-args", args, "--n-gpus", "64", "--hardware", "h100-sxm5-80gb", "--json"])
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["plan"]["etp"] == 2
    tp2 = (MEG / "mixtral-8x7b.args").read_text().replace("--tensor-model-parallel-size 1", "--tensor-model-parallel-size 2")
    assert parse_megatron_args(tp2).layout["etp"] == 2


def test_megatron_bash_arrays_continuations_and_unresolved_paths() -> None:
    text = """
MODEL_ARGS=(
    --num-layers 24 --hidden-size 2048   # comment
    --num-attention-heads 16 \\
    --seq-length 2048 --vocab-size 50304
)
TRAINING_ARGS=( --rampup-batch-size 16 16 5859375 --micro-batch-size 4 --global-batch-size 512 --bf16 )
DATA_ARGS=( --data-path $DATA_PATH --save "${CHECKPOINT}/x" )
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${MODEL_ARGS[@]} ${TRAINING_ARGS[@]}
"""
    job = parse_megatron_args(text)
    assert (job.spec.num_layers, job.spec.hidden, job.spec.vocab) == (24, 2048, 50304)
    assert (job.layout["micro_batch"], job.layout["global_batch"], job.layout["precision"]) == (4, 512, "bf16")
    assert {"--rampup-batch-size", "--data-path", "--save"} <= set(job.ignored)


def test_torchtitan_selective_is_the_per_op_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A torchtitan job runs under the torchtitan stack, whose selective recompute is its per-op
    policy; an integer selective_ac_option (full AC of every n-th block, torchtitan's default '2')
    is refused rather than read as another policy."""
    assert main(["estimate", "--torchtitan", str(TT / "llama3_8b.toml"), "--n-gpus", "64", "--hardware",
                 "h100-sxm5-80gb", "--json", "--calibration", "none"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert (plan["recompute"], plan["selective_recompute"]) == ("selective", "op")
    bad = tmp_path / "x.toml"
    bad.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[activation_checkpoint]\nmode = "selective"\n')
    with pytest.raises(SpecError, match=r"selective_ac_option.*'2'.*'op'"):
        load_torchtitan(bad, n_gpus=8)
