"""``sipe-eval reading-times`` end to end on tiny checkpoints and the synthetic three-story excerpt
(tests/data/naturalstories_synthetic: the corpus's layout, not its text), its bad input (one line naming the file
and line, exit status 2; alignment failures over 1%: exit status 1), ``--structural`` (accepted when the scores
carry per-word structure surprisal and entropy, refused in one line otherwise), and
``scripts/get_naturalstories.py`` (counts checked before anything is written, no partial destination, no
destination inside the repository)."""
import inspect
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import launcher
from conftest import ENV, ROOT, txl

SYNTHETIC = ROOT / "tests" / "data" / "naturalstories_synthetic"
WORDINFO = "naturalstories_RTS/processed_wordinfo.tsv"
PARSES = "parses/ud/stories-aligned.conllx"
SCRIPT = str(ROOT / "scripts" / "get_naturalstories.py")


def _eval(*args):
    return launcher.run([sys.executable, "-m", "sipe_fairseq.cli.eval", "reading-times", *map(str, args)], env=ENV,
                        timeout=600)


def _lines(stderr: str):
    return [ln for ln in stderr.splitlines() if ln.strip()]


@pytest.fixture(scope="module")
def checkpoints(train_checkpoint):
    none, sipe = train_checkpoint.many([txl("none"), txl("position")])
    return {"none": none, "position": sipe}


def _context_in_interface() -> bool:
    from sipe_fairseq.hub import interface

    return "context" in inspect.signature(interface.LanguageModel.score).parameters


def _structure_fields(checkpoint, source) -> bool:
    """Whether the interface's scores of a structured model under ``source`` carry per-word structure surprisal
    and entropy (as fields of the result, or in its ``structure``)."""
    from sipe_fairseq import hub

    [r] = hub.load(str(checkpoint)).score([(["the", "dog", "runs", "."], [2, 3, 0, 3])], tags=source)
    found = []
    for name in ("structure_surprisal", "structure_entropy"):
        value = getattr(r, name, None)
        if value is None and isinstance(r.structure, dict):
            value = r.structure.get(name)
        found.append(value is not None and len(value) == 4)
    return all(found)


