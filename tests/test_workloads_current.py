"""Current widely trained models added to workloads/: each matches its published parameter counts
within its own stated tolerance, and the names runs files write for them resolve by name."""

from __future__ import annotations

import pytest

from perfmodel.validation.match import by_name
from perfmodel.workload.builder import build_graph
from perfmodel.workload.catalog import load_workloads

WL = load_workloads()
CURRENT_IDS = ["qwen3-coder-480b-a35b", "minimax-m2", "mistral-large-2", "mistral-small-3-24b", "phi-3.5-moe",
               "starcoder2-15b", "granite-3.1-8b",
               "olmo-2-13b", "olmo-2-32b", "gemma-3-4b", "gemma-3-1b", "phi-4-mini", "ministral-8b", "codestral-22b"]


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
    # OLMo 2 13B / 32B, Gemma 3 4B / 1B, Phi-4-mini, Ministral 8B, Codestral 22B
    ("allenai/OLMo-2-1124-13B", "olmo-2-13b"), ("allenai/OLMo-2-1124-13B-Instruct", "olmo-2-13b"), ("OLMo 2 13B", "olmo-2-13b"),
    ("allenai/OLMo-2-0325-32B", "olmo-2-32b"), ("allenai/OLMo-2-0325-32B-Instruct", "olmo-2-32b"), ("OLMo 2 32B", "olmo-2-32b"),
    ("google/gemma-3-4b-pt", "gemma-3-4b"), ("google/gemma-3-4b-it", "gemma-3-4b"), ("Gemma 3 4B", "gemma-3-4b"),
    ("google/gemma-3-1b-pt", "gemma-3-1b"), ("google/gemma-3-1b-it", "gemma-3-1b"), ("Gemma 3 1B", "gemma-3-1b"),
    ("microsoft/Phi-4-mini-instruct", "phi-4-mini"), ("Phi-4-mini", "phi-4-mini"),
    ("mistralai/Ministral-8B-Instruct-2410", "ministral-8b"), ("Ministral 8B", "ministral-8b"),
    ("mistralai/Codestral-22B-v0.1", "codestral-22b"), ("mistral-community/Codestral-22B-v0.1", "codestral-22b"),
    ("Codestral 22B", "codestral-22b"),
    # releases of a catalogued network, aliased earlier: Llama 3.3 70B, DeepSeek-R1, GLM-4.6
    ("meta-llama/Llama-3.3-70B-Instruct", "llama3.1-70b"), ("deepseek-ai/DeepSeek-R1", "deepseek-v3"),
    ("zai-org/GLM-4.6", "glm-4.5"),
])
def test_current_names_resolve(name: str, workload: str) -> None:
    spec = by_name(name, WL)
    assert spec is not None and spec.id == workload


@pytest.mark.parametrize("name", ["deepseek-ai/DeepSeek-V3.2", "DeepSeek-V3.2-Exp", "Qwen/Qwen3-32B", "Mistral Large 3",
                                  "Qwen2.5-Coder-14B", "Qwen3-Coder-480B-A35B", "Nemotron-H-56B", "Nemotron-H-8B",
                                  # other networks beside the models added with OLMo 2 13B / 32B ... Codestral 22B
                                  "allenai/OLMo-2-0425-1B", "allenai/OLMo-2-1124-7B", "google/gemma-3-12b-it",
                                  "google/gemma-3-270m", "microsoft/phi-4", "microsoft/Phi-4-mini-flash-reasoning",
                                  "mistralai/Ministral-3-8B-Instruct-2512", "mistralai/Mamba-Codestral-7B-v0.1",
                                  "mistralai/Mistral-Small-Instruct-2409"])
def test_other_networks_do_not_resolve_to_the_new_aliases(name: str) -> None:
    spec = by_name(name, WL)
    assert spec is None or spec.id not in {"deepseek-v3", "qwen3-30b-a3b", "mistral-large-2", "qwen2.5-32b",
                                           "qwen2.5-7b", "nemotron-h-47b", "olmo-2-13b", "olmo-2-32b", "gemma-3-4b",
                                           "gemma-3-1b", "phi-4-mini", "ministral-8b", "codestral-22b"}


def test_nemotron_h_47b_cites_its_config_and_matches_its_published_size() -> None:
    spec = WL["nemotron-h-47b"]
    assert "config" in spec.source and spec.published_params is not None
    assert len(spec.layer_pattern or "") == spec.num_layers == 98
    total = build_graph(spec, seq_len=2048).total_params_full()
    assert total == pytest.approx(spec.published_params.total, rel=spec.published_params.tolerance)


@pytest.mark.parametrize(("wid", "window", "local", "global_"), [("gemma-3-4b", 1024, 29, 5), ("gemma-3-1b", 512, 22, 4),
                                                              ("ministral-8b", 32768, 27, 9)])
def test_interleaved_local_attention_of_the_new_models(wid: str, window: int, local: int, global_: int) -> None:
    # Gemma 3: 5 local layers per global one (1B: a 512-token window); Ministral 8B: one full-context
    # layer per three 32K-window layers (its model card's ragged 128k, 32k, 32k, 32k)
    spec = WL[wid]
    counts = {layer.name: layer.count for layer in build_graph(spec, seq_len=2048).body}
    assert spec.sliding_window == window and counts == {"layers_local": local, "layers": global_}


def test_ministral_8b_matches_its_model_card_count_exactly() -> None:
    # 'Parameters 8,019,808,256' in the Ministral-8B-Instruct-2410 architecture table
    assert build_graph(WL["ministral-8b"], seq_len=2048).total_params_full() == 8_019_808_256
