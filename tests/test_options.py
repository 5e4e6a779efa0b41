"""Every option is declared once (issue 34, item 1) and library code does not print (item 7).

* The ``--tags*`` and ``--gilt-count-*`` options of every command that takes ``--tags`` are generated from
  :class:`~sipe_fairseq.structure.options.StructureOptions`: each command takes all of them (or refuses one
  in one line, exit status 2), and its argparse defaults are the dataclass's.
* ``sipe-preprocess``'s options are generated from :class:`~sipe_fairseq.data.preprocess.options.PreprocessOptions`.
* The GiLT graph options are one declaration with each model's own defaults, and a configuration saved
  before a field existed is read with the field's declared default.
* No function outside ``cli/`` prints to stdout (a module's own ``main()`` and stderr aside).
"""
import argparse
import ast
import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import sipe_fairseq
from sipe_fairseq.cli import eval as sipe_eval
from sipe_fairseq.cli import eval_lm, surprisal
from sipe_fairseq.cli.eval_commands import reading_times
from sipe_fairseq.cli.options import SPLIT_ONLY, structure_options
from sipe_fairseq.structure.options import SUITE_WIDTH, StructureOptions, command_line_fields

ROOT = Path(sipe_fairseq.__file__).parent


def _subparser(name):
    parser = sipe_eval.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


# every command that takes --tags: (name, parser, the required arguments, the fields it refuses)
COMMANDS = {
    "sipe-eval-lm": (eval_lm.build_parser, ["DATA", "--path", "ck.pt"], {}),
    "sipe-eval blimp": (lambda: _subparser("blimp"), ["--data", "D", "--path", "ck.pt", "--blimp", "b"], SPLIT_ONLY),
    "sipe-eval syntaxgym": (lambda: _subparser("syntaxgym"), ["--data", "D", "--path", "ck.pt", "--suites", "s"],
                            SPLIT_ONLY),
    "sipe-eval report": (lambda: _subparser("report"), [], {}),
    "sipe-eval sweep-plot": (lambda: _subparser("sweep-plot"), ["--report", "r.json", "--out", "o.png"], {}),
    "sipe-surprisal": (surprisal.get_parser, ["--path", "ck.pt"], surprisal.REFUSED),
    "sipe-eval reading-times": (lambda: _subparser("reading-times"), ["--rt", "R", "--path", "ck.pt"],
                                reading_times.REFUSED),
}
SUITES = ("sipe-eval blimp", "sipe-eval syntaxgym")
# a value other than the default for every command-line field
OTHER = {"constrained": [], "top_pairs": ["3"], "abstain": ["0.25"], "mass": ["0.5"], "max_sentences": ["7"],
         "batch_sentences": ["9"], "count_beam": ["2"], "count_rule": ["allowed-then-top"], "max_memory": ["64M"],
         "workers": ["3"], "pair_mass": ["0.5"], "share_prefixes": ["all"]}
WANT = {"constrained": False, "top_pairs": 3, "abstain": 0.25, "mass": 0.5, "max_sentences": 7, "batch_sentences": 9,
        "count_beam": 2, "count_rule": "allowed-then-top", "max_memory": 64 * 2 ** 20, "workers": 3,
        "pair_mass": 0.5, "share_prefixes": "all"}


def test_every_structure_field_of_the_command_line_has_a_value_here():
    """The table above covers every command-line field (a new field must be added to it)."""
    assert sorted(f.name for f in command_line_fields()) == sorted(OTHER) == sorted(WANT)


def test_only_the_commands_with_tags_declare_tags_options():
    """The commands of sipe-eval that take no --tags declare none of its options; the ones above all do."""
    parser = sipe_eval.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    with_tags = {name for name, p in sub.choices.items() if "--tags" in p._option_string_actions}
    assert with_tags == {c.split()[1] for c in COMMANDS if c.startswith("sipe-eval ")}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_command_declares_every_tags_option_with_the_dataclass_defaults(command):
    build, required, refused = COMMANDS[command]
    parser = build()
    flags = {f.metadata["flag"] for f in command_line_fields()}
    assert flags | {"--tags"} <= set(parser._option_string_actions), command
    args = parser.parse_args(required)
    assert args.tags is None
    own = SUITE_WIDTH if command in SUITES else {}  # the suites' own width defaults, declared beside the fields
    assert structure_options(args) == dataclasses.replace(StructureOptions(), **own)  # the declaration's defaults


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("name", sorted(OTHER))
def test_command_takes_or_refuses_each_tags_option(command, name, capsys):
    """Each option is taken (its value reaches StructureOptions) or refused: exit status 2, one line
    naming the option and why."""
    build, required, refused = COMMANDS[command]
    field = next(f for f in command_line_fields() if f.name == name)
    argv = required + ["--tags", "self,beam:2", field.metadata["flag"], *OTHER[name]]
    if name in refused:
        with pytest.raises(SystemExit) as e:
            build().parse_args(argv)
        assert e.value.code == 2
        assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
            f"error: {field.metadata['flag']}: {refused[name]}")
        return
    args = build().parse_args(argv)
    assert args.tags == ["self", "beam:2"]
    assert getattr(structure_options(args), name) == WANT[name]
    own = SUITE_WIDTH if command in SUITES else {}
    assert structure_options(args) == dataclasses.replace(StructureOptions(), **{**own, name: WANT[name]})


