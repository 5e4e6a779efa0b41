"""Issue 50, item 6: honest defaults and quiet loading. ``score`` and ``sipe-surprisal`` default to an exact source
(``self`` with structure, ``untagged``: the plain model, without); every TSV row says which kind of number it holds;
``--level word`` is headed ``word``; ``hub.load`` is quiet and leaves logging as it found it; a wrong ``data=`` is
one ``CheckpointError`` line naming the missing file; ``from_pretrained``'s refusal names the data directory
fairseq would read. The independent computations: the explicit sources' own scores, and the paths on disk."""
import csv
import io
import os
import sys

import pytest

import launcher
from conftest import PLUGIN, ROOT, STOCK_LM, txl
from sipe_fairseq import hub
from sipe_fairseq.checkpoints import CheckpointError

GILT = ["--user-dir", PLUGIN, "--task", "gilt_lm", "--criterion", "gilt_lm", "--arch",
        "gilt_txl_tiny", "--tokens-per-sample", "64", "--sample-break-mode", "complete"]
SENTENCES = ["the dog sleeps .", "some owls near the cat sing ."]


@pytest.fixture(scope="module")
def checkpoints(train_checkpoint):
    pos, none, gilt, stock = train_checkpoint.many([txl("position"), txl("none"), GILT, STOCK_LM])
    return {"pos": pos, "none": none, "gilt": gilt, "stock": stock}


@pytest.fixture(scope="module")
def models(checkpoints):
    return {name: hub.load(ck) for name, ck in checkpoints.items()}


@pytest.mark.parametrize("name,expected", [("pos", "self"), ("gilt", "self"), ("none", "untagged"),
                                           ("stock", "untagged")])
def test_the_default_source_is_exact(models, name, expected):
    """No ``tags``: the model's own structure for a model with structure, the plain model without; the numbers
    are those of that source asked for by name (and for a model without structure, those of every source)."""
    lm = models[name]
    assert lm.default_source == expected
    default = lm.score(SENTENCES)
    named = lm.score(SENTENCES, tags=expected)
    for d, n in zip(default, named):
        assert d.source == expected and d.kind == "exact"
        assert d.token_logprobs == n.token_logprobs and d.word_surprisal == n.word_surprisal
    if name in ("none", "stock"):
        given = lm.score(SENTENCES, tags="given")
        assert [g.logprob for g in given] == pytest.approx([d.logprob for d in default], abs=1e-9)


def surprisal(args, cwd, stdin=None):
    return launcher.run([sys.executable, "-m", "sipe_fairseq.cli.surprisal", *map(str, args)], cwd=cwd, input=stdin,
                        timeout=600)


def read_tsv(text):
    return list(csv.reader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE))


def test_sipe_surprisal_default_kind_column_and_word_header(models, checkpoints, tmp_path):
    """Without ``--tags`` the command scores under ``self`` (its numbers are ``score(tags="self")``'s); every row
    carries the kind of its number; ``--level word`` is headed ``word`` and holds the corrected word surprisals;
    several sources give one kind column each."""
    stdin = "\n".join(SENTENCES) + "\n"
    expected = models["pos"].score(SENTENCES, tags="self")
    proc = surprisal(["--path", checkpoints["pos"], "-"], tmp_path, stdin)
    assert proc.returncode == 0, proc.stderr
    rows = read_tsv(proc.stdout)
    assert rows[0] == ["sentence_id", "token_id", "token", "surprisal", "kind"]
    body = rows[1:]
    assert len(body) == sum(len(r.tokens) for r in expected)
    assert [float(x[3]) for x in body] == pytest.approx([s for r in expected for s in r.token_surprisal], abs=1e-6)
    assert {x[4] for x in body} == {"exact"}
    words = read_tsv(surprisal(["--path", checkpoints["pos"], "--level", "word", "-"], tmp_path, stdin).stdout)
    assert words[0] == ["sentence_id", "token_id", "word", "surprisal", "kind"]
    assert [x[2] for x in words[1:]] == [w for r in expected for w in r.words]
    assert [float(x[3]) for x in words[1:]] == pytest.approx([s for r in expected for s in r.word_surprisal], abs=1e-6)
    many = surprisal(["--path", checkpoints["pos"], "--tags", "given,beam:2,mix:2", "-"], tmp_path, stdin)
    assert many.returncode == 0, many.stderr
    rows = read_tsv(many.stdout)
    assert rows[0][3:] == ["surprisal[given]", "surprisal[beam:2]", "surprisal[mix:2]", "kind[given]", "kind[beam:2]",
                           "kind[mix:2]"]
    assert {tuple(x[6:]) for x in rows[1:]} == {("conditional", "bound", "exact")}