def test_end_to_end_on_the_synthetic_excerpt(checkpoints, tmp_path):
    out, md = tmp_path / "rt.json", tmp_path / "rt.md"
    proc = _eval("--rt", SYNTHETIC, "--path", f"none={checkpoints['none']}", "--path", f"sipe={checkpoints['position']}",
                 "--tags", "self,given", "--bootstrap", 200, "--json", out, "--markdown", md, "--plot", tmp_path / "rt.png")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert md.read_text() == proc.stdout
    assert (tmp_path / "rt.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    n_zones = len((SYNTHETIC / WORDINFO).read_text().splitlines()) - 1
    assert report["zones"] == n_zones and report["stories"] == 3 and report["sentences"] == 21
    rows = report["rows"]
    assert [(r["checkpoint"], r["source"]) for r in rows] == [("none", "self"), ("none", "given"), ("sipe", "self"),
                                                                ("sipe", "given")]
    ctx = "in context" if _context_in_interface() else "sentence by sentence"
    # the engine reads a context under self (and any source of a model without structure), never under given
    assert [r["scoring"] for r in rows] == [ctx, ctx, ctx, "sentence by sentence"]
    assert f"{ctx}: each sentence" in proc.stdout
    assert [r["kind"] for r in rows] == ["exact", "exact", "exact", "conditional"]
    for r in rows:
        a = r["analysis"]
        assert r["alignment"]["unaligned_zones"] == 0 and r["alignment"]["zones"] == n_zones
        assert a["words"] + sum(a["excluded"].values()) == n_zones and a["excluded"]["reading time outside 100-3000 ms"] == 2
        d = a["delta_ll"]["surprisal"]
        assert math.isfinite(d["estimate"]) and d["ci95"][0] <= d["ci95"][1] and a["replicates"] == 200
        assert set(d["per_story"]) == {"1", "2", "3"} and r["perplexity_per_word"] > 1
    # a model without structure is scored once: its two sources are the same numbers; SiPE's sources differ
    assert rows[0]["analysis"]["delta_ll"] == rows[1]["analysis"]["delta_ll"]
    assert rows[2]["perplexity_per_word"] != rows[3]["perplexity_per_word"]
    assert report["frequency"]["tokens"] > 1000 and "train" in report["frequency"]["source"]
    assert "| none | self |" in proc.stdout and "| sipe | given |" in proc.stdout
    assert report["paired"] is None


def test_baseline_comparison_over_seeds_end_to_end(checkpoints, tmp_path):
    out = tmp_path / "rt.json"
    proc = _eval("--rt", SYNTHETIC, "--path", f"none-s1={checkpoints['none']}", "--path",
                 f"sipe-s1={checkpoints['position']}", "--tags", "self,given", "--baseline", "none", "--bootstrap", 100,
                 "--json", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    paired = json.loads(out.read_text())["paired"]
    assert [(c["group"], c["source"], c["measure"], c["against"]) for c in paired] == [
        ("sipe", "self", "surprisal", "none"), ("sipe", "given", "surprisal", "none")]
    rows = {(r["checkpoint"], r["source"]): r for r in json.loads(out.read_text())["rows"]}
    for c in paired:  # one seed: the difference of the two rows' ΔLL, no seed interval, no verdict
        assert c["seeds"] == [1] and c["ci95_seeds"] is None and c["verdict"] == "no difference shown"
        mine = rows[("sipe-s1", c["source"])]["analysis"]["delta_ll"]["surprisal"]["estimate"]
        theirs = rows[("none-s1", c["source"])]["analysis"]["delta_ll"]["surprisal"]["estimate"]
        assert c["mean"] == pytest.approx(mine - theirs, abs=1e-9)  # every row keeps the same words here
    assert "| sipe | self | surprisal | none | 1 |" in proc.stdout


def test_structural_is_accepted_with_the_fields_and_refused_without(checkpoints, tmp_path):
    """Per source, the structural predictors where the scores carry them, "none under SOURCE" where they do not,
    and a refusal in one line (exit status 2, nothing written) when no source of a structured model has them."""
    available = {source: _structure_fields(checkpoints["position"], source) for source in ("self", "given")}
    out = tmp_path / "rt.json"
    proc = _eval("--rt", SYNTHETIC, "--path", f"none={checkpoints['none']}", "--path", f"sipe={checkpoints['position']}",
                 "--tags", "self,given", "--structural", "--bootstrap", 100, "--json", out)
    if not any(available.values()):
        assert proc.returncode == 2 and not out.exists() and "Traceback" not in proc.stderr
        last = _lines(proc.stderr)[-1]
        assert "--structural: sipe: the scores under self, given carry no per-word structure_surprisal" in last
        return
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["structure_scores"] for r in rows] == [False, False, available["self"], available["given"]]
    for r in rows[2:]:
        assert ("structural" in r["analysis"]["delta_ll"]) == r["structure_scores"]
        if r["structure_scores"]:
            assert math.isfinite(r["analysis"]["delta_ll"]["structural"]["estimate"])
        else:
            assert f"none under {r['source']}" in proc.stdout
    assert proc.stdout.count("| no structure |") == 2  # the none model's two rows
    alone = _eval("--rt", SYNTHETIC, "--path", f"sipe={checkpoints['position']}", "--tags",
                  ",".join(s for s, ok in available.items() if not ok) or "untagged", "--structural", "--bootstrap", 10,
                  "--json", tmp_path / "none.json")
    if all(available.values()):  # untagged reads no structure: nothing to refuse
        assert alone.returncode == 0, alone.stderr[-2000:]
    else:
        assert alone.returncode == 2 and "carry no per-word structure_surprisal" in _lines(alone.stderr)[-1]
        assert not (tmp_path / "none.json").exists()


def _copy(tmp_path) -> Path:
    dest = tmp_path / "ns"
    shutil.copytree(SYNTHETIC, dest)
    return dest


def test_bad_reading_time_files_are_one_line_naming_file_and_line(tmp_path):
    missing = _eval("--rt", tmp_path / "nowhere", "--path", "x=ck.pt")
    assert missing.returncode == 2 and len(_lines(missing.stderr)) == 1 and "nowhere: no such directory" in missing.stderr
    corpus = _copy(tmp_path)
    (corpus / WORDINFO).unlink()
    proc = _eval("--rt", corpus, "--path", "x=ck.pt")
    assert proc.returncode == 2 and len(_lines(proc.stderr)) == 1 and "processed_wordinfo.tsv: no such file" in proc.stderr
    corpus = _copy(tmp_path / "b")
    lines = (SYNTHETIC / WORDINFO).read_text().splitlines()
    lines[4] = "\t".join(lines[4].split("\t")[:3])  # line 5: three fields
    (corpus / WORDINFO).write_text("\n".join(lines) + "\n")
    proc = _eval("--rt", corpus, "--path", "x=ck.pt")
    assert proc.returncode == 2 and len(_lines(proc.stderr)) == 1, proc.stderr
    assert "processed_wordinfo.tsv:5: 3 fields, expected 8" in proc.stderr and "Traceback" not in proc.stderr
    lines = (SYNTHETIC / WORDINFO).read_text().splitlines()
    fields = lines[7].split("\t")
    fields[4] = "fast"
    lines[7] = "\t".join(fields)
    (corpus / WORDINFO).write_text("\n".join(lines) + "\n")
    proc = _eval("--rt", corpus, "--path", "x=ck.pt")
    assert proc.returncode == 2 and "processed_wordinfo.tsv:8:" in proc.stderr and len(_lines(proc.stderr)) == 1
    corpus = _copy(tmp_path / "c")
    parses = (corpus / PARSES).read_text().splitlines()
    parses[2] = parses[2].replace("TokenId=", "Token=")
    (corpus / PARSES).write_text("\n".join(parses) + "\n")
    proc = _eval("--rt", corpus, "--path", "x=ck.pt")
    assert proc.returncode == 2 and "stories-aligned.conllx:3: no TokenId" in proc.stderr and len(_lines(proc.stderr)) == 1


def test_alignment_failures_over_one_percent_exit_1_naming_them(checkpoints, tmp_path):
    corpus = _copy(tmp_path)
    lines = (SYNTHETIC / WORDINFO).read_text().splitlines()
    changed = 0
    for k in range(1, len(lines)):
        fields = lines[k].split("\t")
        if fields[2] == "2" and fields[0].isalpha() and changed < 4:  # four words of story 2 read differently
            fields[0] = fields[0] + "x"
            lines[k] = "\t".join(fields)
            changed += 1
    (corpus / WORDINFO).write_text("\n".join(lines) + "\n")
    out = tmp_path / "rt.json"
    proc = _eval("--rt", corpus, "--path", f"none={checkpoints['none']}", "--bootstrap", 10, "--json", out)
    assert proc.returncode == 1 and not out.exists()
    last = _lines(proc.stderr)[-1]
    n_zones = len(lines) - 1
    assert f"none under self: 4 of {n_zones} words unaligned" in last and "story 2 sentence" in last, proc.stderr


def _fetch(*args):
    return subprocess.run([sys.executable, SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=120)


def _checkout(tmp_path) -> Path:
    src = _copy(tmp_path)
    (src / "LICENSE.txt").write_text("a licence\n")
    return src


def test_get_naturalstories_copies_checks_and_refuses(tmp_path):
    src = _checkout(tmp_path)
    out = _fetch(tmp_path / "dest", "--from", src)
    assert out.returncode == 0, out.stderr
    n_zones = len((SYNTHETIC / WORDINFO).read_text().splitlines()) - 1
    assert f"3 stories, {n_zones} words with reading times, 21 sentences" in out.stdout and "sha256" in out.stdout
    assert "not the pinned" in out.stderr  # a folder: no commit, the published counts not checked
    for path in (WORDINFO, PARSES, "LICENSE.txt"):
        assert (tmp_path / "dest" / path).read_bytes() == (src / path).read_bytes()
    # from git (a mirror lacking a file the corpus does not need: only the three files are read)
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    (src / "naturalstories_RTS" / "processed_RTs.tsv").write_text("not needed\n")
    subprocess.run(["git", "-C", str(src), "add", "."], check=True)
    subprocess.run(["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"], check=True)
    (src / WORDINFO).unlink()  # only the git objects hold it now
    again = _fetch(tmp_path / "dest2", "--from", src)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split("sha256 ")[-1][:16] == out.stdout.split("sha256 ")[-1][:16]
    assert not (tmp_path / "dest2" / "naturalstories_RTS" / "processed_RTs.tsv").exists()
    inside = _fetch(ROOT / "ns-here", "--from", src)
    assert inside.returncode == 2 and "inside this repository" in inside.stderr and not (ROOT / "ns-here").exists()


def test_get_naturalstories_refuses_a_damaged_copy_leaving_the_old_whole(tmp_path):
    src = _checkout(tmp_path)
    dest = tmp_path / "dest"
    assert _fetch(dest, "--from", src).returncode == 0
    before = sorted((p.relative_to(dest).as_posix(), p.read_bytes()) for p in dest.rglob("*") if p.is_file())
    parses = (src / PARSES).read_text().splitlines()
    (src / PARSES).write_text("\n".join(parses[:len(parses) // 2]) + "\n")  # a truncated copy: zones in no sentence
    out = _fetch(dest, "--from", src)
    assert out.returncode == 1 and out.stdout == "" and len(_lines(out.stderr)) == 1
    assert "stories-aligned.conllx" in out.stderr and "in no sentence" in out.stderr
    assert sorted((p.relative_to(dest).as_posix(), p.read_bytes()) for p in dest.rglob("*") if p.is_file()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest", "ns"]  # no temporary folder left
    (src / PARSES).write_text("\n".join(parses) + "\n")
    lines = (src / WORDINFO).read_text().splitlines()
    lines[3] = lines[3] + "\textra"
    (src / WORDINFO).write_text("\n".join(lines) + "\n")
    fresh = _fetch(tmp_path / "fresh", "--from", src)
    assert fresh.returncode == 1 and "processed_wordinfo.tsv:4: 9 fields, expected 8" in fresh.stderr
    assert not (tmp_path / "fresh").exists()


class _FakeLM:
    """A stand-in for the interface's LanguageModel: records each call of ``score``."""
    reads_structure = False

    def __init__(self):
        self.calls = []

    def _result(self, item):
        words = list(item[0] if isinstance(item, tuple) else item)
        return type("R", (), {"words": words, "word_surprisal": [float(len(w)) for w in words], "kind": "exact",
                              "structure": None})()

    def score(self, texts, tags="given"):
        self.calls.append((tags, [t if isinstance(t, tuple) else list(t) for t in texts], None))
        return [self._result(t) for t in texts]


class _FakeContextLM(_FakeLM):
    def score(self, texts, tags="given", context=None):
        self.calls.append((tags, [t if isinstance(t, tuple) else list(t) for t in texts], context))
        return [self._result(t) for t in texts]


def test_the_context_rule_follows_the_interface():
    from sipe_fairseq.cli.eval_commands.reading_times import _Scorer
    from sipe_fairseq.eval.reading_times import read_corpus

    corpus = read_corpus(SYNTHETIC)
    plain = _FakeLM()
    scorer = _Scorer(plain, "auto")
    scored, _ = scorer.score(corpus, "self")
    assert scorer.scoring("self") == "sentence by sentence" and len(plain.calls) == 3  # one batch per story
    assert [len(c[1]) for c in plain.calls] == [len(corpus.story_sentences(i)) for i in corpus.stories]
    assert all(c[0] == "self" and c[2] is None for c in plain.calls)
    ctx = _FakeContextLM()
    scorer = _Scorer(ctx, "auto")
    scored_ctx, _ = scorer.score(corpus, "self")
    assert scorer.scoring("self") == "in context" and len(ctx.calls) == 3  # one call per story, one context per text
    for call, item in zip(ctx.calls, corpus.stories):  # each sentence after its own story's preceding sentences
        idx = corpus.story_sentences(item)
        _, texts, contexts = call
        assert texts == [corpus.sentences[i].words for i in idx] and len(contexts) == len(idx)
        for j in range(len(idx)):
            expected = [corpus.sentences[k].words for k in idx[:j]]
            assert contexts[j] == (expected or None)
    assert [s.surprisal for s in scored_ctx] == [s.surprisal for s in scored]
    assert _Scorer(_FakeContextLM(), "off").scoring("self") == "sentence by sentence"
    structured = _FakeContextLM()
    structured.reads_structure = True  # the engine reads a context under self and mix:K only
    scorer = _Scorer(structured, "auto")
    assert [scorer.scoring(s) for s in ("self", "mix:4", "given", "beam:4", "untagged")] == \
        ["in context", "in context", "sentence by sentence", "sentence by sentence", "sentence by sentence"]
    scorer.score(corpus, "given")
    assert all(c[2] is None for c in structured.calls) and all(isinstance(t, tuple) for c in structured.calls for t in c[1])


def test_a_missing_checkpoint_is_exit_3_after_the_corpus_is_read(tmp_path):
    proc = _eval("--rt", SYNTHETIC, "--path", f"a={tmp_path / 'none.pt'}")
    assert proc.returncode == 3 and _lines(proc.stderr) == [f"ERROR sipe-eval: checkpoint {tmp_path / 'none.pt'}: no such file"]


def test_get_naturalstories_checks_the_published_counts_at_the_pinned_commit(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("get_naturalstories", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    src = _checkout(tmp_path)
    files = {p: (src / p).read_bytes() for p in mod.FILES}
    counts = mod.check(files, "here", pinned=False)  # another commit: the structure only
    assert counts["stories"] == 3 and counts["sentences"] == 21
    with pytest.raises(mod.CorpusError, match="published at 4700daa: .*a truncated or altered copy"):
        mod.check(files, "here", pinned=True)  # the excerpt is not the corpus at the pinned commit
    with pytest.raises(mod.CorpusError, match="LICENSE.txt is missing"):
        mod.check({p: c for p, c in files.items() if p != "LICENSE.txt"}, "here", pinned=False)


def test_kept_scores_are_read_back_and_keyed_by_what_changes_a_number(checkpoints, tmp_path):
    """``--scores DIR``: a first run keeps one file per checkpoint and source (one for the model without structure);
    a second run reads them (nothing scored: the same report), and a kept file whose numbers are changed by hand
    changes the report as predicted (its perplexity per word doubles when every surprisal gains one bit); a file
    that does not carry its own key is scored again, warned and replaced; another --tags-mass is another key."""
    kept = tmp_path / "kept"
    argv = ["--rt", SYNTHETIC, "--path", f"none-s1={checkpoints['none']}", "--path", f"sipe-s1={checkpoints['position']}",
            "--tags", "self,given", "--baseline", "none", "--bootstrap", 100, "--scores", kept]
    first = _eval(*argv, "--json", tmp_path / "a.json")
    assert first.returncode == 0, first.stderr[-3000:]
    files = sorted(kept.glob("*.json"))
    assert len(files) == 3 and first.stderr.count("scoring 21 sentences") == 3, first.stderr[-3000:]
    second = _eval(*argv, "--json", tmp_path / "b.json")
    assert second.returncode == 0 and "scoring 21 sentences" not in second.stderr, second.stderr[-3000:]
    assert second.stderr.count("read from") == 3
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("a.json", "b.json"))
    assert [r["stored_scores"] for r in b["rows"]] == [r["stored_scores"] for r in a["rows"]]
    assert [r["analysis"] for r in b["rows"]] == [r["analysis"] for r in a["rows"]] and b["paired"] == a["paired"]
    # the file of sipe-s1 under self, its surprisals one bit higher: perplexity per word x2, read back as kept
    row = next(r for r in a["rows"] if (r["checkpoint"], r["source"]) == ("sipe-s1", "self"))
    record = json.loads(Path(row["stored_scores"]).read_text())
    for s in record["sentences"]:
        s["surprisal"] = [v + 1.0 for v in s["surprisal"]]
    Path(row["stored_scores"]).write_text(json.dumps(record))
    none_row = next(r for r in a["rows"] if r["checkpoint"] == "none-s1")
    broken = json.loads(Path(none_row["stored_scores"]).read_text())
    Path(none_row["stored_scores"]).write_text(json.dumps({**broken, "key": "0" * 64}))
    third = _eval(*argv, "--json", tmp_path / "c.json")
    assert third.returncode == 0, third.stderr[-3000:]
    c = {(r["checkpoint"], r["source"]): r for r in json.loads((tmp_path / "c.json").read_text())["rows"]}
    assert c[("sipe-s1", "self")]["perplexity_per_word"] == pytest.approx(2 * row["perplexity_per_word"], rel=1e-9)
    assert c[("none-s1", "self")]["perplexity_per_word"] == pytest.approx(none_row["perplexity_per_word"], rel=1e-12)
    assert third.stderr.count("stored scores not used") == 1 and third.stderr.count("scoring 21 sentences") == 1
    assert json.loads(Path(none_row["stored_scores"]).read_text())["key"] == Path(none_row["stored_scores"]).stem
    fourth = _eval(*argv, "--tags-mass", 0.5, "--json", tmp_path / "d.json")
    assert fourth.returncode == 0 and fourth.stderr.count("scoring 21 sentences") == 3, fourth.stderr[-3000:]
    assert len(list(kept.glob("*.json"))) == 6
