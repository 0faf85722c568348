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