def test_load_and_score_are_quiet_and_leave_logging_as_found(checkpoints, tmp_path):
    """A user who configured logging at WARNING: loading, scoring, predicting and tokenizing write nothing to stdout
    or stderr; fairseq's and the plugin's loggers keep the levels they had (NOTSET) and the root logger its
    handlers and level."""
    script = f"""
import logging, sys
logging.basicConfig(level=logging.WARNING)
root = logging.getLogger()
handlers, level = list(root.handlers), root.level
from sipe_fairseq import hub
lm = hub.load({str(checkpoints['pos'])!r})
lm.score(["the dog sleeps ."], measures=("rank", "entropy"))
lm.predict(["the dog"], k=2, word_budget=8)
lm.tokenize(["the dog sleeps ."])
assert root.handlers == handlers and root.level == level, (root.handlers, root.level)
assert logging.getLogger("fairseq").level == logging.NOTSET and logging.getLogger("sipe_fairseq").level == logging.NOTSET
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = launcher.run([sys.executable, "-c", script], cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "" and proc.stderr == "", proc.stderr[-3000:]


@pytest.mark.parametrize("make", ["missing", "empty", "elsewhere"])
def test_a_wrong_data_directory_is_one_checkpoint_error_naming_the_file(checkpoints, tmp_path, make):
    """``data=`` a directory that does not exist, is empty or holds no dict.txt: one line, a CheckpointError (and a
    ValueError, as the commands' DataError), naming ``DIR/dict.txt``."""
    data = tmp_path / "data-bin"
    if make != "missing":
        data.mkdir()
    if make == "elsewhere":
        (data / "train.bin").write_bytes(b"")
    with pytest.raises(CheckpointError) as e:
        hub.load(checkpoints["pos"], data=data)
    assert isinstance(e.value, ValueError)
    line = str(e.value)
    assert "\n" not in line and f"{data / 'dict.txt'}: no such file" in line and str(checkpoints["pos"]) in line


def test_from_pretrained_suggests_the_data_directory_fairseq_reads(checkpoints, toy_data, tmp_path):
    """fairseq's ``from_pretrained(model_dir, checkpoint_file, data)`` reads ``data`` under ``model_dir`` when it
    starts with ``.``, else as given (fairseq.hub_utils); the refusal suggests that path, and the suggested call
    loads."""
    from sipe_fairseq.models.sipe_lm import SiPETransformerXLModel

    ck = checkpoints["pos"]
    with pytest.raises(CheckpointError) as e:
        SiPETransformerXLModel.from_pretrained(str(ck.parent), ck.name, str(toy_data))
    assert f"data={str(toy_data)!r}" in str(e.value)
    with pytest.raises(CheckpointError) as e:
        SiPETransformerXLModel.from_pretrained(str(ck.parent), ck.name, "./data-bin")
    assert f"data={os.path.join(str(ck.parent), 'data-bin')!r}" in str(e.value)
    suggested = str(e.value).split("use ", 1)[1]
    assert suggested.startswith("sipe_fairseq.hub.load(")
    assert hub.load(ck, data=str(toy_data)).score(["the dog ."])[0].tokens[-1] == "</s>"


def test_to_dataframe_columns(models):
    """The rows of ``surprisal_rows`` with the unit column named by the level and the kind of each number."""
    pd = pytest.importorskip("pandas")
    results = models["pos"].score(SENTENCES)
    frame = hub.to_dataframe(results, "word")
    assert list(frame.columns) == ["sentence_id", "token_id", "word", "surprisal", "source", "kind"]
    assert isinstance(frame, pd.DataFrame) and len(frame) == sum(len(r.words) for r in results)


@pytest.mark.parametrize("name", ["pos", "gilt"])
def test_fairseqs_own_hub_route_refuses_with_the_same_line(checkpoints, toy_data, name):
    """After ``import_user_module``, fairseq's ``TransformerLanguageModel.from_pretrained`` builds these models through
    their task: it is refused there, in the line of the models' own ``from_pretrained``, naming the call that loads."""
    import argparse

    from fairseq import utils
    from fairseq.models.transformer_lm import TransformerLanguageModel

    utils.import_user_module(argparse.Namespace(user_dir=PLUGIN))
    ck = checkpoints[name]
    with pytest.raises(CheckpointError) as e:
        TransformerLanguageModel.from_pretrained(str(ck.parent), ck.name, str(toy_data))
    assert str(e.value) == ("fairseq's from_pretrained: fairseq's hub interface cannot read this model's structure; use "
                            f"sipe_fairseq.hub.load({str(ck)!r}, data={str(toy_data)!r})")
