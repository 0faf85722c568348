"""Layout problems land under the widget that caused them, with the nearest valid choices."""

import perfmodel
from perfmodel.app_fixes import diagnose, field_of

BASE = {"gpus": 1024, "tp": 8, "pp": 8, "cp": 1, "ep": 1, "vp": 1, "mb": 1, "gb": 1536}


def test_valid_layout_has_no_problem():
    assert diagnose(BASE, perfmodel.get_workload("gpt3-175b")) is None


def test_each_constraint_names_its_widget_and_fixes():
    gpt3 = perfmodel.get_workload("gpt3-175b")
    p = diagnose({**BASE, "tp": 5}, gpt3)
    assert p.widget == "tp" and [f[1] for f in p.fixes] == [{"tp": 4}, {"tp": 6}]
    p = diagnose({**BASE, "gpus": 1000}, gpt3)
    assert p.widget == "gpus" and [f[1] for f in p.fixes] == [{"gpus": 960}, {"gpus": 1024}]
    p = diagnose({**BASE, "gb": 1000}, gpt3)  # dp 16: multiples of 16 around 1000
    assert p.widget == "batch" and [f[1] for f in p.fixes] == [{"gb": 992}, {"gb": 1008}]
    p = diagnose({**BASE, "pp": 64, "vp": 2}, gpt3)
    assert p.widget == "tp" and p.fixes[0][1] == {"pp": 48}
    p = diagnose({**BASE, "ep": 2}, gpt3)
    assert p.widget == "ep" and p.fixes[0][1] == {"ep": 1}
    mixtral = perfmodel.get_workload("mixtral-8x7b")
    p = diagnose({**BASE, "gpus": 64, "tp": 2, "pp": 1, "ep": 3, "gb": 64}, mixtral)
    assert p.widget == "ep" and [f[1] for f in p.fixes] == [{"ep": 2}, {"ep": 4}]


def test_library_messages_map_to_widgets():
    assert field_of("global_batch 10 is not divisible by micro_batch 4 x dp 2") == "batch"
    assert field_of("ep 32 must divide dp x cp = 16") == "ep"
    assert field_of("something else entirely") == "top"


def test_uploaded_workload_is_validated_and_errors_name_the_upload():
    import pytest

    from perfmodel.app_fixes import parse_uploaded_workload
    from perfmodel.errors import SpecError

    good = (b"id: tiny-gpt\nname: Tiny GPT\nfamily: dense\nsource: my notes\nnum_layers: 2\nhidden: 256\n"
            b"ffn_hidden: 1024\nnum_heads: 4\nvocab: 1000\nseq_len: 128\n")
    spec = parse_uploaded_workload("tiny-gpt.yaml", good)
    assert spec.id == "tiny-gpt" and spec.num_layers == 2
    with pytest.raises(SpecError) as e:
        parse_uploaded_workload("mine.yaml", good.replace(b"num_heads: 4", b"num_heads: 4\nbogus_field: 3"))
    assert "mine.yaml" in str(e.value) and "bogus_field" in str(e.value) and "/tmp" not in str(e.value)
    with pytest.raises(SpecError, match="under 1,000,000 bytes"):
        parse_uploaded_workload("big.yaml", b"#" * 2_000_000)


def test_uploaded_hf_config_is_a_workload():
    from pathlib import Path

    from perfmodel.app_fixes import parse_uploaded_workload

    data = (Path(__file__).parent / "data" / "hf" / "llama-3.1-8b.json").read_bytes()
    spec = parse_uploaded_workload("config.json", data)
    assert spec.id == "uploaded-config" and spec.num_layers == 32 and spec.hidden == 4096


def test_uploaded_hardware_joins_the_catalogue_and_bad_files_name_the_field(tmp_path):
    from pathlib import Path

    import pytest

    from perfmodel.app_fixes import add_uploaded_hardware
    from perfmodel.errors import SpecError
    from perfmodel.hardware.catalog import clear_added_specs

    root = Path(__file__).resolve().parents[1]
    src = (root / "hardware_specs" / "accelerators" / "h100-sxm5-80gb.yaml").read_text()
    faster = src.replace("id: h100-sxm5-80gb", "id: test-h100-faster").replace(
        "bf16: {value: 794.5 TFLOP/s", "bf16: {value: 1589 TFLOP/s").replace("bf16: {value: 989.4 TFLOP/s", "bf16: {value: 1978.8 TFLOP/s")
    try:
        assert add_uploaded_hardware("mine.yaml", faster.encode(), tmp_path) == ("accelerators", "test-h100-faster")
        plan = perfmodel.ParallelPlan(dp=8, global_batch=64, micro_batch=8)
        fast = perfmodel.estimate("gpt3-1.3b", "test-h100-faster", plan)
        base = perfmodel.estimate("gpt3-1.3b", "h100-sxm5-80gb", plan)
        assert fast.step_time_s < base.step_time_s  # twice the achievable GEMM rate: a faster step
        bad = faster.replace("test-h100-faster", "test-h100-bad").replace("hbm_capacity: {value: 80 GB", "hbm_capacity: {value: 80 GHz")
        with pytest.raises(SpecError) as e:
            add_uploaded_hardware("broken.yaml", bad.encode(), tmp_path)
        assert "broken.yaml" in str(e.value) and "hbm_capacity" in str(e.value)
        with pytest.raises(SpecError, match="neither an accelerator"):
            add_uploaded_hardware("x.yaml", b"id: nothing\nname: x\n", tmp_path)
    finally:
        clear_added_specs()
