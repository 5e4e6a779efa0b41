"""Adding a structure source is one class: a toy source, defined and registered here only, flows through
``sipe-eval-lm --tags``, ``sipe-eval blimp``, the Python interface and ``sipe-surprisal`` without a change
to any other module. The toy source chooses each word's structure greedily from the prefix, as ``self`` does,
but it is its own class (it subclasses the bare :class:`~sipe_fairseq.structure.sources.Source`, not
``Self``), with its own name, label, rank and memory estimate; so on every surface its numbers must be those
of ``self`` (the same search, float64 sums: equal to 1e-12) and its name, label and kind of number must show."""
import json
import logging
import math

import pytest

from conftest import txl
from sipe_fairseq.data import toy_grammar as tg
from sipe_fairseq.structure import sources
from sipe_fairseq.structure.policy import GREEDY

N_PAIRS = 12
SENTENCES = ["the dog sleeps .", "some owls near the cat sing .", "the nurses see a dog ."]


class ToyGreedy(sources.Source):
    """Greedy structure from the prefix, under another name (the test's own source)."""
    name, number, mode, rank, title = "toy-greedy", "exact", GREEDY, 7, "toy greedy q(x)"

    def rows_per_sentence(self, words, family, top_pairs=0, count_beam=1):
        return 2  # a (generous) estimate of its own: the memory planner asks the source


@pytest.fixture(scope="module")
def registered():
    plugin = logging.getLogger("sipe_fairseq")
    level = plugin.level  # the commands run in this process set the plugin's logging level
    sources.register_source(ToyGreedy)
    try:
        yield
    finally:
        sources.SOURCES.pop(ToyGreedy.name)
        plugin.setLevel(level)


@pytest.fixture(scope="module")
def toy(train_checkpoint, toy_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("toy-source")
    pairs = tg.minimal_pairs(N_PAIRS, seed=7)
    tg.write_jsonl(pairs, root / "pairs.jsonl")
    trees = []
    for good, i, bad_form, _ in tg.minimal_pair_trees(N_PAIRS, seed=7):
        trees += [good, tg.ToySentence(good.words[:i] + [bad_form] + good.words[i + 1:], good.lemmas, good.upos,
                                       good.feats, good.heads, good.deprels)]
    tg.write_conllu(trees, root / "trees.conllu")
    return {"root": root, "data": toy_data, "ck": train_checkpoint(txl("position")), "pairs": root / "pairs.jsonl",
            "trees": root / "trees.conllu"}


def test_the_source_parses_and_states_its_meaning(registered):
    src = sources.parse_source("toy-greedy")
    assert isinstance(src, ToyGreedy) and str(src) == "toy-greedy" and src.number == "exact" and src.chooses
    assert src.label() == ("toy-greedy: toy greedy q(x)", False) and not src.branches
    assert sources.parse_sources("self,toy-greedy,self") == ["self", "toy-greedy"]
    with pytest.raises(ValueError, match="toy-greedy"):  # the accepted forms name the registered source
        sources.parse_source("toy-greedy:3")


def test_sipe_eval_lm(registered, toy, capsys):
    from sipe_fairseq.cli.eval_lm import main as eval_lm_main

    out = toy["root"] / "evallm.json"
    assert eval_lm_main([str(toy["data"]), "--path", f"pos={toy['ck']}", "--gen-subset", "test", "--tags",
                         "self,toy-greedy", "--json", str(out), "--no-progress"]) == 0
    assert "toy-greedy: toy greedy q(x)" in capsys.readouterr().out
    rows = json.loads(out.read_text())["pos"]["tag_sources"]
    own, toy_row = rows["self"]["per_sentence"]["nll"], rows["toy-greedy"]["per_sentence"]["nll"]
    assert len(own) == len(toy_row) > 0
    assert max(abs(a - b) for a, b in zip(own, toy_row)) < 1e-12
    assert rows["toy-greedy"]["terminal_acc"] == rows["self"]["terminal_acc"]


def test_sipe_eval_blimp(registered, toy):
    from sipe_fairseq.cli.eval import main as eval_main

    out = toy["root"] / "blimp.json"
    assert eval_main(["blimp", "--data", str(toy["data"]), "--path", f"pos={toy['ck']}", "--blimp", str(toy["pairs"]),
                      "--trees", str(toy["trees"]), "--tags", "self,toy-greedy", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    correct = report["per_pair"]["correct"]
    assert len(correct["pos [toy-greedy]"]) == N_PAIRS
    assert correct["pos [toy-greedy]"] == correct["pos [self]"]


def test_python_interface_and_sipe_surprisal(registered, toy, tmp_path, capsys):
    from sipe_fairseq import hub
    from sipe_fairseq.cli.surprisal import main as surprisal_main

    lm = hub.load(toy["ck"], data=toy["data"])
    mine, ref = lm.score(SENTENCES, tags="toy-greedy"), lm.score(SENTENCES, tags="self")
    assert [r.kind for r in mine] == ["exact"] * 3 and {r.source for r in mine} == {"toy-greedy"}
    for a, b in zip(mine, ref):
        assert abs(a.logprob - b.logprob) < 1e-12 and a.structure == b.structure
    path = tmp_path / "s.txt"
    path.write_text("\n".join(SENTENCES) + "\n")
    assert surprisal_main(["--path", str(toy["ck"]), "--data", str(toy["data"]), "--tags", "self,toy-greedy",
                           str(path)]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert rows[0][3:] == ["surprisal[self]", "surprisal[toy-greedy]", "kind[self]", "kind[toy-greedy]"]
    assert len(rows) - 1 == sum(len(r.tokens) for r in mine)
    for row in rows[1:]:
        assert row[4] == row[3] and row[5:] == ["exact", "exact"]
    total = sum(float(r[4]) for r in rows[1:] if r[0] == "1")
    assert total == pytest.approx(-mine[0].logprob / math.log(2), abs=1e-4)  # the TSV's 6 decimals, 8 tokens
