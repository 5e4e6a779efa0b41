"""The subcommands of ``sipe-eval`` (:mod:`sipe_fairseq.cli.eval`), one module each: ``HELP`` (one line),
``DESCRIPTION`` (the subcommand's ``--help`` text: the docstring of the :mod:`sipe_fairseq.eval` module
that does the work), ``add_arguments(parser)`` and ``run(args) -> int``."""
