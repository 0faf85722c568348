"""Hugging Face config.json import: real configs of each family (tests/data/hf/, sources in
SOURCES.md) give the published parameter counts; unsupported features are refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.errors import SpecError
from perfmodel.workload.catalog import load_workload_file
from perfmodel.workload.hf_config import is_hf_config, load_hf_config, param_counts, spec_yaml

HF = Path(__file__).parent / "data" / "hf"

# file, seq_len override (None = the config's own context), published total, published active,
# relative tolerance: 1 % where the figure is given to three digits; 2 % where it is given to two
# ("37B", "3.3B": their own rounding is +-1.4 % and +-1.5 %)
PUBLISHED = [
    ("llama-3.1-8b.json", None, 8.03e9, None, 0.01),
    ("mistral-7b-v0.1.json", 4096, 7.24e9, None, 0.01),
    ("mixtral-8x7b-v0.1.json", None, 46.7e9, 12.9e9, 0.01),
    ("qwen2.5-7b.json", 4096, 7.61e9, None, 0.01),
    ("qwen3-8b.json", None, 8.2e9, None, 0.01),
    ("qwen3-30b-a3b.json", None, 30.5e9, 3.3e9, 0.02),
    ("deepseek-v3.json", None, 671e9, 37e9, 0.02),
    ("gemma-7b.json", None, 8.54e9, None, 0.01),
    ("phi-4.json", None, 14.7e9, None, 0.01),
]


@pytest.mark.parametrize(("name", "seq", "total", "active", "tol"), PUBLISHED)
def test_params_match_published(name: str, seq: int | None, total: float, active: float | None, tol: float) -> None:
    spec = load_hf_config(HF / name, seq_len=seq)
    t, a = param_counts(spec)
    assert t == pytest.approx(total, rel=0.01)
    assert a == pytest.approx(active or total, rel=tol if active else 0.01)


def test_qwen2_5_7b_by_hand() -> None:
    """Qwen2.5-7B written out: 28 layers of attention h(q + 2kv)d + q d h and a SwiGLU 3 h f, two
    RMSNorms, untied embedding and head. = 7,615,487,488 (the model card's 7.61B; the 28 x 4,608
    q/k/v biases, 0.002 %, are the difference to the Hub's safetensors count)."""
    h, f, heads, kv, d, V, L = 3584, 18944, 28, 4, 128, 152064, 28
    layer = h * (heads + 2 * kv) * d + heads * d * h + 3 * h * f + 2 * h
    t, _ = param_counts(load_hf_config(HF / "qwen2.5-7b.json", seq_len=4096))
    assert t == L * layer + 2 * V * h + h == 7_615_487_488


def test_deepseek_v3_maps_mla_shared_experts_and_dense_layers() -> None:
    spec = load_hf_config(HF / "deepseek-v3.json")
    assert (spec.attention, spec.first_dense_layers, spec.num_shared_experts, spec.num_experts, spec.top_k) == (
        "mla", 3, 1, 256, 8)
    assert spec.mla is not None and (spec.mla.q_lora_rank, spec.mla.kv_lora_rank) == (1536, 512)
    assert spec.ffn_hidden == 18432 and spec.moe_ffn_hidden == 2048 and spec.seq_len == 4096
    # the same model as the hand-written workload
    t, a = param_counts(spec)
    assert (t, a) == param_counts(load_workload_file(Path(__file__).parents[1] / "workloads" / "deepseek-v3.yaml"))


def test_gemma_ties_embeddings_and_uses_geglu_with_wide_heads() -> None:
    spec = load_hf_config(HF / "gemma-7b.json")
    assert spec.tied_embeddings and spec.activation == "geglu" and spec.head_dim == 256 and spec.attention == "mha"


@pytest.mark.parametrize(("name", "field", "words"), [
    ("gpt-oss-20b.json", "layer_types", "sliding_attention"),
    ("nemotron-h-8b.json", "model_type", "Mamba-2"),
    ("phi-3-medium-4k.json", "sliding_window", "2047"),
    ("mistral-7b-v0.1.json", "sliding_window", "--seq-len 4096"),
])
def test_unsupported_features_are_refused_by_name(name: str, field: str, words: str) -> None:
    with pytest.raises(SpecError) as e:
        load_hf_config(HF / name)
    assert e.value.field == field and words in str(e.value) and name in str(e.value)


def test_unknown_model_type_and_field_are_named(tmp_path: Path) -> None:
    cfg = json.loads((HF / "llama-3.1-8b.json").read_text())
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({**cfg, "model_type": "falcon"}))
    with pytest.raises(SpecError, match=r"unknown model type 'falcon'.*llama, mistral"):
        load_hf_config(bad)
    bad.write_text(json.dumps({**cfg, "cross_layer_sharing": 2}))
    with pytest.raises(SpecError, match="cross_layer_sharing"):
        load_hf_config(bad)


def test_detected_by_content(tmp_path: Path) -> None:
    assert is_hf_config(HF / "qwen3-8b.json")
    other = tmp_path / "x.json"
    other.write_text('{"hidden_size": 1}')
    assert not is_hf_config(other) and not is_hf_config(tmp_path / "missing.json")
    snapshot = tmp_path / "Qwen3-8B"  # a Hub snapshot directory: its config.json, its name as the id
    snapshot.mkdir()
    (snapshot / "config.json").write_text((HF / "qwen3-8b.json").read_text())
    assert is_hf_config(snapshot) and load_hf_config(snapshot).id == "Qwen3-8B"


def test_cli_estimate_reads_config_and_reports_params(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["estimate", str(HF / "qwen3-30b-a3b.json"), "--hardware", "h100-sxm5-80gb", "--tp", "2", "--ep", "4",
               "--n-gpus", "8", "--global-batch", "64", "--seq-len", "4096", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["workload"] == "qwen3-30b-a3b"
    t, a = param_counts(load_hf_config(HF / "qwen3-30b-a3b.json"))
    assert (out["params"], out["active_params"]) == (t, a)
    assert out["plan"]["seq_len"] == 4096


def test_cli_import_writes_a_workload_that_loads_back(tmp_path: Path) -> None:
    out = tmp_path / "qwen3-8b.yaml"
    assert main(["import", "hf", str(HF / "qwen3-8b.json"), "-o", str(out)]) == 0
    back = load_workload_file(out)
    assert back.id == "qwen3-8b" and back == load_hf_config(HF / "qwen3-8b.json").with_(source=back.source)
    assert spec_yaml(back).startswith("id: qwen3-8b")


def test_cli_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", str(HF / "nemotron-h-8b.json"), "--hardware", "h100-sxm5-80gb"]) == 2
    err = capsys.readouterr().err
    assert "nemotron_h" in err and "Traceback" not in err


@pytest.mark.parametrize(("name", "seq", "total", "active", "tol"), PUBLISHED)
def test_cross_check_with_transformers_where_installed(name: str, seq: int | None, total: float, active: float | None,
                                                       tol: float) -> None:
    """Where `transformers` is installed, the model it builds (on the meta device) has our count
    to 0.1 % (the unmodelled q/k/v biases and q/k norms are below 0.01 %)."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    cfg = json.loads((HF / name).read_text())
    config = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    theirs = sum(p.numel() for p in model.parameters())
    assert param_counts(load_hf_config(HF / name, seq_len=seq))[0] == pytest.approx(theirs, rel=1e-3)
