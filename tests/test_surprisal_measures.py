"""Issue 50: ``sipe-surprisal --measures rank,entropy`` (per token): the columns are what ``LanguageModel.score(...,
measures=("rank", "entropy"))`` gives each token (itself checked against a full softmax in
tests/test_toolkit_predict.py), one pair per source; refused at ``--level word`` and under a bound."""
import io

import pytest

from sipe_fairseq.cli import surprisal as cli
from sipe_fairseq.hexatag.lines import LineInput
from test_context_hub import lms  # noqa: F401

SENTENCES = ["the dog sees a cat", "a cat runs", "the bell is old ."]


@pytest.mark.parametrize("name,sources", [("sipe", ["self", "mix:4"]), ("gilt", ["self"]), ("none", ["untagged"])])
def test_rank_and_entropy_columns(lms, tmp_path, name, sources):  # noqa: F811
    lm = lms[name]
    path = tmp_path / "s.txt"
    path.write_text("\n".join(SENTENCES) + "\n")
    out = io.StringIO()
    with LineInput(str(path)) as source:
        cli.write_tsv(out, lm, source, "text", sources, 2, "token", ("surprisal", "rank", "entropy"))
    rows = [line.split("\t") for line in out.getvalue().splitlines()]
    one = len(sources) == 1
    names = [c if one else f"{c}[{s}]" for c in ("rank", "entropy") for s in sources]
    assert rows[0][3 + len(sources):3 + 3 * len(sources)] == names
    body = rows[1:]
    for k, tags in enumerate(sources):
        want = lm.score(SENTENCES, tags, ("rank", "entropy"))
        expected = [(str(r), e) for w in want for r, e in zip(w.token_rank, w.token_entropy)]
        ranks = [row[3 + len(sources) + k] for row in body]
        entropies = [float(row[3 + 2 * len(sources) + k]) for row in body]
        assert ranks == [r for r, _ in expected] and all(int(r) >= 1 for r in ranks)
        assert max(abs(x - e) for x, (_, e) in zip(entropies, expected)) <= 5e-7


@pytest.mark.parametrize("argv,message", [
    (["--measures", "rank", "--level", "word"], "--measures rank: per token (the next-token distribution): use --level token"),
    (["--measures", "entropy,nope"], "--measures 'entropy,nope': nope is not one of surprisal, structure, rank, entropy"),
])
def test_measure_usage_errors(tmp_path, caplog, argv, message):
    path = tmp_path / "s.txt"
    path.write_text("a b\n")
    assert cli.main(["--path", str(tmp_path / "none.pt"), str(path), *argv]) == 2
    assert message in caplog.text


def test_no_distribution_under_a_bound():
    with pytest.raises(ValueError, match="under beam:4: a bound has no next-token distribution"):
        cli.check_measures(("surprisal", "rank"), ["self", "beam:4"])
    cli.check_measures(("surprisal",), ["beam:4"])  # surprisal alone: any source
