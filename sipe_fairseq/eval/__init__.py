"""Evaluation: scoring, aggregation and reports (LM scores by position type and the joint bound; BLiMP,
SyntaxGym, GLUE, seeds, attention, the Table 2 report, markdown tables). It parses no arguments: the
commands are in :mod:`sipe_fairseq.cli` (``sipe-eval``, ``sipe-eval-lm``)."""
