"""The fault suite: a table of bad inputs and faults, one row per case, each run as a user would run it, asserting
the documented exit status, one line on stderr and no traceback, and that nothing was written where an output
was asked for (a report, a TSV, a JSON). Every surface added brings its rows.

A row is a :class:`Fault`: an id, the command line (``{ck}``, ``{data}``, ``{tmp}``... are filled from the
fixtures by :func:`fill`), what is fed on stdin, the exit status, a piece of the one line it must print, and the
outputs that must not exist afterwards. Rows that need a fixture of their own (a damaged checkpoint, a data
directory without ``spm.model``) build it in ``faults_env``; rows of the Python interface are functions that
must raise the named exception with a message naming the sentence.
"""
import os
import sys
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

import pytest

import launcher


@dataclass(frozen=True)
class Fault:
    id: str
    argv: Tuple[str, ...]  # after the python executable: ("-m", "sipe_fairseq.cli.surprisal", ...)
    status: int
    message: str  # a piece of the one stderr line
    stdin: Optional[str] = None
    not_written: Tuple[str, ...] = ()  # outputs (templates) that must not exist afterwards
    setup: Optional[Callable[[dict], None]] = field(default=None, compare=False)  # builds what the row needs


@pytest.fixture(scope="module")
def faults_env(train_checkpoint, toy_data, tmp_path_factory) -> Dict[str, str]:
    """What the rows' templates name: ``ck`` (a tiny SiPE decoder), ``data`` (its data directory), ``tmp`` (a
    fresh folder per module, the commands' working directory)."""
    from conftest import txl

    return {"ck": str(train_checkpoint(txl("position"))), "data": str(toy_data),
            "tmp": str(tmp_path_factory.mktemp("faults"))}


def fill(template: str, env: Dict[str, str]) -> str:
    return template.format(**env)


def run_fault(fault: Fault, env: Dict[str, str]):
    """Run ``fault``'s command (a fork of this process, as every CLI run of the suite; tests/launcher.py) and
    check the exit status, the one line without a traceback, and that nothing was written."""
    if fault.setup is not None:
        fault.setup(env)
    argv = [sys.executable, *(fill(a, env) for a in fault.argv)]
    stdin = None if fault.stdin is None else fill(fault.stdin, env)
    proc = launcher.run(argv, cwd=env["tmp"], input=stdin, timeout=600)
    err = proc.stderr.strip()
    assert proc.returncode == fault.status, f"{fault.id}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr, f"{fault.id}: a traceback\n{proc.stderr[-2000:]}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and fill(fault.message, env) in lines[0], f"{fault.id}: {err!r}"
    for out in fault.not_written:
        path = fill(out, env)
        assert not os.path.exists(path), f"{fault.id}: {path} was written"


# Each area adds its rows (and any fixture of its own) below its header, then one parametrized test over them:
#     @pytest.mark.parametrize("fault", AREA_FAULTS, ids=lambda f: f.id)
#     def test_area_faults(fault, faults_env): run_fault(fault, faults_env)

# ============================================================================ the output boundary
# Every surface ends on a score that is not finite (a checkpoint whose finite weights overflow in the forward pass)
# with one line naming the sentence and exit status 1, nothing written; every output goes through the one writer
# (sipe_fairseq/data/writers.py): written through a FIFO or a character device, a symbolic link's target replaced,
# a write that fails (disk full, file too large, a closed pipe) one line naming the path, nothing partial left.
import json as _ob_json  # noqa: E402  (this section's own imports, kept within it)
import re as _ob_re  # noqa: E402
import stat as _ob_stat  # noqa: E402
import threading as _ob_threading  # noqa: E402
from pathlib import Path as _ObPath  # noqa: E402

OVERFLOW = 1e30  # one weight scaled by this: finite in the checkpoint, inf and then NaN in the forward pass
_OB_SENTENCE = "the cup usually glows ."
_OB_HEADS = [2, 4, 4, 0, 4]


def _ob_overflowing(ck: str, out: _ObPath) -> str:
    """A copy of checkpoint ``ck`` (a decoder or an encoder) whose last feed-forward output weight is scaled by
    OVERFLOW: a valid fairseq checkpoint with finite weights (the reader's non-finite-weights check passes), whose
    forward pass overflows."""
    import torch

    state = torch.load(ck, map_location="cpu", weights_only=False)
    weights = state["model"]
    last = max((k for k in weights if _ob_re.fullmatch(r"(?:de|en)coder\.layers\.\d+\.fc2\.weight", k)),
               key=lambda k: int(k.split(".")[2]))
    weights[last] = weights[last] * OVERFLOW
    assert all(bool(torch.isfinite(w).all()) for w in weights.values() if w.is_floating_point())
    torch.save(state, out)
    return str(out)


@pytest.fixture(scope="module")
def output_env(faults_env):
    """``faults_env`` and this section's inputs: ``bad`` (the overflowing copy of ``ck``), ``conllu`` (one sentence
    with its tree), ``many`` (100 of them), ``blimp`` (one pair), ``suite`` (one SyntaxGym item), ``prompts``."""
    from sipe_fairseq.hexatag.conllu_io import conllu_sentence

    root = _ObPath(faults_env["tmp"]) / "output-boundary"
    root.mkdir(exist_ok=True)
    block = conllu_sentence(_OB_SENTENCE.split(), _OB_HEADS, ["dep"] * 3 + ["root", "punct"])
    (root / "one.conllu").write_text(block)
    (root / "many.conllu").write_text(block * 100)
    (root / "pairs.jsonl").write_text(_ob_json.dumps({"sentence_good": _OB_SENTENCE,
                                                   "sentence_bad": "the cup usually glow ."}) + "\n")
    (root / "suite.json").write_text(_ob_json.dumps({
        "meta": {"name": "toy", "metric": "sum"}, "region_meta": {}, "predictions": [
            {"type": "formula", "formula": "(2;%a%) < (2;%b%)"}],
        "items": [{"item_number": 1, "conditions": [
            {"condition_name": c, "regions": [{"region_number": k + 1, "content": t} for k, t in enumerate(regs)]}
            for c, regs in (("a", ["the cup", "usually glows ."]), ("b", ["the cup", "usually glow ."]))]}]}))
    (root / "prompts.txt").write_text("the cup\n")
    return dict(faults_env, bad=_ob_overflowing(faults_env["ck"], root / "overflow.pt"), one=str(root / "one.conllu"),
                many=str(root / "many.conllu"), blimp=str(root / "pairs.jsonl"), suite=str(root / "suite.json"),
                prompts=str(root / "prompts.txt"))


@dataclass(frozen=True)
class OutputFault(Fault):
    """A row of this section; ``check(env, proc)``: what must hold afterwards besides the row's own checks (the FIFO
    still a FIFO, the link still a link, its target's content). A row with ``status`` 0 is a sound run of the
    boundary (written through a FIFO, a link's target replaced): nothing on stderr."""
    check: Optional[Callable] = field(default=None, compare=False)


def _ob_surprisal(*args) -> Tuple[str, ...]:
    return ("-m", "sipe_fairseq.cli.surprisal", "--data", "{data}", *args)


def _ob_efbig_argv(limit: int = 100) -> Tuple[str, ...]:
    """sipe-surprisal in a real interpreter whose files may not grow past ``limit`` bytes (RLIMIT_FSIZE, SIGXFSZ
    ignored: a write past it fails with EFBIG), set once the modules are imported."""
    code = ("import resource, runpy, signal, sys; import sipe_fairseq.cli.surprisal; "
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
            "sys.argv = ['sipe-surprisal'] + sys.argv[1:]; "
            "runpy.run_module('sipe_fairseq.cli.surprisal', run_name='__main__', alter_sys=True)")
    return ("-c", code, "--data", "{data}", "--path", "{ck}", "{many}", "--output", "{tmp}/out-efbig.tsv")


def _ob_fifo(name: str, keep: int):
    """A setup: a FIFO ``{tmp}/NAME`` and a reader that reads ``keep`` bytes (-1: everything, into
    ``env["_read"][NAME]``) and closes: a reader that leaves early before more than a pipe's buffer (64 KiB) is
    written makes the writer's next write fail (EPIPE)."""
    def setup(env):
        path = _ObPath(env["tmp"]) / name
        if path.exists():
            path.unlink()
        os.mkfifo(path)
        got = env.setdefault("_read", {})

        def read():
            with open(path, "rb") as f:
                got[name] = f.read() if keep < 0 else f.read(keep)

        reader = _ob_threading.Thread(target=read, daemon=True)
        reader.start()
        env.setdefault("_readers", []).append(reader)
    return setup


def _ob_link(name: str):
    """A setup: ``{tmp}/NAME`` a symbolic link to ``{tmp}/NAME.target``, which holds ``old``."""
    def setup(env):
        link, target = _ObPath(env["tmp"]) / name, _ObPath(env["tmp"]) / f"{name}.target"
        for p in (link, target):
            if p.is_symlink() or p.exists():
                p.unlink()
        target.write_text("old\n")
        link.symlink_to(target.name)
    return setup


