"""Issue 13.12: the repository documents itself; nothing points outside it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perfmodel.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_readme_links_resolve_inside_the_repository():
    text = (ROOT / "README.md").read_text()
    assert "../shared" not in text
    links = re.findall(r"\]\(([^)#:]+)\)", text)
    assert "docs/DESIGN.md" in links and "docs/VALIDATION.md" in links
    for link in links:
        assert (ROOT / link).exists(), link


def test_no_source_file_points_to_the_shared_folder():
    for path in [*ROOT.joinpath("perfmodel").rglob("*.py"), *ROOT.joinpath("validation").glob("*.md"), ROOT / "app.py"]:
        assert "../shared" not in path.read_text(), path


def test_validate_help_names_the_contract(capsys):
    with pytest.raises(SystemExit):
        main(["validate", "--help"])
    assert "docs/VALIDATION.md" in capsys.readouterr().out


def test_the_validation_doc_lists_every_column_the_reader_knows():
    from perfmodel.validation.runs import COLUMNS, OUTPUT_COLUMNS

    doc = (ROOT / "docs" / "VALIDATION.md").read_text()
    for col in [*COLUMNS, *OUTPUT_COLUMNS]:
        assert col in doc, col
