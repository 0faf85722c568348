"""Current widely trained models added to workloads/: each matches its published parameter counts
within its own stated tolerance, and the names runs files write for them resolve by name."""

from __future__ import annotations

import pytest

from perfmodel.validation.match import by_name
from perfmodel.workload.builder import build_graph
from perfmodel.workload.catalog import load_workloads

WL = load_workloads()
CURRENT_IDS = ["qwen3-coder-480b-a35b", "minimax-m2", "mistral-large-2", "mistral-small-3-24b", "phi-3.5-moe",
               "starcoder2-15b", "granite-3.1-8b"]


@pytest.mark.parametrize("wid", CURRENT_IDS)
def test_current_workload_cites_its_config(wid: str) -> None:
    assert "config" in WL[wid].source and len(WL[wid].source) > 100


@pytest.mark.parametrize("wid", [w for w in CURRENT_IDS if WL[w].published_params is not None])
def test_current_workload_matches_published_counts(wid: str) -> None:
    spec, pub = WL[wid], WL[wid].published_params
    assert pub is not None
    graph = build_graph(spec, seq_len=2048)
    assert graph.total_params_full() == pytest.approx(pub.total, rel=pub.tolerance)
    if pub.active is not None:
        table = (spec.vocab or 0) * spec.hidden
        active = graph.active_params_full() - (0 if pub.active_includes_embedding else table) \
            - (0 if pub.active_includes_output else table)
        assert active == pytest.approx(pub.active, rel=pub.tolerance)


def test_phi_3_5_moe_matches_its_checkpoint_count_exactly() -> None:
    # 41,873 million in the Hugging Face safetensors count: the config reproduces it to 0.01 %
    assert build_graph(WL["phi-3.5-moe"], seq_len=2048).total_params_full() == pytest.approx(41.873e9, rel=1e-4)


@pytest.mark.parametrize("name, workload", [
    ("Qwen/Qwen3-Coder-480B-A35B-Instruct", "qwen3-coder-480b-a35b"), ("Qwen3 Coder 480B", "qwen3-coder-480b-a35b"),
    ("MiniMaxAI/MiniMax-M2", "minimax-m2"), ("MiniMaxAI/MiniMax-M2.5", "minimax-m2"),
    ("mistralai/Mistral-Large-Instruct-2407", "mistral-large-2"), ("Mistral Large 2", "mistral-large-2"),
    ("mistralai/Mistral-Small-24B-Instruct-2501", "mistral-small-3-24b"),
    ("microsoft/Phi-3.5-MoE-instruct", "phi-3.5-moe"), ("bigcode/starcoder2-15b", "starcoder2-15b"),
    ("ibm-granite/granite-3.1-8b-base", "granite-3.1-8b"), ("ibm-granite/granite-3.0-8b-instruct", "granite-3.1-8b"),
    ("Qwen3 235B", "qwen3-235b-a22b"), ("Qwen3 30B", "qwen3-30b-a3b"), ("OLMoE", "olmoe-1b-7b"),
    ("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"), ("deepseek-ai/DeepSeek-R1-0528", "deepseek-v3"),
    # code-model releases of a catalogued network, and Nemotron-H 47B
    ("Qwen3-Coder-30B-A3B", "qwen3-30b-a3b"), ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3-30b-a3b"),
    ("Qwen2.5-Coder-32B", "qwen2.5-32b"), ("Qwen/Qwen2.5-Coder-32B-Instruct", "qwen2.5-32b"),
    ("Qwen2.5-Coder-7B", "qwen2.5-7b"), ("Qwen/Qwen2.5-Coder-7B-Instruct", "qwen2.5-7b"),
    ("DeepSeek-Coder-V2", "deepseek-v2"), ("deepseek-ai/DeepSeek-Coder-V2-Instruct-0724", "deepseek-v2"),
    ("DeepSeek-Coder-V2-Lite", "deepseek-v2-lite"), ("deepseek-ai/DeepSeek-Coder-V2-Lite-Base", "deepseek-v2-lite"),
    ("Nemotron-H-47B", "nemotron-h-47b"), ("nvidia/Nemotron-H-47B-Base-8K", "nemotron-h-47b"),
])
def test_current_names_resolve(name: str, workload: str) -> None:
    spec = by_name(name, WL)
    assert spec is not None and spec.id == workload


@pytest.mark.parametrize("name", ["deepseek-ai/DeepSeek-V3.2", "DeepSeek-V3.2-Exp", "Qwen/Qwen3-32B", "Mistral Large 3",
                                  "Qwen2.5-Coder-14B", "Qwen3-Coder-480B-A35B", "Nemotron-H-56B", "Nemotron-H-8B"])
def test_other_networks_do_not_resolve_to_the_new_aliases(name: str) -> None:
    spec = by_name(name, WL)
    assert spec is None or spec.id not in {"deepseek-v3", "qwen3-30b-a3b", "mistral-large-2", "qwen2.5-32b",
                                           "qwen2.5-7b", "nemotron-h-47b"}


def test_nemotron_h_47b_cites_its_config_and_matches_its_published_size() -> None:
    spec = WL["nemotron-h-47b"]
    assert "config" in spec.source and spec.published_params is not None
    assert len(spec.layer_pattern or "") == spec.num_layers == 98
    total = build_graph(spec, seq_len=2048).total_params_full()
    assert total == pytest.approx(spec.published_params.total, rel=spec.published_params.tolerance)