def _ob_no_temporary(env) -> None:
    left = [p.name for p in _ObPath(env["tmp"]).iterdir() if p.name.startswith(".") and p.name.endswith(".tmp")]
    assert not left, f"temporary files left: {left}"


def _ob_fifo_check(name: str, whole: bool):
    def check(env, proc):
        path = _ObPath(env["tmp"]) / name
        assert _ob_stat.S_ISFIFO(os.lstat(path).st_mode), f"{path} is no longer a FIFO"
        for reader in env.get("_readers", []):
            reader.join(timeout=60)
        if whole:  # every row of the TSV came through the FIFO, to the last sentence's </s>
            rows = [r.split("\t") for r in env["_read"][name].decode().splitlines()]
            assert rows[0] == ["sentence_id", "token_id", "token", "surprisal", "kind"], rows[:2]
            assert {r[0] for r in rows[1:]} == {str(i) for i in range(1, 101)} and rows[-1][2] == "</s>", rows[-2:]
        _ob_no_temporary(env)
    return check


def _ob_link_check(name: str, replaced: bool):
    def check(env, proc):
        link, target = _ObPath(env["tmp"]) / name, _ObPath(env["tmp"]) / f"{name}.target"
        assert link.is_symlink() and os.readlink(link) == target.name, "the link itself was replaced"
        text = target.read_text()
        assert text.startswith("sentence_id\ttoken_id\ttoken\tsurprisal\tkind\n") if replaced else text == "old\n", text[:80]
        _ob_no_temporary(env)
    return check


def _ob_device_check(env, proc):
    assert _ob_stat.S_ISCHR(os.stat("/dev/full").st_mode)


_OB_NAN = "(a non-finite score: the model's forward pass overflows; nothing is written)"
OUTPUT_FAULTS = [
    # a score that is not finite: every surface, one line naming the sentence (and the column, the source)
    OutputFault("surprisal-non-finite", _ob_surprisal("--path", "{bad}", "{one}", "--tags", "given", "--output",
                                                      "{tmp}/out-surprisal.tsv"),
                1, f"{{one}}: sentence 1 ('{_OB_SENTENCE}') under given: log-probability is nan {_OB_NAN}",
                not_written=("{tmp}/out-surprisal.tsv",)),
    OutputFault("surprisal-non-finite-self", _ob_surprisal("--path", "{bad}", "{one}", "--tags", "self", "--json",
                                                           "--output", "{tmp}/out-surprisal.json"),
                1, f"sentence 1 ('{_OB_SENTENCE}') under self: ", not_written=("{tmp}/out-surprisal.json",)),
    OutputFault("blimp-non-finite", ("-m", "sipe_fairseq.cli.eval", "blimp", "--data", "{data}", "--path", "bad={bad}",
                                     "--blimp", "{blimp}", "--parser", "none", "--no-progress",
                                     "--json", "{tmp}/out-blimp.json", "--markdown", "{tmp}/out-blimp.md"),
                1, f"bad: sentence 'the cup usually glow .' under given: log-probability is nan {_OB_NAN}",
                not_written=("{tmp}/out-blimp.json", "{tmp}/out-blimp.md")),
    OutputFault("syntaxgym-non-finite", ("-m", "sipe_fairseq.cli.eval", "syntaxgym", "--data", "{data}", "--path",
                                         "bad={bad}", "--suites", "{suite}", "--parser", "none", "--no-progress",
                                         "--json", "{tmp}/out-sg.json", "--markdown", "{tmp}/out-sg.md"),
                1, "bad: suite toy item 1 condition b: sentence 'the cup usually glow .' under given: log-probability "
                f"is nan {_OB_NAN}", not_written=("{tmp}/out-sg.json", "{tmp}/out-sg.md")),
    OutputFault("eval-lm-non-finite", ("-m", "sipe_fairseq.cli.eval_lm", "{data}", "--path", "bad={bad}", "--no-progress",
                                       "--json", "{tmp}/out-evallm.json"),
                1, "split 'valid': a score is not finite (bad / lm / nll = nan): nothing reported",
                not_written=("{tmp}/out-evallm.json",)),
    OutputFault("eval-lm-non-finite-tags", ("-m", "sipe_fairseq.cli.eval_lm", "{data}", "--path", "bad={bad}",
                                            "--tags", "self", "--no-progress", "--json", "{tmp}/out-evallm-tags.json"),
                1, "{bad}: split 'valid' sentence ", not_written=("{tmp}/out-evallm-tags.json",)),
    OutputFault("generate-non-finite", ("-m", "sipe_fairseq.cli.generate", "--path", "{bad}", "--data", "{data}",
                                        "{prompts}"),
                1, f"{{prompts}}:1 ('the cup') at generation step 0: a next-token log-probability is nan {_OB_NAN}"),
    OutputFault("symlink-kept-on-non-finite", _ob_surprisal("--path", "{bad}", "{one}", "--tags", "given", "--output",
                                                            "{tmp}/link-bad"),
                1, "under given: log-probability is nan", setup=_ob_link("link-bad"),
                check=_ob_link_check("link-bad", replaced=False)),
    # the writer: written through, replaced, or one line naming the path and the reason
    OutputFault("dev-full", _ob_surprisal("--path", "{ck}", "{one}", "--output", "/dev/full"),
                1, "/dev/full: cannot write: No space left on device", check=_ob_device_check),
    OutputFault("file-too-large", _ob_efbig_argv(), 1, "{tmp}/out-efbig.tsv: cannot write: File too large",
                not_written=("{tmp}/out-efbig.tsv",), check=lambda env, proc: _ob_no_temporary(env)),
    OutputFault("fifo-reader-closes-early", _ob_surprisal("--path", "{ck}", "{many}", "--json", "--output",
                                                          "{tmp}/fifo-early"),
                1, "{tmp}/fifo-early: cannot write: Broken pipe", setup=_ob_fifo("fifo-early", 16),
                check=_ob_fifo_check("fifo-early", whole=False)),
    OutputFault("fifo-written-through", _ob_surprisal("--path", "{ck}", "{many}", "--output", "{tmp}/fifo-whole"),
                0, "", setup=_ob_fifo("fifo-whole", -1), check=_ob_fifo_check("fifo-whole", whole=True)),
    OutputFault("symlink-target-replaced", _ob_surprisal("--path", "{ck}", "{one}", "--output", "{tmp}/link-ok"),
                0, "", setup=_ob_link("link-ok"), check=_ob_link_check("link-ok", replaced=True)),
]
_OB_LOG_LINE = _ob_re.compile(r"^(?:\S+: )?INFO[: ]")  # a command's INFO log (its counts), not part of its ending


def _ob_run(monkeypatch, fault: OutputFault, env: dict):
    """``run_fault`` with the commands' INFO lines (sipe-eval's and sipe-generate's counts, logged before they
    score) left out of the one line; returns the finished process (its stdout must be empty: nothing printed)."""
    ran = []

    def run(*args, **kwargs):
        proc = real(*args, **kwargs)
        proc.stderr = "".join(line for line in proc.stderr.splitlines(True) if not _OB_LOG_LINE.match(line))
        ran.append(proc)
        return proc

    real = launcher.run
    monkeypatch.setattr(launcher, "run", run)
    monkeypatch.setenv("PYTHONWARNINGS", "ignore")  # torch's pin_memory warning, as conftest.ENV
    if fault.status:
        run_fault(fault, env)
    else:  # a sound run: exit 0, nothing on stderr
        fault.setup(env)
        run([sys.executable, *(fill(a, env) for a in fault.argv)], cwd=env["tmp"], timeout=600)
        assert ran[0].returncode == 0 and not ran[0].stderr.strip(), f"{fault.id}: {ran[0].stderr[-2000:]}"
    assert ran[0].stdout == "", f"{fault.id}: printed {ran[0].stdout[:200]!r}"
    return ran[0]


@pytest.mark.parametrize("fault", OUTPUT_FAULTS, ids=lambda f: f.id)
def test_output_boundary_faults(fault, output_env, monkeypatch):
    env = dict(output_env)
    proc = _ob_run(monkeypatch, fault, env)
    if fault.check is not None:
        fault.check(env, proc)


@pytest.fixture(scope="module")
def output_mlm_env(output_env, train_checkpoint):
    """``output_env`` and ``bad_mlm``: a SiPE masked-LM encoder (the masked-LM road, pseudo-log-likelihood) whose
    forward pass overflows."""
    from conftest import MLM_TASK

    ck = train_checkpoint([*MLM_TASK, "--arch", "sipe_deberta_tiny", "--sipe-injection", "position"])
    return dict(output_env, bad_mlm=_ob_overflowing(str(ck), _ObPath(output_env["tmp"]) / "output-boundary" / "mlm.pt"))


