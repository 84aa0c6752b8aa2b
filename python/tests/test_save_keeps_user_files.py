"""LanguageModel.save and EncoderModel.save never delete or replace what a
user had (issue 54, P06): an existing non-empty directory is refused unless
overwrite=True, and even then only the files the save writes are replaced; a
path that is a file is never turned into a directory."""

import os

import pytest

import autoshard

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data")

MODELS = {
    "language_model": lambda: autoshard.from_pretrained(os.path.join(DATA, "hf_gpt2")),
    "keras_hub_preset": lambda: autoshard.from_pretrained(os.path.join(DATA, "keras_hub", "gpt2")),
    "encoder": lambda: autoshard.from_pretrained(os.path.join(DATA, "hf_bert")),
}


@pytest.fixture(params=sorted(MODELS))
def model(request):
    return MODELS[request.param]()


def user_dir(tmp_path):
    work = tmp_path / "mywork"
    (work / "sub").mkdir(parents=True)
    (work / "thesis.txt").write_text("years of work")
    (work / "sub" / "data.csv").write_text("1,2,3")
    return work


def assert_user_files_kept(work):
    assert (work / "thesis.txt").read_text() == "years of work"
    assert (work / "sub" / "data.csv").read_text() == "1,2,3"


def test_a_non_empty_directory_is_refused_without_overwrite(model, tmp_path):
    work = user_dir(tmp_path)
    with pytest.raises(FileExistsError, match="exists and is not empty.*overwrite=True"):
        model.save(work)
    assert_user_files_kept(work)
    assert sorted(os.listdir(work)) == ["sub", "thesis.txt"]
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]


def test_overwrite_replaces_only_the_files_written(model, tmp_path):
    work = user_dir(tmp_path)
    model.save(work, overwrite=True)
    assert_user_files_kept(work)
    assert (work / "config.json").is_file()
    model.save(work, overwrite=True)  # over its own files too
    assert_user_files_kept(work)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]


def test_a_file_is_never_replaced_by_a_directory(model, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("notes")
    for overwrite in (False, True):
        with pytest.raises(FileExistsError, match="is a file; give a directory"):
            model.save(notes, overwrite=overwrite)
        assert notes.read_text() == "notes"


def test_a_new_or_empty_directory_is_written(model, tmp_path):
    model.save(tmp_path / "new")
    assert (tmp_path / "new" / "config.json").is_file()
    (tmp_path / "empty").mkdir()
    model.save(tmp_path / "empty")
    assert (tmp_path / "empty" / "config.json").is_file()


def test_the_engine_refuses_too(tmp_path):
    """The native save, below the Python checks, keeps the same rule."""
    model = autoshard.from_pretrained(os.path.join(DATA, "hf_gpt2"))
    work = user_dir(tmp_path)
    with pytest.raises(Exception, match="exists and is not empty"):
        model._native.save(os.fspath(work), "F32", 0, False)
    assert_user_files_kept(work)
    assert sorted(os.listdir(work)) == ["sub", "thesis.txt"]