def test_blimp_refuses_tags_max_sentences_as_the_user_runs_it(capsys):
    """Through sipe-eval's main: exit status 2 and one error line, before anything is read (the inputs do not exist)."""
    with pytest.raises(SystemExit) as e:
        sipe_eval.main(["blimp", "--data", "no-such-dir", "--path", "no.pt", "--blimp", "no.jsonl",
                        "--tags-max-sentences", "5"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"sipe-eval blimp: error: --tags-max-sentences: {SPLIT_ONLY['max_sentences']}"
    assert not any("Traceback" in line for line in err)


@pytest.mark.parametrize("flag, value, message", [
    ("--gilt-count-beam", "0", "expected an integer >= 1, got 0"),
    ("--gilt-count-beam", "x", "expected an integer >= 1, got 'x'"),
    ("--tags-top-pairs", "-1", "expected an integer >= 0, got -1"),
    ("--tags-abstain", "1.5", "expected a number in [0, 1], got 1.5"),
    ("--tags-mass", "0", "expected a number in (0, 1], got 0.0"),
    ("--tags-max-sentences", "0", "expected an integer >= 1, got 0"),
])
def test_one_range_check_for_the_command_line_and_the_library(flag, value, message, capsys):
    """argparse and StructureOptions report the same range, from the one declaration."""
    with pytest.raises(SystemExit) as e:
        eval_lm.build_parser().parse_args(["DATA", "--path", "ck.pt", flag, value])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f"error: argument {flag}: {message}")
    field = next(f for f in command_line_fields() if f.metadata["flag"] == flag)
    try:
        number = float(value) if field.type is float else int(value)
    except ValueError:
        return  # not a number: only the command line sees it
    with pytest.raises(ValueError) as e:
        StructureOptions(**{field.name: number})
    assert str(e.value) == f"{flag}: {message}"


def test_bad_tag_source_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        _subparser("syntaxgym").parse_args(["--data", "D", "--path", "c", "--suites", "s", "--tags", "self,beam:0"])
    assert e.value.code == 2
    assert "argument --tags: tag source 'beam:0': expected" in capsys.readouterr().err


# ----------------------------------------------------------------------------- placement and model fields
def test_tag_head_placement_default_is_declared_once():
    from sipe_fairseq.data.lm_dataset import DEFAULT_PLACEMENT, PLACEMENTS, task_placement
    from sipe_fairseq.structure.hexatags import HexatagPolicy
    from sipe_fairseq.tasks.hexatag_lm import HexatagLMConfig

    assert HexatagLMConfig().tag_head_placement == DEFAULT_PLACEMENT == StructureOptions().placement == PLACEMENTS[0]
    assert HexatagPolicy.__init__.__defaults__[0] == DEFAULT_PLACEMENT
    plain = argparse.Namespace(args=argparse.Namespace(data="d"))  # a task without the option
    assert task_placement(plain) == DEFAULT_PLACEMENT and task_placement(plain, default=None) is None
    assert task_placement(argparse.Namespace(args=argparse.Namespace(tag_head_placement="last_subword"))) == \
        "last_subword"
    with pytest.raises(ValueError, match="placement: expected one of first_subword, last_subword, got 'middle'"):
        StructureOptions(placement="middle")


def test_gilt_graph_options_are_one_declaration_with_each_models_defaults():
    from sipe_fairseq.models.gilt_arcs import GRAPH_DEFAULTS
    from sipe_fairseq.models.gilt_lm import GiltConfig
    from sipe_fairseq.models.gilt_transformer_lm import GiltTransformerLMConfig

    txl, gpt = GiltConfig.__dataclass_fields__, GiltTransformerLMConfig.__dataclass_fields__
    shared = ("gilt_first_layer", "gilt_proj_init_std", "gilt_arc_scorer", "gilt_table_init_std", "gilt_arc_table_init_std")
    for name in shared:
        assert txl[name].metadata["help"] == gpt[name].metadata["help"], name
        assert txl[name].type is gpt[name].type, name
    for config, model in ((GiltConfig(), "gilt_txl"), (GiltTransformerLMConfig(), "gilt_transformer_lm")):
        for name, value in GRAPH_DEFAULTS[model].items():
            assert getattr(config, name) == value
    # the numbers each model had before they were declared once
    assert (GiltConfig().gilt_first_layer, GiltConfig().gilt_table_init_std) == (1, 1.0)
    assert (GiltTransformerLMConfig().gilt_first_layer, GiltTransformerLMConfig().gilt_table_init_std) == (0, 0.02)


def test_a_saved_config_without_a_field_gets_its_declared_default():
    """fairseq fills a saved model configuration from the dataclass only for a model's own name; a preset's
    (gilt_txl_tiny) reaches the model as saved. declared_defaults fills the absent fields, keeps the others."""
    from sipe_fairseq.models._common import declared_defaults
    from sipe_fairseq.models.gilt_lm import GiltConfig

    saved = OmegaConf.structured(GiltConfig(gilt_table_init_std=0.5, decoder_layers=3, max_target_positions=64))
    saved = OmegaConf.create({k: v for k, v in OmegaConf.to_container(saved).items()
                              if k not in ("gilt_arc_table_init_std", "gilt_first_layer", "tokens_per_sample")})
    OmegaConf.set_struct(saved, True)
    assert not hasattr(saved, "gilt_first_layer")
    declared_defaults(saved, GiltConfig)
    assert saved.gilt_first_layer == GiltConfig().gilt_first_layer
    assert saved.gilt_arc_table_init_std == GiltConfig().gilt_arc_table_init_std
    assert saved.gilt_table_init_std == 0.5 and saved.decoder_layers == 3  # what it holds is kept
    assert "tokens_per_sample" not in saved  # an interpolation of the task's setting is not invented
    ns = argparse.Namespace(decoder_layers=2)
    declared_defaults(ns, GiltConfig)
    assert ns.decoder_layers == 2 and ns.gilt_txl_biases == GiltConfig().gilt_txl_biases


# ----------------------------------------------------------------------------- sipe-preprocess
def test_preprocess_options_are_generated_from_the_dataclass():
    from sipe_fairseq.cli.preprocess import get_parser, options_from_args
    from sipe_fairseq.data.preprocess.options import PreprocessOptions

    parser = get_parser()
    defaults = options_from_args(parser.parse_args(["--train", "t.conllu", "--destdir", "out"]))
    assert defaults == PreprocessOptions(train="t.conllu", destdir="out")
    argv = ["--train", "t", "--destdir", "d", "--valid", "v1,v2", "--test", "x", "--input-format", "text",
            "--segment-sentences", "--documents", "wikitext", "--drop-headings", "--spm-vocab-size", "100",
            "--spm-model-type", "bpe", "--nwordssrc", "50", "--keep-text", "--deprel", "--arcs", "deps",
            "--batch-size", "3", "--threads", "2", "--no-progress", "--backend", "spacy", "--workers", "3"]
    got = options_from_args(parser.parse_args(argv))
    assert got == PreprocessOptions(train="t", destdir="d", valid=["v1", "v2"], test=["x"], input_format="text",
                                    segment=True, documents="wikitext", drop_headings=True, spm_vocab_size=100,
                                    spm_model_type="bpe", nwordssrc=50, keep_text=True, deprel=True, arcs="deps",
                                    batch_size=3, threads=2, progress=False, backend="spacy", workers=3)
    changed = {f.name for f in dataclasses.fields(PreprocessOptions)
               if getattr(got, f.name) != getattr(defaults, f.name)}
    untouched = {"spm_model", "srcdict", "no_split", "strict", "fail_on_refusal", "thresholdsrc", "padding_factor",
                 "save_conllu"}
    assert changed | untouched | {"train", "destdir"} == {f.name for f in dataclasses.fields(PreprocessOptions)}


# ----------------------------------------------------------------------------- library code does not print


def _stdout_prints(path: Path):
    """(function, line) of every print() to stdout in ``path``: no ``file=`` argument, or ``file=sys.stdout``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id == "print":
                target = next((k.value for k in child.keywords if k.arg == "file"), None)
                if target is None or ast.unparse(target) == "sys.stdout":
                    out.append((function, child.lineno))
            visit(child, name)

    visit(tree, None)
    return out


def test_library_code_does_not_print_to_stdout():
    found = set()
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("cli/"):
            continue
        for function, _line in _stdout_prints(path):
            if function != "main":  # a module's own command
                found.add((rel, function))
    assert not found, sorted(found)


def test_the_print_walk_finds_a_print(tmp_path):
    """The walk above would see a print in library code (and not one to stderr; main's is told apart)."""
    sample = tmp_path / "sample.py"
    sample.write_text("import sys\n\ndef f():\n    print('x')\n    print('y', file=sys.stderr)\n\n"
                      "def main():\n    print('z')\n", encoding="utf-8")
    assert _stdout_prints(sample) == [("f", 4), ("main", 8)]