PLL_OUTPUT_FAULT = OutputFault(
    "blimp-pll-non-finite", ("-m", "sipe_fairseq.cli.eval", "blimp", "--data", "{data}", "--path", "enc={bad_mlm}",
                             "--blimp", "{blimp}", "--parser", "none", "--no-progress", "--json", "{tmp}/out-pll.json"),
    1, f"enc: sentence '{_OB_SENTENCE}' under given (pseudo-log-likelihood): token 1 is nan {_OB_NAN}",
    not_written=("{tmp}/out-pll.json",))


def test_output_boundary_masked_lm_road(output_mlm_env, monkeypatch):
    _ob_run(monkeypatch, PLL_OUTPUT_FAULT, dict(output_mlm_env))


PYTHON_OUTPUT_FAULTS = [  # (id, call on the loaded overflowing model, a piece of the ValueError's message)
    ("hub-score-given", lambda lm: lm.score([(_OB_SENTENCE.split(), _OB_HEADS), (["the", "cup"], [2, 0])], tags="given"),
     "sentence 2 ('the cup') under given: "),  # the shorter one is scored first: named by its own index and text
    ("hub-score-self", lambda lm: lm.score([_OB_SENTENCE], tags="self"),
     f"sentence 1 ('{_OB_SENTENCE}') under self: log-probability is nan"),
    ("hub-generate", lambda lm: lm.generate(["the cup", "the"]), "prompt 1 ('the cup') at generation step 0: "),
]


@pytest.mark.parametrize("case", PYTHON_OUTPUT_FAULTS, ids=lambda c: c[0])
def test_hub_refuses_non_finite_scores(case, output_env):
    from sipe_fairseq import hub
    from sipe_fairseq.hexatag.errors import NonFiniteScoreError

    _, call, message = case
    lm = hub.load(output_env["bad"], output_env["data"], parser="no-such-backend")
    with pytest.raises(ValueError) as err:
        call(lm)
    assert isinstance(err.value, NonFiniteScoreError) and message in str(err.value), str(err.value)
    assert "\n" not in str(err.value)



# ============================================================================ the input reader
# One reader of line-based input (sipe_fairseq/hexatag/lines.py): lines end at "\n" only, so a form feed, NEL,
# U+2028 or a lone CR inside a line shifts no sentence id (the positive tests after the rows); a line that is not
# UTF-8 is named FILE:LINE with its byte and column; an empty input is refused (2); a bad last line leaves no
# partial output (the input is read and checked whole before anything is written).
from pathlib import Path as _IrPath  # noqa: E402  (this section's own import, kept within it)

_IR_GOOD = b"the dog sleeps .\nsome owls sing .\n"
_IR_LATIN1 = _IR_GOOD + b"the caf\xe9 sleeps .\n"  # the last line: byte 0xe9 at column 8
_IR_ROW = "{}\t{}\t_\t_\t_\t_\t{}\t{}\t_\t_\n"
_IR_CONLLU = _IR_ROW.format(1, "the", 2, "det") + _IR_ROW.format(2, "dog", 0, "root") + "\n"
_IR_SURPRISAL = ("-m", "sipe_fairseq.cli.surprisal", "--data", "{data}", "--path", "{ck}")
_IR_GENERATE = ("-m", "sipe_fairseq.cli.generate", "--data", "{data}", "--path", "{ck}")
_IR_TAG = ("-m", "sipe_fairseq.cli.tag", "--no-progress")


def _ir_file(name: str, data: bytes):
    """A row's set-up: ``data`` written to ``{tmp}/name``."""
    def setup(env):
        (_IrPath(env["tmp"]) / name).write_bytes(data)
    return setup


_IR_RT = ("-m", "sipe_fairseq.cli.eval", "reading-times", "--path", "{ck}", "--rt")


def _ir_corpus(name: str, last_row: bytes):
    """A row's set-up: a Natural Stories folder ``{tmp}/name`` whose word table's third line is ``last_row`` (the
    parses are not reached: the word table is read first)."""
    def setup(env):
        root = _IrPath(env["tmp"]) / name / "naturalstories_RTS"
        root.mkdir(parents=True, exist_ok=True)
        (root / "processed_wordinfo.tsv").write_bytes(b"word\tzone\titem\tmeanItemRT\nthe\t1\t1\t310\n" + last_row)
    return setup


INPUT_FAULTS = [
    # sipe-surprisal: text
    Fault("surprisal-not-utf8-last-line", (*_IR_SURPRISAL, "{tmp}/ir-latin1.txt", "--output", "{tmp}/ir-s1.tsv"), 2,
          "{tmp}/ir-latin1.txt:3: not UTF-8 (byte 0xe9 at column 8)", not_written=("{tmp}/ir-s1.tsv",),
          setup=_ir_file("ir-latin1.txt", _IR_LATIN1)),
    Fault("surprisal-not-utf8-json", (*_IR_SURPRISAL, "{tmp}/ir-bad2.txt", "--json", "--output", "{tmp}/ir-s2.json"),
          2, "{tmp}/ir-bad2.txt:2: not UTF-8 (byte 0xff at column 1)", not_written=("{tmp}/ir-s2.json",),
          setup=_ir_file("ir-bad2.txt", b"the dog .\n\xff the cat .\nthe owl .\n")),
    Fault("surprisal-empty-stdin", (*_IR_SURPRISAL, "-", "--output", "{tmp}/ir-s3.tsv"), 2,
          "<stdin>: empty input: no sentence to score", stdin="", not_written=("{tmp}/ir-s3.tsv",)),
    Fault("surprisal-empty-file", (*_IR_SURPRISAL, "{tmp}/ir-empty.txt"), 2,
          "{tmp}/ir-empty.txt: empty input: no sentence to score", setup=_ir_file("ir-empty.txt", b"")),
    Fault("surprisal-empty-last-line", (*_IR_SURPRISAL, "-", "--output", "{tmp}/ir-s4.tsv"), 2,
          "<stdin>:3: empty line (one sentence per line)", stdin="the dog .\nthe cat .\n \x0c\n",
          not_written=("{tmp}/ir-s4.tsv",)),
    # sipe-surprisal: CoNLL-U
    Fault("surprisal-conllu-not-utf8", (*_IR_SURPRISAL, "{tmp}/ir-latin1.conllu", "--output", "{tmp}/ir-s5.tsv"), 2,
          "{tmp}/ir-latin1.conllu:5: not UTF-8 (byte 0xe9 at column 4)", not_written=("{tmp}/ir-s5.tsv",),
          setup=_ir_file("ir-latin1.conllu", (_IR_CONLLU + _IR_CONLLU.replace("\tdog", "\tdXg")).encode()
                         .replace(b"X", b"\xe9"))),
    Fault("surprisal-conllu-bad-last-line", (*_IR_SURPRISAL, "--format", "conllu", "-", "--output", "{tmp}/ir-s6.tsv"),
          2, "<stdin>:4: expected 10 tab-separated columns, got 9",
          stdin=_IR_CONLLU + _IR_ROW.format(1, "dogs", 0, "root").replace("\t_\n", "\n"),
          not_written=("{tmp}/ir-s6.tsv",)),
    Fault("surprisal-conllu-empty", (*_IR_SURPRISAL, "--format", "conllu", "-"), 2,
          "<stdin>: empty input: no sentence to score", stdin="\n\n"),
    # sipe-generate: prompts (read whole before any model is loaded; nothing on stdout)
    Fault("generate-not-utf8-last-line", (*_IR_GENERATE, "{tmp}/ir-latin1.txt"), 2,
          "{tmp}/ir-latin1.txt:3: not UTF-8 (byte 0xe9 at column 8); no prompt was generated from",
          setup=_ir_file("ir-latin1.txt", _IR_LATIN1)),
    Fault("generate-empty-input", (*_IR_GENERATE, "-"), 2, "<stdin>: empty input: no prompt to generate from",
          stdin=""),
    # sipe-tag (read whole before the backend is loaded)
    Fault("tag-not-utf8-last-line", (*_IR_TAG, "{tmp}/ir-latin1.txt", "-o", "{tmp}/ir-t1.conllu", "--tags-out",
                                     "{tmp}/ir-t1.tags"), 2,
          "{tmp}/ir-latin1.txt:3: not UTF-8 (byte 0xe9 at column 8)", not_written=("{tmp}/ir-t1.conllu",
                                                                                   "{tmp}/ir-t1.tags"),
          setup=_ir_file("ir-latin1.txt", _IR_LATIN1)),
    Fault("tag-empty-input", (*_IR_TAG, "-", "-o", "{tmp}/ir-t2.conllu"), 2, "<stdin>: empty input: no line to tag",
          stdin="", not_written=("{tmp}/ir-t2.conllu",)),
    # sipe-eval reading-times: the corpus is read (by the one line reader) before any checkpoint is looked at
    Fault("reading-times-no-corpus", (*_IR_RT, "{tmp}/ir-ns-missing", "--json", "{tmp}/ir-rt1.json"), 2,
          "{tmp}/ir-ns-missing: no such directory",
          not_written=("{tmp}/ir-rt1.json",)),
    Fault("reading-times-not-utf8", (*_IR_RT, "{tmp}/ir-ns-latin1", "--json", "{tmp}/ir-rt2.json"), 2,
          "{tmp}/ir-ns-latin1/naturalstories_RTS/processed_wordinfo.tsv:3: not UTF-8 (byte 0xe9 at column 1)",
          not_written=("{tmp}/ir-rt2.json",), setup=_ir_corpus("ir-ns-latin1", b"\xe9te\t2\t1\t300\n")),
    Fault("reading-times-short-row", (*_IR_RT, "{tmp}/ir-ns-short", "--json", "{tmp}/ir-rt3.json"), 2,
          "{tmp}/ir-ns-short/naturalstories_RTS/processed_wordinfo.tsv:3: 3 fields, expected 4",
          not_written=("{tmp}/ir-rt3.json",), setup=_ir_corpus("ir-ns-short", b"dog\t2\t1\n")),
    Fault("reading-times-line-separator-inside", (*_IR_RT, "{tmp}/ir-ns-u2028", "--json", "{tmp}/ir-rt4.json"), 2,
          "{tmp}/ir-ns-u2028/parses/ud/stories-aligned.conllx: no such file",  # the row was read whole: one line
          not_written=("{tmp}/ir-rt4.json",), setup=_ir_corpus("ir-ns-u2028", "do\u2028g\t2\t1\t300\n".encode())),
    # sipe-eval merge: what is not a shard file
    Fault("merge-not-a-shard", ("-m", "sipe_fairseq.cli.eval", "merge", "{tmp}/ir-notshard.json", "--json",
                                "{tmp}/ir-merged.json"), 2, "{tmp}/ir-notshard.json",
          not_written=("{tmp}/ir-merged.json",), setup=_ir_file("ir-notshard.json", b'{"m": {"ppl": 3.0}}')),
]


@pytest.mark.parametrize("fault", INPUT_FAULTS, ids=lambda f: f.id)
def test_input_reader_faults(fault, faults_env):
    run_fault(fault, faults_env)


# every character str.splitlines() ends a line at, but lines do not end at: each inside a sentence here
_IR_INSIDE = ["\x0c", "\x85", "\u2028", "\r", "\x0b", "\x1e", "\u2029"]


def _ir_sentences(sep: Optional[str] = None):
    """Sentences with one of _IR_INSIDE between two of their words (``sep``: a space instead)."""
    return "".join(f"the{sep or c}dog sleeps .\n" if k % 2 else f"some{sep or c}owls sing .\n"
                   for k, c in enumerate(_IR_INSIDE))


def test_input_reader_surprisal_keeps_sentence_ids(faults_env):
    """A form feed, NEL, U+2028, a lone CR... inside a line: one sentence (they separate its words), so the TSV is
    the one of the same sentences with spaces there, sentence_id 1..7 (the old str.splitlines() made 14)."""
    def run(text):
        proc = launcher.run([sys.executable, *(fill(a, faults_env) for a in _IR_SURPRISAL), "--tags", "self",
                             "--level", "word", "-"], cwd=faults_env["tmp"], input=text, timeout=600)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        return proc.stdout

    got, spaced = run(_ir_sentences()), run(_ir_sentences(" "))
    assert got == spaced
    rows = [line.split("\t") for line in got.split("\n")[1:] if line]
    assert sorted({int(r[0]) for r in rows}) == list(range(1, len(_IR_INSIDE) + 1))
    assert [r[2] for r in rows if r[0] == "3"] == ["some", "owls", "sing", "."]


def test_input_reader_generate_and_tag_keep_lines(faults_env, tmp_path):
    """sipe-generate: one block per prompt line (sent_id K.1 for line K), the prompt's words as given; sipe-tag: one
    tag line and one CoNLL-U block per input line (# sent_id = K), whatever the line holds of _IR_INSIDE."""
    from sipe_fairseq.parsing import DEFAULT_SPACY_MODEL, spacy_available

    text, n = _ir_sentences(), len(_IR_INSIDE)
    proc = launcher.run([sys.executable, *(fill(a, faults_env) for a in _IR_GENERATE), "--max-len", "2", "-"],
                        cwd=faults_env["tmp"], input=text, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.split("\n")
    assert [x for x in lines if x.startswith("# sent_id")] == [f"# sent_id = {k}.1" for k in range(1, n + 1)]
    texts = [x[len("# text = "):] for x in lines if x.startswith("# text = ")]
    assert [t.split()[:2] for t in texts] == [["some", "owls"] if k % 2 == 0 else ["the", "dog"] for k in range(n)]
    if spacy_available(DEFAULT_SPACY_MODEL) is not None:
        pytest.skip("sipe-tag's part needs spaCy's default pipeline")
    src = tmp_path / "in.txt"
    src.write_bytes(text.encode("utf-8"))
    proc = launcher.run([sys.executable, *_IR_TAG, str(src), "-o", str(tmp_path / "o.conllu"), "--tags-out",
                         str(tmp_path / "o.tags")], cwd=tmp_path, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # 1: a line spaCy could not parse (still one block)
    blocks = (tmp_path / "o.conllu").read_bytes().decode("utf-8").split("\n\n")[:-1]
    assert [b.split("\n")[0] for b in blocks] == [f"# sent_id = {k}" for k in range(1, n + 1)]
    assert len((tmp_path / "o.tags").read_bytes().decode("utf-8").split("\n")) == n + 1


# ============================================================================ data and checkpoint integrity
# A checkpoint is compared with its zip archive's CRCs at load (a damaged one: exit status 3 naming the member and
# the tensor); a data directory whose checkpoint recorded an spm.model must hold it (3, naming the file and both
# hashes, and --allow-dictionary-mismatch); a --data directory that is missing or empty (2) and a dict.txt with a
# malformed line (2, FILE:LINE) are one line before any work; every command that can refuse takes the override.
import json as _it_json  # noqa: E402  (this section's own imports, kept within it)
import re as _it_re  # noqa: E402
import shutil as _it_shutil  # noqa: E402
import struct as _it_struct  # noqa: E402
import zipfile as _it_zipfile  # noqa: E402
from pathlib import Path as _ItPath  # noqa: E402

_IT_SENTENCE = "the cup usually glows ."
_IT_HEADS = [2, 4, 4, 0, 4]


def _it_damaged(ck: str, out: _ItPath) -> Tuple[str, list]:
    """A copy of checkpoint ``ck`` with 4 KiB zeroed in the middle of its largest tensor's bytes (what a copy cut
    short or a disk error leaves; torch.load reads it without a word): ``(zip member, names of the weights stored
    in that member)``."""
    import torch

    _it_shutil.copyfile(ck, out)
    with _it_zipfile.ZipFile(ck) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
        raw = archive.read(info.filename)
    with open(out, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = _it_struct.unpack("<HH", f.read(4))
        f.seek(info.header_offset + 30 + name_len + extra_len + info.file_size // 2 - 2048)
        f.write(bytes(4096))
    weights = torch.load(ck, map_location="cpu", weights_only=False)["model"]
    names = [k for k, v in weights.items() if torch.is_tensor(v) and bytes(v.untyped_storage()) == raw]
    assert info.file_size >= 8192 and names, (info.filename, info.file_size)
    return info.filename, names


@pytest.fixture(scope="module")
def integrity_env(faults_env):
    """``faults_env`` and this section's inputs, copies of its ones: ``damaged`` (``ck`` with 4 KiB zeroed inside a
    weight; ``member`` and ``tensor``: what the refusal names), ``nospm`` (``data`` without spm.model; ``spm_sha``:
    the hash ``ck`` recorded), ``baddict`` (``data`` with line 7 of dict.txt malformed), ``dupdict`` (line 9 repeats
    line 5's symbol), ``empty`` (an empty directory), ``missing`` (none), ``pairs``, ``suite``, ``conllu``,
    ``sentences``, ``prompts``."""
    from sipe_fairseq.data.writers import sha256_file
    from sipe_fairseq.hexatag.conllu_io import conllu_sentence

    root = _ItPath(faults_env["tmp"]) / "integrity"
    root.mkdir(exist_ok=True)
    data = _ItPath(faults_env["data"])
    member, names = _it_damaged(faults_env["ck"], root / "damaged.pt")
    dirs = {}
    for name in ("nospm", "baddict", "dupdict"):
        dirs[name] = root / name
        if not dirs[name].exists():
            _it_shutil.copytree(data, dirs[name])
    (dirs["nospm"] / "spm.model").unlink(missing_ok=True)
    lines = (data / "dict.txt").read_text(encoding="utf-8").splitlines(True)
    (dirs["baddict"] / "dict.txt").write_text("".join(lines[:6] + ["brokenline\n"] + lines[7:]), encoding="utf-8")
    (dirs["dupdict"] / "dict.txt").write_text("".join(lines[:8] + [lines[4]] + lines[9:]), encoding="utf-8")
    (root / "empty").mkdir(exist_ok=True)
    (root / "pairs.jsonl").write_text(_it_json.dumps({"sentence_good": _IT_SENTENCE,
                                                      "sentence_bad": "the cup usually glow ."}) + "\n")
    (root / "suite.json").write_text(_it_json.dumps({
        "meta": {"name": "toy", "metric": "sum"}, "region_meta": {}, "predictions": [
            {"type": "formula", "formula": "(2;%a%) < (2;%b%)"}],
        "items": [{"item_number": 1, "conditions": [
            {"condition_name": c, "regions": [{"region_number": k + 1, "content": t} for k, t in enumerate(regs)]}
            for c, regs in (("a", ["the cup", "usually glows ."]), ("b", ["the cup", "usually glow ."]))]}]}))
    (root / "one.conllu").write_text(conllu_sentence(_IT_SENTENCE.split(), _IT_HEADS, ["det", "nsubj", "advmod",
                                                                                      "root", "punct"]))
    (root / "sentences.txt").write_text(_IT_SENTENCE + "\n")
    (root / "prompts.txt").write_text("the cup\n")
    return dict(faults_env, damaged=str(root / "damaged.pt"), member=member, tensor=names[0], tensors=names,
                **{k: str(v) for k, v in dirs.items()}, empty=str(root / "empty"), missing=str(root / "missing"),
                spm_sha=sha256_file(str(data / "spm.model")), pairs=str(root / "pairs.jsonl"),
                suite=str(root / "suite.json"), conllu=str(root / "one.conllu"), sentences=str(root / "sentences.txt"),
                prompts=str(root / "prompts.txt"))


_IT_EVAL_LM = ("-m", "sipe_fairseq.cli.eval_lm")
_IT_SURPRISAL = ("-m", "sipe_fairseq.cli.surprisal")
_IT_GENERATE = ("-m", "sipe_fairseq.cli.generate")


def _it_eval(command: str, data: str, *args) -> Tuple[str, ...]:
    """``sipe-eval COMMAND --data DATA ...`` with this section's inputs (no parser: no spaCy)."""
    inputs = {"blimp": ("--blimp", "{pairs}", "--parser", "none"), "syntaxgym": ("--suites", "{suite}", "--parser", "none"),
              "attention": ("--conllu", "{conllu}"), "report": ("--blimp", "{pairs}", "--parser", "none", "--no-ppl")}
    return ("-m", "sipe_fairseq.cli.eval", command, "--data", data, *inputs[command], "--no-progress", *args)


_IT_DAMAGED = "{damaged}: damaged: zip member {member} (it holds tensor {tensor}) does not match the CRC-32 recorded"
_IT_NO_SPM = "spm.model is missing: {nospm}/spm.model: no such file, "
_IT_RECORDED = ("the checkpoint recorded sha256 {spm_sha} (data: no file; its manifest.json records {spm_sha}): "
                "without it every raw-text word is encoded as <unk>")
_IT_BAD_LINE = "{baddict}/dict.txt:7: not a fairseq dictionary line '<token> <count> [#fairseq:overwrite]': 'brokenline'"
_IT_OUT = "{tmp}/integrity-out"
INTEGRITY_FAULTS = [
    # 2. a damaged checkpoint: exit 3 naming the member and its tensor (before: perplexity 227 instead of 145, exit 0)
    Fault("eval-lm-damaged-checkpoint", (*_IT_EVAL_LM, "{data}", "--path", "{damaged}", "--json", _IT_OUT + "1.json"),
          3, _IT_DAMAGED, not_written=(_IT_OUT + "1.json",)),
    Fault("surprisal-damaged-checkpoint", (*_IT_SURPRISAL, "--data", "{data}", "--path", "{damaged}", "{sentences}",
                                           "--output", _IT_OUT + "2.tsv"), 3, _IT_DAMAGED, not_written=(_IT_OUT + "2.tsv",)),
    Fault("blimp-damaged-checkpoint", _it_eval("blimp", "{data}", "--path", "{damaged}", "--json", _IT_OUT + "3.json"),
          3, _IT_DAMAGED, not_written=(_IT_OUT + "3.json",)),
    Fault("generate-damaged-checkpoint", (*_IT_GENERATE, "--data", "{data}", "--path", "{damaged}", "{prompts}"),
          3, _IT_DAMAGED),
    # ... and under fairseq's own command, whose loader reads the archive without its CRCs
    Fault("fairseq-eval-lm-damaged-checkpoint", ("-m", "fairseq_cli.eval_lm", "{data}", "--path", "{damaged}", "--user-dir",
                                                 str(_ItPath(__file__).resolve().parents[1] / "sipe_fairseq"), "--task",
                                                 "hexatag_lm"), 3, "sipe_fairseq: error: checkpoint " + _IT_DAMAGED),
    # 1. spm.model missing where the checkpoint recorded one: 3, the file, both hashes, the override
    Fault("eval-lm-no-spm", (*_IT_EVAL_LM, "{nospm}", "--path", "{ck}", "--json", _IT_OUT + "4.json"),
          3, _IT_NO_SPM + _IT_RECORDED, not_written=(_IT_OUT + "4.json",)),
    Fault("surprisal-no-spm", (*_IT_SURPRISAL, "--data", "{nospm}", "--path", "{ck}", "{sentences}", "--output",
                               _IT_OUT + "5.tsv"), 3, _IT_NO_SPM + _IT_RECORDED, not_written=(_IT_OUT + "5.tsv",)),
    Fault("generate-no-spm", (*_IT_GENERATE, "--data", "{nospm}", "--path", "{ck}", "{prompts}"),
          3, _IT_NO_SPM + _IT_RECORDED),
    # ... also where only the raw-text encoder needs it (before: BLiMP 0.0% instead of 12.0%, exit 0)
    Fault("blimp-no-spm", _it_eval("blimp", "{nospm}", "--path", "{ck}", "--json", _IT_OUT + "6.json"),
          3, _IT_NO_SPM, not_written=(_IT_OUT + "6.json",)),
    Fault("syntaxgym-no-spm", _it_eval("syntaxgym", "{nospm}", "--path", "{ck}", "--json", _IT_OUT + "7.json"),
          3, _IT_NO_SPM, not_written=(_IT_OUT + "7.json",)),
    Fault("attention-no-spm", _it_eval("attention", "{nospm}", "--path", "{ck}", "--json", _IT_OUT + "8.json"),
          3, _IT_NO_SPM, not_written=(_IT_OUT + "8.json",)),
    Fault("report-no-spm", _it_eval("report", "{nospm}", "--path", "{ck}", "--json", _IT_OUT + "9.json"),
          3, _IT_NO_SPM, not_written=(_IT_OUT + "9.json",)),
    # 3. a --data directory that is missing or empty: 2, before any work (5: with the override, which is accepted)
    Fault("eval-lm-missing-data", (*_IT_EVAL_LM, "{missing}", "--path", "{ck}"), 2,
          "data directory {missing}: no such directory"),
    Fault("eval-lm-empty-data", (*_IT_EVAL_LM, "{empty}", "--path", "{ck}", "--allow-dictionary-mismatch"), 2,
          "data directory {empty}: empty: make one from CoNLL-U with `sipe-preprocess --destdir {empty} ...`"),
    Fault("blimp-missing-data", _it_eval("blimp", "{missing}", "--path", "{ck}", "--allow-dictionary-mismatch", "--json",
                                         _IT_OUT + "10.json"),
          2, "data directory {missing}: no such directory", not_written=(_IT_OUT + "10.json",)),
    Fault("syntaxgym-empty-data", _it_eval("syntaxgym", "{empty}", "--path", "{ck}", "--allow-dictionary-mismatch"), 2,
          "data directory {empty}: empty"),
    Fault("attention-missing-data", _it_eval("attention", "{missing}", "--path", "{ck}", "--allow-dictionary-mismatch"),
          2, "data directory {missing}: no such directory"),
    Fault("report-missing-data", _it_eval("report", "{missing}", "--path", "{ck}", "--allow-dictionary-mismatch"), 2,
          "data directory {missing}: no such directory"),
    Fault("surprisal-missing-data", (*_IT_SURPRISAL, "--data", "{missing}", "--path", "{ck}", "{sentences}",
                                     "--allow-dictionary-mismatch"), 2, "data directory {missing}: no such directory"),
    Fault("surprisal-empty-data", (*_IT_SURPRISAL, "--data", "{empty}", "--path", "{ck}", "-"), 2,
          "data directory {empty}: empty", stdin=_IT_SENTENCE + "\n"),
    # 4. a malformed dict.txt line: 2 (fairseq commands: 1), naming the file and the line
    Fault("eval-lm-malformed-dict", (*_IT_EVAL_LM, "{baddict}", "--path", "{ck}"), 2, _IT_BAD_LINE),
    Fault("eval-lm-duplicate-symbol", (*_IT_EVAL_LM, "{dupdict}", "--path", "{ck}"), 2,
          "{dupdict}/dict.txt:9: token "),
    Fault("blimp-malformed-dict", _it_eval("blimp", "{baddict}", "--path", "{ck}"), 2, _IT_BAD_LINE),
    Fault("syntaxgym-malformed-dict", _it_eval("syntaxgym", "{baddict}", "--path", "{ck}"), 2, _IT_BAD_LINE),
    Fault("surprisal-malformed-dict", (*_IT_SURPRISAL, "--data", "{baddict}", "--path", "{ck}", "{sentences}"), 2,
          _IT_BAD_LINE),
    Fault("fairseq-eval-lm-malformed-dict", ("-m", "fairseq_cli.eval_lm", "{baddict}", "--path", "{ck}", "--user-dir",
                                             str(_ItPath(__file__).resolve().parents[1] / "sipe_fairseq"), "--task",
                                             "hexatag_lm"), 1, "sipe_fairseq: error: " + _IT_BAD_LINE),
]
_IT_LOG_LINE = _it_re.compile(r"^(?:\S+: )?(?:INFO|DEBUG)[: ]|\| (?:INFO|DEBUG) \|")  # a command's counts, fairseq's settings


def _it_run(monkeypatch, fault: Fault, env: dict) -> None:
    """``run_fault`` with the commands' INFO and DEBUG lines (sipe-eval's counts, fairseq's settings) left out of the
    one line, and stdout empty (nothing printed)."""
    ran = []

    def run(*args, **kwargs):
        proc = real(*args, **kwargs)
        proc.stderr = "".join(line for line in proc.stderr.splitlines(True) if not _IT_LOG_LINE.search(line))
        ran.append(proc)
        return proc

    real = launcher.run
    monkeypatch.setattr(launcher, "run", run)
    monkeypatch.setenv("PYTHONWARNINGS", "ignore")  # torch's and fairseq's warnings, as conftest.ENV
    monkeypatch.delenv("SIPE_SKIP_CHECKPOINT_CRC", raising=False)
    run_fault(fault, env)
    assert ran[0].stdout.strip() == "", f"{fault.id}: printed {ran[0].stdout[:200]!r}"


@pytest.mark.parametrize("fault", INTEGRITY_FAULTS, ids=lambda f: f.id)
def test_integrity_faults(fault, integrity_env, monkeypatch):
    _it_run(monkeypatch, fault, dict(integrity_env))


def _it_score(lm) -> list:
    [scored] = lm.score([_IT_SENTENCE], tags="self")
    return scored.token_surprisal


def test_hub_refuses_a_damaged_checkpoint_unless_the_check_is_skipped(integrity_env, monkeypatch):
    """hub.load: the same one line as the commands; SIPE_SKIP_CHECKPOINT_CRC=1 loads the damaged file (its scores
    are not the intact checkpoint's: what the check is for)."""
    from sipe_fairseq import hub
    from sipe_fairseq.hexatag.errors import CheckpointError

    monkeypatch.delenv("SIPE_SKIP_CHECKPOINT_CRC", raising=False)
    with pytest.raises(CheckpointError) as err:
        hub.load(integrity_env["damaged"], integrity_env["data"])
    assert str(err.value) == ("checkpoint " + fill(_IT_DAMAGED, integrity_env)
                              + " when it was saved (changed on disk or in a copy); use an intact copy")
    assert integrity_env["tensor"] in integrity_env["tensors"]
    monkeypatch.setenv("SIPE_SKIP_CHECKPOINT_CRC", "1")
    damaged = _it_score(hub.load(integrity_env["damaged"], integrity_env["data"]))
    assert damaged != _it_score(hub.load(integrity_env["ck"], integrity_env["data"]))


def test_hub_spm_model_missing_and_its_override(integrity_env, caplog):
    """hub.load(data=a directory without the spm.model the checkpoint recorded): CheckpointError naming the file, both
    hashes and the override; allow_dictionary_mismatch=True loads it with warnings, every word then <unk>."""
    from sipe_fairseq import hub
    from sipe_fairseq.hexatag.errors import CheckpointError

    with pytest.raises(CheckpointError) as err:
        hub.load(integrity_env["ck"], integrity_env["nospm"])
    line = str(err.value)
    assert fill(_IT_NO_SPM + _IT_RECORDED, integrity_env) in line and "\n" not in line, line
    assert line.endswith("; --allow-dictionary-mismatch loads it anyway")
    lm = hub.load(integrity_env["ck"], integrity_env["nospm"], allow_dictionary_mismatch=True)
    [scored] = lm.score([_IT_SENTENCE], tags="self")
    assert scored.tokens[:4] == ["<unk>"] * 4 and scored.unknown_words == 4  # every word but "." (in dict.txt whole)
    assert "(--allow-dictionary-mismatch)" in caplog.text and "spm.model is missing" in caplog.text


@pytest.mark.parametrize("name, message", [
    ("missing", "data directory {missing}: no such directory"),
    ("empty", "data directory {empty}: empty: make one from CoNLL-U"),
    ("baddict", _IT_BAD_LINE),
    ("dupdict", "{dupdict}/dict.txt:9: token "),
])
def test_hub_refuses_a_data_directory_it_cannot_use(integrity_env, name, message):
    """hub.load(data=...): a ValueError (DataError) naming the directory, or the file and the line of dict.txt."""
    from sipe_fairseq import hub

    with pytest.raises(ValueError) as err:
        hub.load(integrity_env["ck"], integrity_env[name])
    assert str(err.value).startswith(fill(message, integrity_env)) and "\n" not in str(err.value), str(err.value)


def test_override_is_accepted_and_loads_with_a_warning(integrity_env, monkeypatch):
    """--allow-dictionary-mismatch on a data directory without spm.model: sipe-eval-lm scores the split (which does
    not need it), sipe-surprisal writes <unk> rows; both warn, exit 0."""
    monkeypatch.setenv("PYTHONWARNINGS", "ignore")
    env = integrity_env
    for argv in ([*_IT_EVAL_LM, env["nospm"], "--path", env["ck"], "--allow-dictionary-mismatch"],
                 [*_IT_SURPRISAL, "--data", env["nospm"], "--path", env["ck"], env["sentences"], "--tags", "self",
                  "--allow-dictionary-mismatch"]):
        proc = launcher.run([sys.executable, *argv], cwd=env["tmp"], timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "spm.model is missing" in proc.stderr and "(--allow-dictionary-mismatch)" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert "\t<unk>\t" in proc.stdout and "▁" not in proc.stdout


# ============================================================================ one-line endings, suites, reports
import json as _json  # noqa: E402  (this section's own imports, kept within it)
import signal as _signal  # noqa: E402
import subprocess as _subprocess  # noqa: E402
import time as _time  # noqa: E402
from pathlib import Path as _Path  # noqa: E402

_ROOT = _Path(__file__).resolve().parents[1]
GET_SUITES = str(_ROOT / "scripts" / "get_suites.py")


def _train_argv(*extra):
    """``python -m fairseq_cli.train`` (fairseq-train, forked by the launcher) on the faults' toy data."""
    from conftest import TRAIN_COMMON, txl

    return ("-m", "fairseq_cli.train", "{data}", *TRAIN_COMMON, *txl("position"), *extra)


def _blimp_copy(name: str, damage: str):
    """A setup: ``{tmp}/NAME/data``, a BLiMP copy of 67 paradigms of 1,000 pairs, paradigm p05 damaged: ``truncated``
    (cut at a line: 11 pairs, 66,011 in all) or ``corrupt`` (cut inside a line)."""
    def setup(env):
        folder = _Path(env["tmp"]) / name / "data"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(67):
            rows = [f'{{"sentence_good": "good {i} {j}", "sentence_bad": "bad {i} {j}"}}\n' for j in range(1000)]
            if i == 5:
                rows = rows[:11] if damage == "truncated" else rows[:11] + [rows[11][:20]]
            (folder / f"p{i:02d}.jsonl").write_text("".join(rows), encoding="utf-8")
    return setup


def _report_row(ppl=100.0, split="test", data="/d", sentences=3):
    nll = [4.0, 5.0, 6.0][:sentences]
    return {"lm": {"ppl": ppl}, "run": {"split": split, "sentences": 40, "data": data, "arch": "sipe_txl_tiny",
                                        "injection": "position"},
            "tag_sources": {"self": {"ppl": ppl, "ppl_per_word": 2 * ppl, "sentences": sentences, "per_sentence": {
                "nll": nll, "tokens": [3] * sentences, "words": [2] * sentences}}}}


def _reports(**files):
    """A setup: ``{tmp}/FILE.json`` for each ``FILE=report``."""
    def setup(env):
        for stem, report in files.items():
            (_Path(env["tmp"]) / f"{stem}.json").write_text(_json.dumps(report))
    return setup


_SEEDS = ("-m", "sipe_fairseq.cli.eval", "seeds")
_SEEDS_OUT = ("--json", "{tmp}/seeds-table.json", "--markdown", "{tmp}/seeds-table.md")
ENDING_FAULTS = [
    Fault("distill-weight-without-teacher", _train_argv("--distill-weight", "1.5", "--save-dir", "{tmp}/distill"), 2,
          "--distill-weight 1.5 without --distill-teacher",
          not_written=("{tmp}/distill/checkpoint_last.pt", "{tmp}/distill/checkpoint_best.pt")),
    Fault("get-suites-truncated-blimp", (GET_SUITES, "{tmp}/suites", "--only", "blimp", "--blimp-from",
                                         "{tmp}/blimp-truncated"), 1,
          "get_suites: blimp from {tmp}/blimp-truncated: p05.jsonl: 11 pairs, expected 1000",
          not_written=("{tmp}/suites",), setup=_blimp_copy("blimp-truncated", "truncated")),
    Fault("get-suites-corrupt-blimp", (GET_SUITES, "{tmp}/suites", "--only", "blimp", "--blimp-from",
                                       "{tmp}/blimp-corrupt"), 1,
          "get_suites: blimp from {tmp}/blimp-corrupt: p05.jsonl:12: not a JSON line",
          not_written=("{tmp}/suites",), setup=_blimp_copy("blimp-corrupt", "corrupt")),
]
REPORT_FAULTS = [
    Fault("seeds-negative-perplexity", (*_SEEDS, "{tmp}/neg-s1.json", "{tmp}/neg-s2.json", *_SEEDS_OUT), 2,
          "row 'neg-s2': score 'blocks p(x|tags)' is -12.5, not a perplexity", not_written=_SEEDS_OUT[1::2],
          setup=_reports(**{"neg-s1": {"neg": _report_row()}, "neg-s2": {"neg": _report_row(ppl=-12.5)}})),
    Fault("seeds-infinite-perplexity", (*_SEEDS, "{tmp}/inf-s1.json", *_SEEDS_OUT), 2,
          "row 'inf-s1': score 'blocks p(x|tags)' is inf, not a finite number", not_written=_SEEDS_OUT[1::2],
          setup=lambda env: (_Path(env["tmp"]) / "inf-s1.json").write_text('{"inf": {"lm": {"ppl": Infinity}}}')),
    Fault("seeds-empty-report", (*_SEEDS, "{tmp}/empty-s1.json", *_SEEDS_OUT), 2,
          "{tmp}/empty-s1.json: an empty report (no row scored)", not_written=_SEEDS_OUT[1::2],
          setup=_reports(**{"empty-s1": {}})),
    Fault("seeds-row-without-scores", (*_SEEDS, "{tmp}/bare-s1.json", *_SEEDS_OUT), 2,
          "row 'bare-s1': no score", not_written=_SEEDS_OUT[1::2], setup=_reports(**{"bare-s1": {"bare": {}}})),
    Fault("seeds-baseline-other-split", (*_SEEDS, "{tmp}/own-s1.json", "{tmp}/none-s1.json", "--baseline", "none",
                                         *_SEEDS_OUT), 2,
          "split differs between row 'own-s1' (test) and its baseline 'none-s1' (valid): not compared",
          not_written=_SEEDS_OUT[1::2],
          setup=_reports(**{"own-s1": {"own": _report_row()}, "none-s1": {"none": _report_row(split="valid")}})),
    Fault("seeds-baseline-other-data", (*_SEEDS, "{tmp}/mine-s1.json", "{tmp}/base-s1.json", "{tmp}/mine-s2.json",
                                        "{tmp}/base-s2.json", "--baseline", "base", *_SEEDS_OUT), 2,
          "data differs between row 'mine-s1' (/d) and its baseline 'base-s1' (/e)", not_written=_SEEDS_OUT[1::2],
          setup=_reports(**{"mine-s1": {"mine": _report_row()}, "base-s1": {"base": _report_row(data="/e")},
                            "mine-s2": {"mine": _report_row()}, "base-s2": {"base": _report_row(data="/e")}})),
    Fault("seeds-baseline-other-sentences", (*_SEEDS, "{tmp}/few-s1.json", "{tmp}/all-s1.json", "--baseline", "all",
                                             *_SEEDS_OUT), 2,
          "tag source self sentences differs between row 'few-s1' (2) and its baseline 'all-s1' (3)",
          not_written=_SEEDS_OUT[1::2],
          setup=_reports(**{"few-s1": {"few": _report_row(sentences=2)}, "all-s1": {"all": _report_row()}})),
]


@pytest.mark.parametrize("fault", ENDING_FAULTS + REPORT_FAULTS, ids=lambda f: f.id)
def test_ending_and_report_faults(fault, faults_env):
    run_fault(fault, faults_env)


def test_the_fault_rows_would_pass_on_sound_input(faults_env, tmp_path):
    """The same reports, sound, are averaged and compared (exit 0): the rows above fail for what they name."""
    from sipe_fairseq.cli.eval import main as eval_main

    for stem, row in (("own-s1", "own"), ("none-s1", "none"), ("own-s2", "own"), ("none-s2", "none")):
        (tmp_path / f"{stem}.json").write_text(_json.dumps({row: _report_row(ppl=100.0 + len(stem))}))
    out = tmp_path / "table.json"
    assert eval_main(["seeds", *(str(p) for p in sorted(tmp_path.glob("*.json"))), "--baseline", "none",
                      "--bootstrap", "100", "--json", str(out)]) == 0
    assert set(_json.loads(out.read_text())["groups"]) == {"own", "none"}


# ---------------------------------------------------------------- shards and workers (issue 49)
# The shard options are checked before any input is read or checkpoint loaded (``{tmp}/absent.pt`` is never
# reached); a merge refuses shards that overlap or leave a share out. The shard files are written by a real run.
_SH_SURPRISAL = ("-m", "sipe_fairseq.cli.surprisal", "--data", "{data}")
_SH_MERGE = ("-m", "sipe_fairseq.cli.eval", "merge")


def _surprisal_shards(*ids):
    """A setup: ``{tmp}/sh-I.json``, shard I of 2 of sipe-surprisal on two sentences, for each I in ``ids``."""
    def setup(env):
        tmp = _Path(env["tmp"])
        (tmp / "sh-in.txt").write_text("the dog sleeps .\nsome owls sing .\n")
        for i in ids:
            if not (tmp / f"sh-{i}.json").exists():
                argv = [sys.executable, *(fill(a, env) for a in _SH_SURPRISAL), "--path", env["ck"], "--workers", "1",
                        "--num-shards", "2", "--shard-id", str(i), "--output", str(tmp / f"sh-{i}.json"),
                        str(tmp / "sh-in.txt")]
                proc = launcher.run(argv, cwd=env["tmp"])
                assert proc.returncode == 0, proc.stderr[-2000:]
    return setup


SHARD_FAULTS = [
    Fault("surprisal-shard-id-out-of-range", (*_SH_SURPRISAL, "--path", "{tmp}/absent.pt", "--num-shards", "2",
                                              "--shard-id", "2", "--output", "{tmp}/sh-a.json", "{tmp}/sh-in.txt"),
          2, "--shard-id 2: expected 0 <= --shard-id < --num-shards (2)", not_written=("{tmp}/sh-a.json",),
          setup=_ir_file("sh-in.txt", b"the dog sleeps .\n")),
    Fault("surprisal-no-shards", (*_SH_SURPRISAL, "--path", "{tmp}/absent.pt", "--num-shards", "0", "--shard-id",
                                  "0", "--output", "{tmp}/sh-b.json", "{tmp}/sh-in.txt"),
          2, "--num-shards 0: expected an integer >= 1", not_written=("{tmp}/sh-b.json",),
          setup=_ir_file("sh-in.txt", b"the dog sleeps .\n")),
    Fault("surprisal-shard-without-output", (*_SH_SURPRISAL, "--path", "{tmp}/absent.pt", "--num-shards", "2",
                                             "--shard-id", "1", "{tmp}/sh-in.txt"),
          2, "a shard needs --output", setup=_ir_file("sh-in.txt", b"the dog sleeps .\n")),
    Fault("blimp-negative-shard-id", ("-m", "sipe_fairseq.cli.eval", "blimp", "--data", "{data}", "--path",
                                      "{tmp}/absent.pt", "--blimp", "{tmp}/absent-blimp", "--num-shards", "2",
                                      "--shard-id", "-1", "--json", "{tmp}/sh-c.json"),
          2, "--shard-id -1: expected 0 <= --shard-id < --num-shards (2)", not_written=("{tmp}/sh-c.json",)),
    Fault("merge-surprisal-shard-twice", (*_SH_MERGE, "{tmp}/sh-0.json", "{tmp}/sh-0.json", "--output",
                                          "{tmp}/sh-d.tsv"),
          2, "{tmp}/sh-0.json: shard 0 of 2 overlaps {tmp}/sh-0.json", not_written=("{tmp}/sh-d.tsv",),
          setup=_surprisal_shards(0)),
    Fault("merge-surprisal-shard-missing", (*_SH_MERGE, "{tmp}/sh-1.json", "--output", "{tmp}/sh-e.tsv"),
          2, "shard 0 of 2 missing", not_written=("{tmp}/sh-e.tsv",), setup=_surprisal_shards(1)),
]


@pytest.mark.parametrize("fault", SHARD_FAULTS, ids=lambda f: f.id)
def test_shard_faults(fault, faults_env):
    run_fault(fault, faults_env)


def test_the_shard_rows_would_pass_on_sound_input(faults_env, tmp_path):
    """Both shards merge (exit 0) into one row per token of both sentences: the merge rows fail for what they name."""
    _surprisal_shards(0, 1)(faults_env)
    out = tmp_path / "merged.tsv"
    proc = launcher.run([sys.executable, *(fill(a, faults_env) for a in _SH_MERGE), f"{faults_env['tmp']}/sh-0.json",
                         f"{faults_env['tmp']}/sh-1.json", "--output", str(out)], cwd=faults_env["tmp"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = out.read_text().splitlines()
    assert rows[0].startswith("sentence_id\t") and {r.split("\t")[0] for r in rows[1:]} == {"1", "2"}, rows[:3]


# ---------------------------------------------------------------- Ctrl-C: one line, status 130, nothing written
def _open_writer(fifo: str, proc, timeout: float = 120.0) -> int:
    """The FIFO's write end, once the command has opened it for reading (so its set-up, the error hook
    included, has run); fails if the command ends first."""
    end = _time.monotonic() + timeout
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no reader yet
            assert proc.poll() is None, f"the command ended before it read its input: {proc.communicate()}"
            assert _time.monotonic() < end, "the command never opened its input"
            _time.sleep(0.05)


INTERRUPTED = [  # (id, argv after the python executable, what is fed before Ctrl-C, forked or a real interpreter)
    ("sipe-hexatag", ("-m", "sipe_fairseq.cli.hexatag", "encode", "{fifo}", "-o", "{out}"),
     "1\tdogs\t_\t_\t_\t_\t2\tnsubj\t_\t_\n2\tbark\t_\t_\t_\t_\t0\troot\t_\t_\n\n1\tcats", False),
    ("sipe-surprisal", ("-m", "sipe_fairseq.cli.surprisal", "--path", "{ck}", "--output", "{out}", "{fifo}"),
     "the dog barks\nthe cat", True),
    ("sipe-eval-seeds", ("-m", "sipe_fairseq.cli.eval", "seeds", "{fifo}", "--json", "{out}"), '{"m-s1": {"lm": ', True),
]


@pytest.mark.parametrize("case", INTERRUPTED, ids=lambda c: c[0])
def test_ctrl_c_ends_in_one_line_and_writes_nothing(case, faults_env, tmp_path):
    """Ctrl-C (SIGINT to the process) while the command reads an input that never ends (a FIFO kept open): one
    line ``sipe_fairseq: interrupted``, killed by SIGINT (a shell's status 130), no output file and no temporary
    file. sipe-hexatag runs in a real interpreter (its -o file is open, through the atomic writer, when the signal
    comes); the others forked by the suite's launcher, with torch and fairseq imported."""
    name, argv, fed, forked = case
    fifo, out = tmp_path / "input.fifo", tmp_path / "out.txt"
    os.mkfifo(fifo)
    cmd = [sys.executable, *(a.format(fifo=fifo, out=out, ck=faults_env["ck"]) for a in argv)]
    # a shell's foreground command gets SIGINT at its default even when the suite runs as a background job (which
    # a non-interactive shell starts with SIGINT ignored, and Python keeps it ignored at start-up)
    proc = launcher.popen(cmd, cwd=tmp_path, merge_stderr=False) if forked else \
        _subprocess.Popen(cmd, cwd=tmp_path, stdout=_subprocess.PIPE, stderr=_subprocess.PIPE, text=True,
                          preexec_fn=lambda: _signal.signal(_signal.SIGINT, _signal.SIG_DFL))
    fd = _open_writer(str(fifo), proc)
    try:
        os.write(fd, fed.encode())
        _time.sleep(1.0)  # the command reads what was fed and waits for more
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(_signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        os.close(fd)
    assert proc.returncode in (-_signal.SIGINT, 130), (proc.returncode, stderr)
    assert stderr.splitlines() == ["sipe_fairseq: interrupted"] and stdout == "", (stdout, stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["input.fifo"]  # no output, no temporary file


# ---------------------------------------------------------------- the Python interface's structure input
WORDS = ["the", "dog", "barks", "loudly"]
HUB_FAULTS = [  # (id, call on the loaded model, a piece of the ValueError's message)
    ("cycle", lambda lm: lm.score(["a dog barks", (WORDS, [2, 3, 0, 3]), (WORDS, [0, 3, 4, 2])], tags="given"),
     "sentence 3 ('the dog barks loudly'): heads [0, 3, 4, 2] form no tree: cycle through word 2"),
    ("head-out-of-range", lambda lm: lm.score([(WORDS, [2, 9, 0, 3])], tags="self"),
     "sentence 1 ('the dog barks loudly'): heads [2, 9, 0, 3] form no tree: word 2: head 9 out of range 0..4"),
    ("two-roots", lambda lm: lm.score([{"words": WORDS, "heads": [0, 0, 2, 3]}]),
     "sentence 1 ('the dog barks loudly'): heads [0, 0, 2, 3] form no tree: expected exactly one root"),
    ("head-not-a-number", lambda lm: lm.score(["a dog", "the cat", (WORDS, [2, "x", 0, 3])]),
     "sentence 3 ('the dog barks loudly'): head 'x' of word 2 is not a whole number"),
    ("head-with-a-fraction", lambda lm: lm.score(["a dog", "the cat", (WORDS, [2, 2.7, 0, 3])]),
     "sentence 3 ('the dog barks loudly'): head 2.7 of word 2 is not a whole number"),
    ("sentence-none", lambda lm: lm.score(["a dog", None]),
     "sentence 2 (None): expected raw text, a list of words or (words, heads), got NoneType"),
    ("prompt-none", lambda lm: lm.generate(["the dog", None]), "prompt 2 (None): expected a string, got NoneType"),
]


@pytest.fixture(scope="module")
def hub_model(faults_env):
    from sipe_fairseq import hub

    # a parser that cannot load: a sentence parsed before the bad one is checked would fail with another message
    return hub.load(faults_env["ck"], parser="no-such-backend")


@pytest.mark.parametrize("case", HUB_FAULTS, ids=lambda c: c[0])
def test_hub_structure_input_is_checked_first(case, hub_model):
    _, call, message = case
    with pytest.raises(ValueError) as err:
        call(hub_model)
    assert type(err.value) is ValueError and message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_hub_whole_number_heads_are_taken(hub_model):
    """Heads 2.0, numpy integers and digit strings are whole numbers: the same score as plain ints."""
    import numpy as np

    plain, = hub_model.score([(WORDS, [2, 3, 0, 3])], tags="given")
    other, = hub_model.score([(WORDS, [2.0, np.int64(3), "0", 3])], tags="given")
    assert other.logprob == plain.logprob and other.structure["heads"] == [2, 3, 0, 3]


def test_a_worker_killed_mid_search_ends_the_command_in_one_line(faults_env, tmp_path):
    """sipe-surprisal --workers 2, a real interpreter, whose worker process is killed (SIGKILL, as the out-of-memory
    killer does) when it takes the batch of the input's second sentence: one line naming that sentence and the
    cause, exit status 1, no output file (issue 49: a worker that dies)."""
    (tmp_path / "in.txt").write_text("the dog sleeps .\nsome owls sing .\na cat runs .\n")
    out = tmp_path / "out.tsv"
    kill_second = ("import os, signal, sys\n"
                   "from sipe_fairseq.structure import workers\n"
                   "run = workers._run\n"
                   "workers._run = lambda b: os.kill(os.getpid(), signal.SIGKILL) if 1 in b else run(b)\n"
                   "from sipe_fairseq.cli.surprisal import main\n"
                   "sys.argv[0] = 'sipe-surprisal'\n"
                   "sys.exit(main())\n")
    proc = launcher.run([sys.executable, "-c", kill_second, "--data", faults_env["data"], "--path", faults_env["ck"],
                         "--workers", "2", "--tags-batch-sentences", "1", "--output", str(out),
                         str(tmp_path / "in.txt")], cwd=str(tmp_path))
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[0].endswith(f"{tmp_path / 'in.txt'}: a worker process was killed by SIGKILL (what the system's "
                             "out-of-memory killer sends: a lower --max-memory or fewer --workers may fit) while scoring "
                             "1 sentences (sentence 2 ('some owls sing .')): the search stopped and nothing is written"), \
        lines[0]
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]
